//! The reconciler's permissions on a real API server (`TUNEPLANE_TEST_K8S=real`): what the
//! authorizer allows its ServiceAccount after `infra/kustomize`'s RBAC is applied is exactly
//! `access::REQUIRED` (every required request allowed, the nearest other requests denied: the
//! same answers as `kubectl auth can-i --as system:serviceaccount:tuneplane-system:tuneplane-reconciler`),
//! and, once the scenario suite has run, the API server's audit log shows that the reconciler
//! used every grant and was never refused.
//!
//! On the kubesim backend these tests say they were skipped: kubesim has no authorizer.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tuneplane_reconciler::access::{self, Access, REQUIRED};

const USER: &str = "system:serviceaccount:tuneplane-system:tuneplane-reconciler";

async fn admin() -> Option<kube::Client> {
    if !common::real::is_real() {
        eprintln!("skipped: needs {}=real", common::real::BACKEND_VAR);
        return None;
    }
    let path = std::env::var(common::real::KUBECONFIG_VAR)
        .unwrap_or_else(|_| panic!("{} is not set", common::real::KUBECONFIG_VAR));
    let file = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    access::apply(&client).await.unwrap();
    Some(client)
}

/// Whether the authorizer allows the reconciler's ServiceAccount `a`.
async fn allowed(client: &kube::Client, a: &Access) -> bool {
    let (resource, subresource) = match a.resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (a.resource.to_string(), None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(USER.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:tuneplane-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(a.group.into()),
                resource: Some(resource),
                subresource,
                verb: Some(a.verb.into()),
                namespace: a.namespace.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    api.create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

/// Requests next to the required ones that the reconciler must not be allowed.
const DENIED: &[Access] = &[
    Access {
        group: "",
        resource: "pods",
        verb: "get",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "",
        resource: "nodes",
        verb: "get",
        namespace: None,
    },
    Access {
        group: "",
        resource: "pods",
        verb: "create",
        namespace: Some("default"),
    },
    Access {
        group: "",
        resource: "pods",
        verb: "patch",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "",
        resource: "pods",
        verb: "update",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "",
        resource: "pods",
        verb: "delete",
        namespace: Some("kube-system"),
    },
    Access {
        group: "",
        resource: "pods/exec",
        verb: "create",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "ray.io",
        resource: "rayjobs",
        verb: "create",
        namespace: Some("default"),
    },
    Access {
        group: "ray.io",
        resource: "rayjobs",
        verb: "patch",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "ray.io",
        resource: "rayclusters",
        verb: "delete",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "",
        resource: "nodes",
        verb: "patch",
        namespace: None,
    },
    Access {
        group: "",
        resource: "secrets",
        verb: "get",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "",
        resource: "events",
        verb: "create",
        namespace: Some("tuneplane-jobs"),
    },
    Access {
        group: "coordination.k8s.io",
        resource: "leases",
        verb: "update",
        namespace: Some("kube-system"),
    },
    Access {
        group: "coordination.k8s.io",
        resource: "leases",
        verb: "delete",
        namespace: Some("tuneplane-system"),
    },
];

#[tokio::test]
async fn the_authorizer_allows_the_reconciler_exactly_what_it_needs() {
    let Some(client) = admin().await else { return };
    let mut wrong = Vec::new();
    for a in REQUIRED {
        if !allowed(&client, a).await {
            wrong.push(format!("needed but denied: {a:?}"));
        }
    }
    for a in DENIED {
        if allowed(&client, a).await {
            wrong.push(format!("allowed but not needed: {a:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// One request of the audit log as (group, resource[/subresource], verb, namespace, status code).
fn audited(line: &str) -> Option<(String, String, String, Option<String>, i64)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["user"]["username"] != USER || v["stage"] != "ResponseComplete" {
        return None;
    }
    let obj = &v["objectRef"];
    let mut resource = obj["resource"].as_str()?.to_string();
    if let Some(sub) = obj["subresource"].as_str() {
        resource = format!("{resource}/{sub}");
    }
    Some((
        obj["apiGroup"].as_str().unwrap_or_default().to_string(),
        resource,
        v["verb"].as_str()?.to_string(),
        obj["namespace"].as_str().map(str::to_string),
        v["responseStatus"]["code"].as_i64().unwrap_or(0),
    ))
}

#[tokio::test]
async fn the_audit_log_shows_every_grant_used_and_no_request_refused() {
    let Some(_client) = admin().await else { return };
    let Ok(path) = std::env::var("TUNEPLANE_TEST_AUDIT_LOG") else {
        eprintln!(
            "skipped: TUNEPLANE_TEST_AUDIT_LOG is not set (scripts/test.sh sets it after the suite)"
        );
        return;
    };
    let text = std::fs::read_to_string(&path).expect("audit log");
    let mut used = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for (group, resource, verb, namespace, code) in text.lines().filter_map(audited) {
        if code == 403 {
            refused.insert(format!("{verb} {group}/{resource} in {namespace:?}"));
        }
        used.insert((group, resource, verb, namespace));
    }
    assert!(
        !used.is_empty(),
        "the audit log {path} has no request of {USER}"
    );
    assert!(refused.is_empty(), "refused requests: {refused:?}");
    let matches = |a: &Access, u: &(String, String, String, Option<String>)| {
        u.0 == a.group
            && u.1 == a.resource
            && u.2 == a.verb
            && (a.namespace.is_none() || u.3.as_deref() == a.namespace)
    };
    let unused: Vec<&Access> = REQUIRED
        .iter()
        .filter(|a| !used.iter().any(|u| matches(a, u)))
        .collect();
    let unlisted: Vec<_> = used
        .iter()
        .filter(|u| !REQUIRED.iter().any(|a| matches(a, u)))
        .collect();
    println!("requests of {USER} in the audit log: {used:#?}");
    assert!(
        unlisted.is_empty(),
        "requests outside access::REQUIRED: {unlisted:?}"
    );
    assert!(
        unused.is_empty(),
        "granted but never used in the suite: {unused:?}"
    );
}
