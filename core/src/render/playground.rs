//! The vLLM playground Pod (docs/design.md §5): a standalone OpenAI-compatible server on one GPU node of a
//! series, pinned to the node admission planned for it, reached through TunePlane's proxy (which adds
//! the server's key) and reclaimed by the reconciler at its TTL.

use serde_json::{Value, json};

use super::{RenderSettings, label_value, tolerations};
use crate::capacity_compute::ADMITTED_GPUS_ANNOTATION;
use crate::constants::{
    GPU_RESOURCE, MANAGED_BY, MANAGED_BY_LABEL, PLAYGROUND_LABEL, SERIES_LABEL, TENANT_LABEL,
};
use crate::store::PlaygroundRecord;

/// Port vLLM listens on (named `http`).
pub const PORT: u16 = 8000;

/// CPU cores a playground pod requests (the scheduler needs a node with this much free).
pub const REQUEST_CPUS: u32 = 4;
/// Memory a playground pod requests, GiB.
pub const REQUEST_MEMORY_GB: u32 = 32;

/// `id` lowercased with every other character a `-`, at most 56 characters, no trailing `-`.
fn dns_safe(id: &str) -> String {
    let mut clean: String = id
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(56)
        .collect();
    while clean.ends_with('-') {
        clean.pop();
    }
    clean
}

/// Deterministic Pod name of a new playground: the id made DNS-safe, with the `pg-` prefix once
/// (ids are `pg-<hex>`, so their pod is `pg-<hex>` too; an id without the prefix gets it).
pub fn playground_name(id: &str) -> String {
    let clean = dns_safe(id);
    match clean.strip_prefix("pg-") {
        Some(rest) if !rest.is_empty() => clean,
        _ => format!("pg-{clean}"),
    }
}

/// The Pod name older versions gave a playground (`pg-` + the id, so `pg-pg-<hex>`). A record
/// they wrote names its pod in `pod_name`; this finds a pod they created but did not record.
pub fn legacy_playground_name(id: &str) -> String {
    format!("pg-{}", dns_safe(id))
}

/// The Pod name of `playground`: the recorded one, else [`playground_name`].
pub fn pod_name_of(playground: &PlaygroundRecord) -> String {
    playground
        .pod_name
        .clone()
        .unwrap_or_else(|| playground_name(&playground.id))
}

/// Key of the server's API key in the playground's Secret.
pub const KEY_SECRET_KEY: &str = "api-key";

/// Name of the Secret holding the server key of the playground whose pod is `pod_name`.
pub fn key_secret_name(pod_name: &str) -> String {
    format!("{pod_name}-api-key")
}

/// The Secret holding `playground`'s server key (the reconciler creates it before the pod and
/// deletes it with the pod); `None` for records of older versions, which have no key.
pub fn render_key_secret(playground: &PlaygroundRecord, namespace: &str) -> Option<Value> {
    use base64::Engine as _;
    let key = playground.server_key.as_deref()?;
    Some(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": key_secret_name(&pod_name_of(playground)),
            "namespace": namespace,
            "labels": labels(playground),
        },
        "type": "Opaque",
        "data": { KEY_SECRET_KEY: base64::engine::general_purpose::STANDARD.encode(key) },
    }))
}

fn labels(playground: &PlaygroundRecord) -> Value {
    json!({
        PLAYGROUND_LABEL: label_value(&playground.id),
        TENANT_LABEL: label_value(&playground.tenant),
        MANAGED_BY_LABEL: MANAGED_BY,
    })
}

/// Renders the Pod of `playground` in `namespace`.
pub fn render_playground(
    playground: &PlaygroundRecord,
    namespace: &str,
    settings: &RenderSettings,
) -> Value {
    let mut limits = json!({"cpu": "8", "memory": "64Gi"});
    if settings.gpu_passthrough {
        limits[GPU_RESOURCE] = json!(playground.gpus.to_string());
    }
    let ttl_seconds = (playground.expires_at_ms - playground.created_at_ms).max(1000) / 1000;
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name_of(playground),
            "namespace": namespace,
            "labels": labels(playground),
            "annotations": { ADMITTED_GPUS_ANNOTATION: playground.gpus.to_string() },
        },
        "spec": {
            "restartPolicy": "Never",
            // A fallback only: the reconciler deletes the pod when the TTL expires.
            "activeDeadlineSeconds": ttl_seconds,
            "nodeSelector": { SERIES_LABEL: playground.series },
            "tolerations": tolerations(settings),
            "containers": [{
                "name": "vllm",
                "image": settings.playground_image,
                "args": ["--model", playground.model, "--port", PORT.to_string(),
                         "--tensor-parallel-size", playground.gpus.max(1).to_string()],
                "ports": [{"name": "http", "containerPort": PORT}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10},
                "resources": {
                    "requests": {"cpu": REQUEST_CPUS.to_string(), "memory": format!("{REQUEST_MEMORY_GB}Gi")},
                    "limits": limits,
                },
            }],
        },
    });
    // Pinned to the node admission planned, as a job's pods are.
    if let Some(node) = &playground.node {
        pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": super::HOSTNAME_LABEL, "operator": "In", "values": [node]}
            ]}]
        }}});
    }
    // vLLM refuses requests without `Authorization: Bearer <key>` when `VLLM_API_KEY` is set;
    // only TunePlane's proxy (which adds it) and operators who read the Secret have it.
    if playground.server_key.is_some() {
        pod["spec"]["containers"][0]["env"] = json!([{
            "name": "VLLM_API_KEY",
            "valueFrom": {"secretKeyRef": {
                "name": key_secret_name(&pod_name_of(playground)),
                "key": KEY_SECRET_KEY,
            }},
        }]);
    }
    super::harden(&mut pod["spec"]);
    pod
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::render::fixtures::*;
    use crate::render::*;

    #[test]
    fn playground_is_a_vllm_pod_on_its_series_reached_through_the_api_proxy() {
        let pg = playground();
        let pod = render_playground(&pg, "tuneplane-jobs", &RenderSettings::default());
        assert_eq!(at(&pod, "/metadata/name"), "pg-1");
        assert_eq!(at(&pod, "/spec/nodeSelector/tuneplane~1gpu-series"), "l40s");
        assert_eq!(
            at(&pod, "/spec/containers/0/resources/limits/nvidia.com~1gpu"),
            "1"
        );
        assert_eq!(at(&pod, "/spec/containers/0/resources/requests/cpu"), "4");
        assert_eq!(
            at(&pod, "/spec/containers/0/resources/requests/memory"),
            "32Gi"
        );
        assert_eq!(at(&pod, "/spec/containers/0/ports/0/name"), "http");
        assert_eq!(at(&pod, "/spec/activeDeadlineSeconds"), 3600);
        // Without a plan or a key (an older version's record): neither affinity nor key.
        assert!(pod["spec"].get("affinity").is_none());
        assert!(pod["spec"]["containers"][0].get("env").is_none());
        assert!(playground::render_key_secret(&pg, "tuneplane-jobs").is_none());
        let mut planned = pg.clone();
        planned.node = Some("l40s-3".into());
        planned.server_key = Some("k3y".into());
        let pod = render_playground(&planned, "tuneplane-jobs", &RenderSettings::default());
        let terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0";
        assert_eq!(at(&pod, &format!("{terms}/key")), HOSTNAME_LABEL);
        assert_eq!(
            pod.pointer(&format!("{terms}/values")),
            Some(&json!(["l40s-3"]))
        );
        let env = "/spec/containers/0/env/0";
        assert_eq!(at(&pod, &format!("{env}/name")), "VLLM_API_KEY");
        assert_eq!(
            at(&pod, &format!("{env}/valueFrom/secretKeyRef/name")),
            "pg-1-api-key"
        );
        let secret = playground::render_key_secret(&planned, "tuneplane-jobs").unwrap_or_default();
        assert_eq!(at(&secret, "/metadata/name"), "pg-1-api-key");
        assert_eq!(at(&secret, "/data/api-key"), "azN5");
        // A record of an older version keeps the pod name it recorded.
        let old = PlaygroundRecord {
            pod_name: Some("pg-pg-1".into()),
            ..pg
        };
        let pod = render_playground(&old, "tuneplane-jobs", &RenderSettings::default());
        assert_eq!(at(&pod, "/metadata/name"), "pg-pg-1");
    }

    #[test]
    fn playground_pod_names_carry_the_prefix_once() {
        use playground::{legacy_playground_name, playground_name};
        // Ids as the API makes them (`pg-` + 20 hex): the pod is named like the id.
        assert_eq!(
            playground_name("pg-0123456789abcdef0123"),
            "pg-0123456789abcdef0123"
        );
        assert_eq!(
            legacy_playground_name("pg-0123456789abcdef0123"),
            "pg-pg-0123456789abcdef0123"
        );
        // Ids without the prefix get it; odd characters become dashes; no trailing dash.
        assert_eq!(playground_name("pg1"), "pg-pg1");
        assert_eq!(playground_name("My_Playground--"), "pg-my-playground");
        assert_eq!(playground_name("pg-"), "pg-pg");
        let long = playground_name(&format!("pg-{}", "a".repeat(100)));
        assert!(long.len() <= 63 && long.starts_with("pg-a"), "{long}");
        assert!(!long.starts_with("pg-pg-"));
    }
}
