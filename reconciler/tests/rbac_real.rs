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

/// Every pod the platform renders, as a Pod object in `namespace`: a CPU job's pod, a playground
/// and each group of a multi-pool RayJob (the operator makes its pods from these templates).
fn rendered_pods(namespace: &str) -> Vec<(String, serde_json::Value)> {
    use tuneplane_core::render::{CapsuleRef, RenderSettings, render_playground};
    use tuneplane_core::render::{render_pod, render_rayjob};
    let spec_of = |text: &str| {
        tuneplane_core::spec::validate(text, None, &Default::default())
            .unwrap()
            .spec
    };
    let cpu = spec_of(
        "name: cpu\nimage: python:3.12\nentrypoint: python hello.py\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 2, memory_gb: 4}]\n",
    );
    let gpu = spec_of(
        "name: gpu\nimage: rayproject/ray:2.60.0\nentrypoint: python train.py\npools:\n  - {name: main, series: h200, nodes: 2, gpus_per_node: 8}\n  - {name: eval, series: l40s, nodes: 1, gpus_per_node: 1}\n",
    );
    let capsule = CapsuleRef {
        sha256: "ab".repeat(32),
        url: "http://127.0.0.1:9/blobs/capsule.zip".into(),
    };
    let record = |id: &str, spec| {
        tuneplane_core::job::JobRecord::new_queued(
            id.parse().unwrap(),
            "acme".parse().unwrap(),
            spec,
            &capsule.sha256,
            1,
        )
    };
    let mut pods = Vec::new();
    for delivery in [
        tuneplane_core::render::CapsuleDelivery::Presigned,
        tuneplane_core::render::CapsuleDelivery::InitContainer,
    ] {
        let settings = RenderSettings {
            delivery,
            ..RenderSettings::default()
        };
        let pod = render_pod(&record("j-cpu", cpu.clone()), &capsule, &settings).unwrap();
        pods.push(("the pod of a CPU job".to_owned(), pod));
        let rj = render_rayjob(&record("j-gpu", gpu.clone()), &capsule, &settings)
            .unwrap()
            .to_json();
        let cluster = &rj["spec"]["rayClusterSpec"];
        let mut templates = vec![(
            "head".to_owned(),
            cluster["headGroupSpec"]["template"].clone(),
        )];
        for group in cluster["workerGroupSpecs"].as_array().unwrap() {
            templates.push((
                format!("group {}", group["groupName"]),
                group["template"].clone(),
            ));
        }
        for (n, (group, template)) in templates.into_iter().enumerate() {
            let mut pod =
                serde_json::json!({"apiVersion": "v1", "kind": "Pod", "spec": template["spec"]});
            pod["metadata"] = template["metadata"].clone();
            pod["metadata"]["name"] = format!("tp-psa-{n}").into();
            pods.push((format!("the RayJob's {group} ({delivery:?})"), pod));
        }
    }
    let playground = tuneplane_core::store::PlaygroundRecord::requested(
        "pg-psa",
        "acme".parse().unwrap(),
        "Qwen/Qwen3-0.6B",
        "l40s",
        1,
        0,
        3_600_000,
    );
    let pod = render_playground(&playground, namespace, &RenderSettings::default());
    pods.push(("a playground".to_owned(), pod));
    for (_, pod) in &mut pods {
        pod["metadata"]["namespace"] = namespace.into();
    }
    pods
}

/// The jobs namespace enforces Pod Security `baseline`, and the real API server's admission
/// accepts every pod the platform renders there (a server-side dry run runs admission without
/// creating anything); a privileged pod in the same namespace is refused, so the check is live.
#[tokio::test]
async fn every_rendered_pod_passes_pod_security_admission_on_the_real_api_server() {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    let Some(client) = admin().await else { return };
    let jobs = tuneplane_core::constants::DEFAULT_NAMESPACE;
    let ns = Api::<Namespace>::all(client.clone())
        .get(jobs)
        .await
        .unwrap();
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("baseline"),
        "{labels:?}"
    );
    let pods: Api<Pod> = Api::namespaced(client, jobs);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let rendered = rendered_pods(jobs);
    assert!(rendered.len() >= 8, "{} pods", rendered.len());
    let mut refused = Vec::new();
    for (what, pod) in &rendered {
        let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
        if let Err(e) = pods.create(&dry_run, &typed).await {
            refused.push(format!("{what}: {e}"));
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));

    let (_, first) = &rendered[0];
    let mut privileged: Pod = serde_json::from_value(first.clone()).unwrap();
    if let Some(spec) = privileged.spec.as_mut() {
        spec.host_network = Some(true);
        spec.containers[0].security_context = Some(Default::default());
        if let Some(sc) = spec.containers[0].security_context.as_mut() {
            sc.privileged = Some(true);
        }
    }
    let err = pods.create(&dry_run, &privileged).await.err();
    let message = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("violates PodSecurity"), "{message:?}");
}
