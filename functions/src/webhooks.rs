//! `POST /v1/webhooks/{source}`: signed deliveries from Git hosts and other systems (DESIGN §7).
//!
//! The raw body is verified with HMAC-SHA256 under the source's own secret, in either header
//! format: `X-Hub-Signature-256: sha256=<hex>` (Git hosting), or `X-TunePlane-Signature:
//! t=<unix>,v1=<hex>` over `<t>.<body>` with a five-minute window. Comparison is constant time.
//! Each verified signature is recorded with a put-if-absent in the blob store
//! (`webhooks/seen/<source>/<signature>`), so a captured delivery sent again is refused (401) even
//! inside the window. Git-host signatures carry no timestamp, so for them the marker is the only
//! replay defence: it lives as long as the bucket's lifecycle rule keeps it (90 days in
//! `template.yaml`). A delivery that fails is forgotten again, so the sender's retry is accepted.
//!
//! The payload becomes a submission: `{"spec", "code"}` like `POST /v1/jobs`, or `{"template",
//! "overrides"}` naming a stored template, or anything else (a Git push event) when the source
//! names a default template.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;
use tuneplane_core::store::PutOutcome;
use tuneplane_core::submit::{Code, Origin, SpecInput, SubmitRequest, merge_patch};

use crate::app::{AppState, RawBody};
use crate::config::WebhookSource;
use crate::error::ApiError;
use crate::routes::jobs::submitted_response;
use crate::routes::submission::SubmissionBody;

/// Git hosting signature header.
pub const HUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// TunePlane signature header (timestamped).
pub const TUNEPLANE_SIGNATURE_HEADER: &str = "x-tuneplane-signature";
/// Delivery id headers used as idempotency keys when present.
const DELIVERY_HEADERS: &[&str] = &["x-github-delivery", "x-tuneplane-delivery"];
/// Accepted clock difference for timestamped signatures, seconds.
pub const WINDOW_SECONDS: i64 = 300;

/// True for source names usable in paths and keys.
pub fn valid_source_name(name: &str) -> bool {
    tuneplane_core::spec::is_dns_label(name, 40)
}

/// Why a delivery's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Neither header, or a malformed one.
    #[error("missing or malformed signature: send X-Hub-Signature-256 or X-TunePlane-Signature")]
    Malformed,
    /// The timestamp is outside the window.
    #[error("signature timestamp is outside the {WINDOW_SECONDS}-second window")]
    Stale,
    /// The HMAC does not match.
    #[error("signature does not match the body")]
    Mismatch,
}

fn mac(secret: &str) -> Result<Hmac<Sha256>, SignatureError> {
    // HMAC accepts keys of any length; the error arm exists only in the type.
    Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| SignatureError::Mismatch)
}

/// Verifies a delivery; returns the verified signature (hex) for replay tracking.
pub fn verify(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
) -> Result<String, SignatureError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(value) = header(TUNEPLANE_SIGNATURE_HEADER) {
        let mut t = None;
        let mut sigs = Vec::new();
        for part in value.split(',') {
            match part.trim().split_once('=') {
                Some(("t", v)) => t = v.parse::<i64>().ok(),
                Some(("v1", v)) => sigs.push(v.to_owned()),
                _ => {}
            }
        }
        let t = t.ok_or(SignatureError::Malformed)?;
        if (now_secs - t).abs() > WINDOW_SECONDS {
            return Err(SignatureError::Stale);
        }
        for sig in sigs {
            let Ok(raw) = hex::decode(&sig) else { continue };
            let mut m = mac(secret)?;
            m.update(format!("{t}.").as_bytes());
            m.update(body);
            if m.verify_slice(&raw).is_ok() {
                return Ok(sig.to_ascii_lowercase());
            }
        }
        return Err(SignatureError::Mismatch);
    }
    let value = header(HUB_SIGNATURE_HEADER).ok_or(SignatureError::Malformed)?;
    let hex_sig = value
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed)?;
    let raw = hex::decode(hex_sig).map_err(|_| SignatureError::Malformed)?;
    let mut m = mac(secret)?;
    m.update(body);
    m.verify_slice(&raw).map_err(|_| SignatureError::Mismatch)?;
    Ok(hex_sig.to_ascii_lowercase())
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
        merge_patch(&mut spec, patch);
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
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let config = state
        .webhooks
        .get(&source)
        .ok_or_else(|| ApiError::NotFound(format!("unknown webhook source {source:?}")))?;
    let now_ms = (state.clock)();
    let signature = verify(&config.secret, &headers, &body, now_ms / 1000)
        .map_err(|e| ApiError::BadSignature(e.to_string()))?;
    let seen = format!("webhooks/seen/{source}/{signature}");
    let marked = state
        .submit
        .blobs()
        .put_if_absent(&seen, now_ms.to_string().into_bytes())
        .await?;
    if marked == PutOutcome::AlreadyExists {
        return Err(ApiError::BadSignature(
            "this delivery was already received (replay refused)".into(),
        ));
    }
    let delivery = DELIVERY_HEADERS
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(str::to_owned)
        .unwrap_or_else(|| signature.clone());
    let result = submit_payload(&state, &source, config, &body, delivery, now_ms).await;
    if result.is_err() {
        // Forget the delivery so the sender's retry is not refused as a replay.
        let _ = state.submit.blobs().delete(&seen).await;
    }
    result
}

async fn submit_payload(
    state: &AppState,
    source: &str,
    config: &WebhookSource,
    body: &[u8],
    delivery: String,
    now_ms: i64,
) -> Result<Response, ApiError> {
    let payload: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_body", format!("payload is not JSON: {e}")))?;
    let tenant = config.tenant.as_str();
    let key = Some(format!("webhook:{source}:{delivery}"));
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
