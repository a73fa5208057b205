//! The kustomize manifests in `infra/` render with `kubectl kustomize` (offline) and say what the
//! reconciler needs: separated read/write RBAC, a hardened Deployment whose `TUNEPLANE_*` variables
//! are all ones the reconciler reads, and the kind overlay's GPU passthrough switch.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::Value;

fn render(dir: &str) -> Vec<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("infra")
        .join(dir);
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&root)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "kubectl is needed for this test (kubectl kustomize {}): {e}",
                root.display()
            )
        });
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split("\n---\n")
        .map(|doc| yaml_serde::from_str::<Value>(doc).unwrap_or_else(|e| panic!("{e}: {doc}")))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn env(deploy: &Value) -> Vec<(String, String)> {
    deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn infra_manifests_render_with_kubectl_kustomize() {
    let base = render("kustomize/base");
    for (kind, name) in [
        ("Namespace", "tuneplane-system"),
        ("ServiceAccount", "tuneplane-reconciler"),
        ("ClusterRole", "tuneplane-reconciler-read"),
        ("Role", "tuneplane-reconciler-write"),
        ("Role", "tuneplane-reconciler-lease"),
        ("Deployment", "tuneplane-reconciler"),
        ("PodDisruptionBudget", "tuneplane-reconciler"),
        ("Service", "tuneplane-reconciler-metrics"),
    ] {
        find(&base, kind, name);
    }
    let read = find(&base, "ClusterRole", "tuneplane-reconciler-read").to_string();
    for verb in ["create", "delete", "update", "patch"] {
        assert!(
            !read.contains(&format!("\"{verb}\"")),
            "read role grants {verb}"
        );
    }
    let sa = find(&base, "ServiceAccount", "tuneplane-reconciler");
    assert!(sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].is_string());
    let deploy = find(&base, "Deployment", "tuneplane-reconciler");
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    // Archives are staged in the temporary directory: a writable, disk-backed /tmp.
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/tmp");
    let tmp = &pod["volumes"][0];
    assert_eq!(tmp["name"], c["volumeMounts"][0]["name"]);
    assert!(tmp["emptyDir"].is_object() && tmp["emptyDir"]["medium"].is_null());
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    let known = [
        tuneplane_reconciler::config::ENV_NAMESPACE,
        tuneplane_reconciler::config::ENV_GPU_PASSTHROUGH,
        tuneplane_reconciler::config::ENV_CAPSULE_DELIVERY,
        tuneplane_reconciler::config::ENV_TOLERATIONS,
        tuneplane_reconciler::config::ENV_PASS_INTERVAL_MS,
        tuneplane_reconciler::config::ENV_LEASE_SECONDS,
        tuneplane_reconciler::config::ENV_METRICS_ADDR,
        tuneplane_reconciler::config::ENV_KUBE_QPS,
        tuneplane_reconciler::config::ENV_KUBE_BURST,
        tuneplane_reconciler::config::ENV_API_URL,
        tuneplane_reconciler::config::ENV_GRANT_KEY,
        tuneplane_reconciler::config::ENV_PUBLIC_URL,
        "TUNEPLANE_TABLE",
        "TUNEPLANE_BUCKET",
        "TUNEPLANE_LOG_FORMAT",
    ];
    for (name, _) in env(deploy)
        .iter()
        .filter(|(n, _)| n.starts_with("TUNEPLANE_"))
    {
        assert!(
            known.contains(&name.as_str()),
            "the Deployment sets {name}, which the reconciler does not read"
        );
    }

    let kind = render("kustomize/overlays/kind");
    let deploy = find(&kind, "Deployment", "tuneplane-reconciler");
    let vars = env(deploy);
    assert!(
        vars.contains(&("TUNEPLANE_K8S_GPU_PASSTHROUGH".into(), "0".into())),
        "{vars:?}"
    );
    assert!(
        vars.contains(&("TUNEPLANE_CAPSULE_DELIVERY".into(), "init-container".into())),
        "{vars:?}"
    );
    assert_eq!(deploy["spec"]["replicas"], 1);
}
