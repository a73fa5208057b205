//! The reconciler's access to a cluster, exactly as `infra/kustomize` grants it.
//!
//! [`MANIFESTS`] embeds the namespaces, the ServiceAccount and the RBAC of `infra/kustomize/base`
//! (the very files a deployment applies). [`apply`] writes them with server-side apply through an
//! admin client; [`service_account_config`] then asks the TokenRequest API for a token of the
//! `tuneplane-reconciler` ServiceAccount and returns a client configuration that authenticates
//! with it (through a token file that [`TokenRefresher`] renews), so a reconciler run outside the
//! cluster (`tuneplane dev --kubeconfig`, the real-cluster tests) meets the same authorizer a
//! deployed one does: a missing permission fails here as it would in production.
//!
//! [`REQUIRED`] lists every request the reconciler makes; a unit test keeps it equal to the rules
//! of the manifests (no more, no less), and the real-cluster tests check each against the API
//! server's authorizer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

use crate::{Error, Result};

/// Namespace of the reconciler (its ServiceAccount and Lease).
pub const SYSTEM_NAMESPACE: &str = "tuneplane-system";
/// Name of the reconciler's ServiceAccount.
pub const SERVICE_ACCOUNT: &str = "tuneplane-reconciler";
/// Field manager of the applied manifests.
const FIELD_MANAGER: &str = "tuneplane-access";
/// Lifetime asked of each token; [`TokenRefresher`] renews well before it ends.
const TOKEN_SECONDS: i64 = 3600;

/// The manifests of `infra/kustomize/base` that give the reconciler its identity and permissions.
pub const MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../infra/kustomize/base/namespace.yaml"),
    ),
    (
        "serviceaccount.yaml",
        include_str!("../../infra/kustomize/base/serviceaccount.yaml"),
    ),
    (
        "rbac-read.yaml",
        include_str!("../../infra/kustomize/base/rbac-read.yaml"),
    ),
    (
        "rbac-write.yaml",
        include_str!("../../infra/kustomize/base/rbac-write.yaml"),
    ),
];

/// One kind of request the reconciler makes: API group, resource (with `/subresource`), verb, and
/// the namespace it is made in (`None`: cluster-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource, `pods/log` for a subresource.
    pub resource: &'static str,
    /// Verb the reconciler needs (`get`, `list`, `watch`, `create`, ...).
    pub verb: &'static str,
    /// Namespace, or `None` for a cluster-wide request.
    pub namespace: Option<&'static str>,
}

const fn cluster(group: &'static str, resource: &'static str, verb: &'static str) -> Access {
    Access {
        group,
        resource,
        verb,
        namespace: None,
    }
}

const fn within(
    namespace: &'static str,
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
) -> Access {
    Access {
        group,
        resource,
        verb,
        namespace: Some(namespace),
    }
}

const JOBS: &str = tuneplane_core::constants::DEFAULT_NAMESPACE;

/// Every request the reconciler makes: nodes and pods are listed and watched cluster-wide
/// (capacity needs every pod on every node); Events and RayJobs are listed and watched, and logs
/// read (`get` `pods/log`), only in the jobs namespace; nothing is read one by one; workloads are
/// created and deleted in the jobs namespace, and a stopped Ray job is stopped through its head's
/// gate first (`pods/proxy`: `create` for the POST, `get` for its status); the Lease lives in the reconciler's own namespace.
pub const REQUIRED: &[Access] = &[
    cluster("", "nodes", "list"),
    cluster("", "nodes", "watch"),
    cluster("", "pods", "list"),
    cluster("", "pods", "watch"),
    within(JOBS, "", "events", "list"),
    within(JOBS, "", "events", "watch"),
    within(JOBS, "", "pods/log", "get"),
    within(JOBS, "", "pods/proxy", "get"),
    within(JOBS, "", "pods/proxy", "create"),
    within(JOBS, "ray.io", "rayjobs", "list"),
    within(JOBS, "ray.io", "rayjobs", "watch"),
    within(JOBS, "ray.io", "rayjobs", "create"),
    within(JOBS, "ray.io", "rayjobs", "delete"),
    within(JOBS, "", "pods", "create"),
    within(JOBS, "", "pods", "delete"),
    within(JOBS, "", "secrets", "create"),
    within(JOBS, "", "secrets", "delete"),
    within(JOBS, "networking.k8s.io", "networkpolicies", "list"),
    within(JOBS, "networking.k8s.io", "networkpolicies", "create"),
    within(JOBS, "networking.k8s.io", "networkpolicies", "delete"),
    within(SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "get"),
    within(SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "create"),
    within(SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "update"),
];

/// Every object of [`MANIFESTS`], as JSON, in file order.
pub fn objects() -> Result<Vec<(&'static str, Value)>> {
    let mut out = Vec::new();
    for (file, text) in MANIFESTS {
        for doc in text.split("\n---") {
            if doc
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
            {
                continue;
            }
            let value: Value = yaml_serde::from_str(doc).map_err(|e| Error::Manifest {
                file,
                message: e.to_string(),
            })?;
            out.push((*file, value));
        }
    }
    Ok(out)
}

/// One granted permission: `(group, resource, verb, namespace)`, namespace `None` cluster-wide.
pub type Grant = (String, String, String, Option<String>);

/// The rules the manifests grant the ServiceAccount, expanded to one [`Grant`] per group,
/// resource and verb.
pub fn granted() -> Result<Vec<Grant>> {
    let mut out = Vec::new();
    for (file, obj) in objects()? {
        let kind = obj["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        let namespace = (kind == "Role").then(|| {
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        });
        let rules = obj["rules"].as_array().ok_or(Error::Manifest {
            file,
            message: format!("{kind} without rules"),
        })?;
        for rule in rules {
            let list = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        out.push((
                            group.clone(),
                            resource.clone(),
                            verb.clone(),
                            namespace.clone(),
                        ));
                    }
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Applies [`MANIFESTS`] (server-side apply, forced) through an admin client.
pub async fn apply(admin: &Client) -> Result<()> {
    for (file, obj) in objects()? {
        let (group, version) = match obj["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                obj["apiVersion"].as_str().unwrap_or_default().to_string(),
            ),
        };
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let gvk = GroupVersionKind::gvk(&group, &version, &kind);
        let (resource, caps) = discovery::pinned_kind(admin, &gvk)
            .await
            .map_err(|source| Error::kube("discover", format!("{kind} ({file})"), source))?;
        let api: Api<DynamicObject> = match (caps.scope, obj["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(admin.clone(), ns, &resource),
            _ => Api::all_with(admin.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|source| Error::kube("apply", format!("{kind} {name} ({file})"), source))?;
    }
    Ok(())
}

/// Asks the TokenRequest API for a fresh token of the reconciler's ServiceAccount.
pub async fn request_token(admin: &Client) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer = api
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .map_err(|source| {
            let account = format!(
                "serviceaccount {SYSTEM_NAMESPACE}/{SERVICE_ACCOUNT} (is the API server started with service-account token signing?)"
            );
            Error::kube("request a token of", account, source)
        })?;
    Ok(answer.status.and_then(|s| s.token).unwrap_or_default())
}

fn write_token(path: &Path, token: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let fail = |source| Error::TokenFile {
        path: path.display().to_string(),
        source,
    };
    std::fs::write(&tmp, token).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

/// Renews the reconciler's token file until dropped.
pub struct TokenRefresher {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenRefresher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Grants the reconciler its access ([`apply`]), writes a ServiceAccount token to `token_file`
/// and returns a configuration of `admin_config`'s cluster that authenticates with that file
/// (kube-rs rereads it), plus the task that keeps the token fresh.
pub async fn service_account_config(
    admin_config: &kube::Config,
    token_file: &Path,
) -> Result<(kube::Config, TokenRefresher)> {
    let admin = Client::try_from(admin_config.clone())
        .map_err(|source| Error::kube("build", "a client from the kubeconfig", source))?;
    apply(&admin).await?;
    write_token(token_file, &request_token(&admin).await?)?;
    let mut config = admin_config.clone();
    config.auth_info = kube::config::AuthInfo {
        token_file: Some(token_file.display().to_string()),
        ..kube::config::AuthInfo::default()
    };
    let path: PathBuf = token_file.to_path_buf();
    let task = tokio::spawn(async move {
        loop {
            // Renew at a third of the lifetime; retry a failed renewal a minute later.
            let mut wait = Duration::from_secs((TOKEN_SECONDS / 3).unsigned_abs());
            match request_token(&admin).await {
                Ok(token) if !token.is_empty() => {
                    if let Err(e) = write_token(&path, &token) {
                        tracing::warn!(error = %e, "cannot renew the reconciler's token");
                        wait = Duration::from_secs(60);
                    }
                }
                Ok(_) => wait = Duration::from_secs(60),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renew the reconciler's token");
                    wait = Duration::from_secs(60);
                }
            }
            tokio::time::sleep(wait).await;
        }
    });
    Ok((config, TokenRefresher { task }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_access_equals_what_the_manifests_grant() {
        let granted = granted().unwrap();
        let mut required: Vec<Grant> = REQUIRED
            .iter()
            .map(|a| {
                (
                    a.group.to_string(),
                    a.resource.to_string(),
                    a.verb.to_string(),
                    a.namespace.map(str::to_string),
                )
            })
            .collect();
        required.sort();
        let extra: Vec<_> = granted.iter().filter(|g| !required.contains(g)).collect();
        let missing: Vec<_> = required.iter().filter(|r| !granted.contains(r)).collect();
        assert!(extra.is_empty(), "granted but never used: {extra:?}");
        assert!(missing.is_empty(), "used but not granted: {missing:?}");
    }

    #[test]
    fn manifests_parse_into_the_expected_objects() {
        let kinds: Vec<String> = objects()
            .unwrap()
            .iter()
            .map(|(_, o)| o["kind"].as_str().unwrap_or_default().to_string())
            .collect();
        for kind in [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "Role",
            "RoleBinding",
        ] {
            assert!(
                kinds.iter().any(|k| k == kind),
                "{kind} missing in {kinds:?}"
            );
        }
    }
}
