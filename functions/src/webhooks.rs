//! `POST /v1/webhooks/{source}`: signed deliveries from Git hosts and other systems (docs/design.md §7).
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const SECRET: &str = "whsec-test";
    const BODY: &[u8] = br#"{"ref":"refs/heads/main"}"#;
    const NOW: i64 = 1_800_000_000;

    fn sign(t: i64, body: &[u8]) -> String {
        let mut m = mac(SECRET).unwrap();
        m.update(format!("{t}.").as_bytes());
        m.update(body);
        hex::encode(m.finalize().into_bytes())
    }

    fn hub(body: &[u8]) -> String {
        let mut m = mac(SECRET).unwrap();
        m.update(body);
        format!("sha256={}", hex::encode(m.finalize().into_bytes()))
    }

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    /// Flips one hex digit of a signature at `at` (so it stays well-formed hex).
    fn flip(sig: &str, at: usize) -> String {
        let mut bytes = sig.as_bytes().to_vec();
        bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn timestamped_signature_is_accepted_inside_the_window_only() {
        let sig = sign(NOW, BODY);
        let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={sig}"));
        assert_eq!(verify(SECRET, &h, BODY, NOW), Ok(sig.clone()));
        assert_eq!(
            verify(SECRET, &h, BODY, NOW + WINDOW_SECONDS),
            Ok(sig.clone())
        );
        assert_eq!(
            verify(SECRET, &h, BODY, NOW + WINDOW_SECONDS + 1),
            Err(SignatureError::Stale)
        );
        // A timestamp from the future is as stale as one from the past.
        assert_eq!(
            verify(SECRET, &h, BODY, NOW - WINDOW_SECONDS - 1),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn a_signature_wrong_in_its_first_or_last_digit_or_for_another_body_is_refused() {
        let sig = sign(NOW, BODY);
        for bad in [flip(&sig, 0), flip(&sig, sig.len() - 1)] {
            let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={bad}"));
            assert_eq!(verify(SECRET, &h, BODY, NOW), Err(SignatureError::Mismatch));
        }
        let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={sig}"));
        assert_eq!(
            verify(SECRET, &h, b"{\"ref\":\"refs/heads/evil\"}", NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("another-secret", &h, BODY, NOW),
            Err(SignatureError::Mismatch)
        );
        // Moving the timestamp (to replay an old delivery inside a new window) breaks the MAC.
        let moved = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={},v1={sig}", NOW + 10),
        );
        assert_eq!(
            verify(SECRET, &moved, BODY, NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn a_truncated_signature_is_refused_not_compared_as_a_prefix() {
        let sig = sign(NOW, BODY);
        for cut in [2, 32, sig.len() - 2] {
            let h = headers(
                TUNEPLANE_SIGNATURE_HEADER,
                &format!("t={NOW},v1={}", &sig[..cut]),
            );
            assert_eq!(verify(SECRET, &h, BODY, NOW), Err(SignatureError::Mismatch));
        }
        let full = hub(BODY);
        let h = headers(HUB_SIGNATURE_HEADER, &full[..full.len() - 2]);
        assert_eq!(verify(SECRET, &h, BODY, NOW), Err(SignatureError::Mismatch));
    }

    #[test]
    fn rotation_accepts_any_valid_v1_and_reports_the_one_that_matched() {
        let sig = sign(NOW, BODY);
        let old = flip(&sig, 10);
        let h = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={NOW},v1=zz,v1={old},v1={}", sig.to_uppercase()),
        );
        assert_eq!(verify(SECRET, &h, BODY, NOW), Ok(sig));
    }

    #[test]
    fn hub_signatures_verify_and_malformed_headers_are_named() {
        let h = headers(HUB_SIGNATURE_HEADER, &hub(BODY));
        assert!(verify(SECRET, &h, BODY, NOW).is_ok());
        for (name, value) in [
            (HUB_SIGNATURE_HEADER, "md5=abcd"),
            (HUB_SIGNATURE_HEADER, "sha256=not-hex"),
            (TUNEPLANE_SIGNATURE_HEADER, "v1=abcd"),
            (TUNEPLANE_SIGNATURE_HEADER, "t=yesterday,v1=abcd"),
        ] {
            assert_eq!(
                verify(SECRET, &headers(name, value), BODY, NOW),
                Err(SignatureError::Malformed),
                "{name}: {value}"
            );
        }
        assert_eq!(
            verify(SECRET, &HeaderMap::new(), BODY, NOW),
            Err(SignatureError::Malformed)
        );
    }
}
