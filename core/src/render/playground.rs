//! The vLLM playground Pod (DESIGN §5): a standalone OpenAI-compatible server on one GPU node of a
//! series, reached through the Kubernetes API proxy and reclaimed by the reconciler at its TTL.

use serde_json::{Value, json};

use super::{RenderSettings, label_value, tolerations};
use crate::capacity_compute::ADMITTED_GPUS_ANNOTATION;
use crate::constants::{
    GPU_RESOURCE, MANAGED_BY, MANAGED_BY_LABEL, PLAYGROUND_LABEL, SERIES_LABEL, TENANT_LABEL,
};
use crate::store::PlaygroundRecord;

/// Port vLLM listens on (named `http`).
pub const PORT: u16 = 8000;

/// Deterministic Pod name of a playground: `pg-<id>` made DNS-safe.
pub fn playground_name(id: &str) -> String {
    let mut clean: String = id
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(56)
        .collect();
    while clean.ends_with('-') {
        clean.pop();
    }
    format!("pg-{clean}")
}

/// The API-proxy path that reaches the playground's server.
pub fn proxy_path(namespace: &str, id: &str) -> String {
    format!(
        "/api/v1/namespaces/{namespace}/pods/{}:{PORT}/proxy/",
        playground_name(id)
    )
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
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": playground_name(&playground.id),
            "namespace": namespace,
            "labels": {
                PLAYGROUND_LABEL: label_value(&playground.id),
                TENANT_LABEL: label_value(&playground.tenant),
                MANAGED_BY_LABEL: MANAGED_BY,
            },
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
                "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": limits},
            }],
        },
    })
}
