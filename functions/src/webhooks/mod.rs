//! `POST /v1/webhooks/{source}`: signed deliveries from Git hosts and other systems (docs/design.md §7).
//!
//! Each source ([`sources`]) declares one signature scheme and its own secret: either
//! `X-Hub-Signature-256: sha256=<hex>` over the body (Git hosting), or `X-TunePlane-Signature:
//! t=<unix>,v1=<hex>` over `<t>.<body>` with a five-minute window ([`signature`]). A delivery in
//! the other scheme is refused, so a secret never verifies two message formats.
//!
//! Replays: every verified signature is recorded with a put-if-absent in the blob store
//! (`webhooks/seen/<source>/<signature>`) before anything else happens, and it stays recorded
//! whether the submission then succeeds or fails, so a captured delivery sent again is refused
//! (401). A sender retries a failed delivery by signing it again (a new `t=`). Timestamped
//! signatures need the marker only for the window; Git-host signatures carry no timestamp, so
//! their marker is the only defence and it lasts as long as the blob store keeps it (the bucket's
//! lifecycle rule deletes `webhooks/seen/` after 90 days in `template.yaml`; the filesystem store
//! never deletes it). Past that age a captured Git-host delivery could be replayed: rotate such a
//! source's secret within that time.
//!
//! The job's idempotency key is derived from the verified signature, i.e. from signed data only;
//! delivery headers such as `X-GitHub-Delivery` are not signed and are not used.
//!
//! The payload becomes a submission: `{"spec", "code"}` like `POST /v1/jobs`, or `{"template",
//! "overrides"}` naming a stored template, or anything else (a Git push event) when the source
//! names a default template.

pub mod signature;
pub mod sources;

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use tuneplane_core::store::PutOutcome;
use tuneplane_core::submit::{Code, Origin, SpecInput, SubmitRequest};

use crate::error::ApiError;
use crate::routes::jobs::submitted_response;
use crate::routes::submission::SubmissionBody;
use crate::state::{AppState, JsonBody};

pub use signature::{SignatureError, WINDOW_SECONDS, verify};
pub use sources::{SignatureScheme, WebhookSource, valid_source_name};

/// Git hosting signature header.
pub const HUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// TunePlane signature header (timestamped).
pub const TUNEPLANE_SIGNATURE_HEADER: &str = "x-tuneplane-signature";

/// Blob key of the replay marker of a verified signature.
pub fn seen_key(source: &str, signature: &str) -> String {
    format!("webhooks/seen/{source}/{signature}")
}

/// A stored job template: `templates/<tenant>/<name>.json` in the blob store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    /// The JobSpec as a JSON object (overrides are merged into it).
    pub spec: Value,
    /// Blob key of the code archive.
    pub code_key: String,
}

/// Blob key of a tenant's template.
pub fn template_key(tenant: &str, name: &str) -> String {
    format!("templates/{tenant}/{name}.json")
}

/// The submission of `template` of `tenant` with a merge patch of `overrides` applied to its spec.
pub async fn from_template(
    state: &AppState,
    tenant: &str,
    name: &str,
    overrides: Option<&Value>,
) -> Result<(SpecInput, Code), ApiError> {
    let missing = || ApiError::NotFound(format!("template {name:?} not found"));
    if !crate::runtime::valid_id(name) {
        return Err(missing());
    }
    let bytes = state
        .submit
        .blobs()
        .get(&template_key(tenant, name))
        .await?
        .ok_or_else(missing)?;
    let template: Template = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(
            "invalid_template",
            format!("template {name:?} is malformed: {e}"),
        )
    })?;
    let mut spec = template.spec;
    if let Some(patch) = overrides {
        if !patch.is_object() {
            return Err(ApiError::bad_request(
                "invalid_body",
                "overrides must be a JSON object",
            ));
        }
        json_patch::merge(&mut spec, patch);
    }
    Ok((
        SpecInput::Text(spec.to_string()),
        Code::Blob {
            key: template.code_key,
        },
    ))
}

/// `POST /v1/webhooks/{source}`.
pub async fn receive(
    State(state): State<Arc<AppState>>,
    Path(source): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let config = state
        .webhooks
        .get(&source)
        .ok_or_else(|| ApiError::NotFound(format!("unknown webhook source {source:?}")))?;
    let now_ms = (state.clock)();
    let signature = verify(
        config.scheme,
        config.secret.expose().as_bytes(),
        &headers,
        &body,
        now_ms.div_euclid(1000),
    )
    .map_err(|e| ApiError::BadSignature(e.to_string()))?;
    // Remembered before the submission and never forgotten, failed submissions included: a
    // delivery that failed now could otherwise be replayed once whatever made it fail is fixed.
    let marked = state
        .submit
        .blobs()
        .put_if_absent(
            &seen_key(&source, &signature),
            now_ms.to_string().into_bytes(),
        )
        .await?;
    if marked == PutOutcome::AlreadyExists {
        return Err(ApiError::BadSignature(
            "this delivery was already received (replay refused); to retry, sign it again with a new timestamp".into(),
        ));
    }
    submit_payload(&state, &source, config, &body, &signature, now_ms).await
}

async fn submit_payload(
    state: &AppState,
    source: &str,
    config: &WebhookSource,
    body: &[u8],
    signature: &str,
    now_ms: i64,
) -> Result<Response, ApiError> {
    let payload: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_body", format!("payload is not JSON: {e}")))?;
    let tenant = config.tenant.as_str();
    // From signed data only: the same signed message is the same job.
    let key = Some(format!("webhook:{source}:{signature}"));
    let origin = Origin::Webhook(source.to_owned());
    let request = if payload.get("spec").is_some() {
        let body: SubmissionBody = serde_json::from_value(payload).map_err(|e| {
            ApiError::bad_request(
                "invalid_body",
                format!("expected {{\"spec\", \"code\"}}: {e}"),
            )
        })?;
        body.into_request(tenant, key, origin)?
    } else {
        let name = match payload.get("template").and_then(Value::as_str) {
            Some(name) => name.to_owned(),
            None => config.template.clone().ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_body",
                    "payload names no spec or template, and the source has no default template",
                )
            })?,
        };
        let (spec, code) = from_template(state, tenant, &name, payload.get("overrides")).await?;
        SubmitRequest {
            tenant: tenant.to_owned(),
            spec,
            code,
            idempotency_key: key,
            origin,
        }
    };
    let submitted = state.submit.submit(request, now_ms).await?;
    tracing::info!(job_id = %submitted.job.id, source, created = submitted.created, "webhook submitted");
    Ok(submitted_response(&submitted))
}

#[cfg(test)]
mod tests;
