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
//! The payload becomes a submission: `{"spec", "code"}` like `POST /v1/jobs`, `{"name", "steps"}`
//! like `POST /v1/pipelines` (every step a job, with the same key: see
//! [`tuneplane_core::submit::pipeline::step_job_id`]), or `{"template", "overrides"}` naming a
//! stored template, or anything else (a Git push event) when the source names a default template.

pub mod signature;
pub use crate::webhook_sources as sources;
pub use crate::webhook_sources::{HUB_SIGNATURE_HEADER, TUNEPLANE_SIGNATURE_HEADER};

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use tuneplane_core::audit::{Actor, AuditSource};
use tuneplane_core::store::PutOutcome;
use tuneplane_core::submit::{Code, Origin, SpecInput, SubmitRequest};

use crate::error::ApiError;
use crate::routes::jobs::submitted_response;
use crate::routes::pipelines;
use crate::routes::submission::SubmissionBody;
use crate::state::{AppState, JsonBody};

pub use signature::{SignatureError, WINDOW_SECONDS, verify};
pub use sources::{SignatureScheme, WebhookSource, valid_source_name};

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
    if tuneplane_core::ids::Id::parse(name).is_err() {
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
    let tenant = &config.tenant;
    // From signed data only: the same signed message is the same job.
    let key = Some(format!("webhook:{source}:{signature}"));
    let origin = Origin::Webhook(source.to_owned());
    // Signed by the source's secret: the source is the actor, its signed message the request.
    let actor = Actor {
        key_id: format!("webhook:{source}"),
        source: AuditSource::Webhook,
        request_id: key.clone().unwrap_or_default(),
    };
    if payload.get("steps").is_some() {
        let request =
            pipelines::parse_payload(payload)?.into_request(tenant, key, origin, actor)?;
        let done = state.submit.submit_pipeline(request, now_ms).await?;
        let ids: Vec<&str> = done.steps.iter().map(|(_, j)| j.id.as_str()).collect();
        tracing::info!(pipeline = %done.name, jobs = ?ids, source, created = done.created, "webhook submitted a pipeline");
        return Ok(pipelines::submitted_response(&done));
    }
    let request = if payload.get("spec").is_some() {
        let body: SubmissionBody = serde_json::from_value(payload).map_err(|e| {
            ApiError::bad_request(
                "invalid_body",
                format!("expected {{\"spec\", \"code\"}}: {e}"),
            )
        })?;
        body.into_request(tenant, key, origin, actor)?
    } else {
        let name = match payload.get("template").and_then(Value::as_str) {
            Some(name) => name.to_owned(),
            None => config.template.clone().map(String::from).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_body",
                    "payload names no spec, steps or template, and the source has no default template",
                )
            })?,
        };
        let (spec, code) = from_template(state, tenant, &name, payload.get("overrides")).await?;
        SubmitRequest {
            tenant: tenant.clone(),
            spec,
            code,
            idempotency_key: key,
            origin,
            actor,
        }
    };
    let submitted = state.submit.submit(request, now_ms).await?;
    tracing::info!(job_id = %submitted.job.id, source, created = submitted.created, "webhook submitted");
    Ok(submitted_response(&submitted))
}

#[cfg(test)]
mod tests {
    //! Signature verification: both schemes, the window, the limits and hostile headers.

    use axum::http::{HeaderMap, HeaderValue};
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::signature::{MAX_SIGNATURES, parse_tuneplane, within_window};
    use super::*;

    const SECRET: &[u8] = b"whsec-test-0123456789";
    const BODY: &[u8] = br#"{"ref":"refs/heads/main"}"#;
    const NOW: i64 = 1_800_000_000;
    const TP: SignatureScheme = SignatureScheme::TunePlane;
    const HUB: SignatureScheme = SignatureScheme::Hub;

    fn hmac_hex(parts: &[&[u8]]) -> String {
        let mut m = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
        for p in parts {
            m.update(p);
        }
        hex::encode(m.finalize().into_bytes())
    }

    fn sign(t: i64, body: &[u8]) -> String {
        hmac_hex(&[format!("{t}.").as_bytes(), body])
    }

    fn hub(body: &[u8]) -> String {
        format!("sha256={}", hmac_hex(&[body]))
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
        String::from_utf8(bytes).unwrap_or_default()
    }

    fn malformed(result: Result<String, SignatureError>) -> bool {
        matches!(result, Err(SignatureError::Malformed { .. }))
    }

    #[test]
    fn timestamped_signature_is_accepted_inside_the_window_only() {
        let sig = sign(NOW, BODY);
        let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={sig}"));
        assert_eq!(verify(TP, SECRET, &h, BODY, NOW), Ok(sig.clone()));
        assert_eq!(
            verify(TP, SECRET, &h, BODY, NOW + WINDOW_SECONDS),
            Ok(sig.clone())
        );
        assert_eq!(
            verify(TP, SECRET, &h, BODY, NOW + WINDOW_SECONDS + 1),
            Err(SignatureError::Stale)
        );
        // A timestamp from the future is as stale as one from the past.
        assert_eq!(
            verify(TP, SECRET, &h, BODY, NOW - WINDOW_SECONDS - 1),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn a_signature_wrong_in_its_first_or_last_digit_or_for_another_body_is_refused() {
        let sig = sign(NOW, BODY);
        for bad in [flip(&sig, 0), flip(&sig, sig.len() - 1)] {
            let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={bad}"));
            assert_eq!(
                verify(TP, SECRET, &h, BODY, NOW),
                Err(SignatureError::Mismatch)
            );
        }
        let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={sig}"));
        assert_eq!(
            verify(TP, SECRET, &h, b"{\"ref\":\"refs/heads/evil\"}", NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(TP, b"another-secret-0123", &h, BODY, NOW),
            Err(SignatureError::Mismatch)
        );
        // Moving the timestamp (to replay an old delivery inside a new window) breaks the MAC.
        let moved = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={},v1={sig}", NOW + 10),
        );
        assert_eq!(
            verify(TP, SECRET, &moved, BODY, NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn a_truncated_signature_is_malformed_not_compared_as_a_prefix() {
        let sig = sign(NOW, BODY);
        for cut in [2, 32, sig.len() - 2] {
            let h = headers(
                TUNEPLANE_SIGNATURE_HEADER,
                &format!("t={NOW},v1={}", &sig[..cut]),
            );
            assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)), "cut {cut}");
        }
        let full = hub(BODY);
        let h = headers(HUB_SIGNATURE_HEADER, &full[..full.len() - 2]);
        assert!(malformed(verify(HUB, SECRET, &h, BODY, NOW)));
    }

    #[test]
    fn rotation_accepts_any_valid_v1_and_reports_the_one_that_matched() {
        let sig = sign(NOW, BODY);
        let old = flip(&sig, 10);
        let h = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={NOW},v0=legacy,v1={old},v1={}", sig.to_uppercase()),
        );
        assert_eq!(verify(TP, SECRET, &h, BODY, NOW), Ok(sig));
    }

    #[test]
    fn hub_signatures_verify_and_malformed_headers_are_named() {
        let h = headers(HUB_SIGNATURE_HEADER, &hub(BODY));
        assert!(verify(HUB, SECRET, &h, BODY, NOW).is_ok());
        for (scheme, name, value) in [
            (HUB, HUB_SIGNATURE_HEADER, "md5=abcd"),
            (HUB, HUB_SIGNATURE_HEADER, "sha256=not-hex"),
            (TP, TUNEPLANE_SIGNATURE_HEADER, "v1=abcd"),
            (TP, TUNEPLANE_SIGNATURE_HEADER, "t=yesterday,v1=abcd"),
            (TP, TUNEPLANE_SIGNATURE_HEADER, "t=1,t=2,v1=ab"),
            (TP, TUNEPLANE_SIGNATURE_HEADER, "t=1800000000"),
            (TP, TUNEPLANE_SIGNATURE_HEADER, "garbage"),
        ] {
            let result = verify(scheme, SECRET, &headers(name, value), BODY, NOW);
            assert!(malformed(result.clone()), "{name}: {value}: {result:?}");
            let message = result.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains(name), "{message}");
        }
        assert_eq!(
            verify(TP, SECRET, &HeaderMap::new(), BODY, NOW),
            Err(SignatureError::Missing {
                header: TUNEPLANE_SIGNATURE_HEADER
            })
        );
    }

    #[test]
    fn a_source_refuses_a_correct_signature_in_the_other_scheme() {
        // Same secret, both signatures correct: each source hears only its own scheme.
        let as_hub = headers(HUB_SIGNATURE_HEADER, &hub(BODY));
        assert_eq!(
            verify(TP, SECRET, &as_hub, BODY, NOW),
            Err(SignatureError::WrongScheme {
                expected: TUNEPLANE_SIGNATURE_HEADER,
                got: HUB_SIGNATURE_HEADER
            })
        );
        let as_tp = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={NOW},v1={}", sign(NOW, BODY)),
        );
        assert!(matches!(
            verify(HUB, SECRET, &as_tp, BODY, NOW),
            Err(SignatureError::WrongScheme { .. })
        ));
    }

    #[test]
    fn ten_thousand_v1_values_are_refused_by_the_parser_before_any_hmac() {
        let sig = sign(NOW, BODY);
        let many = format!("t={NOW}{}", format!(",v1={sig}").repeat(10_000));
        // Over the length limit: refused on the length alone.
        assert!(matches!(
            parse_tuneplane(&many),
            Err(SignatureError::Malformed { reason, .. }) if reason.contains("512 bytes")
        ));
        // Within the length limit, the count limit holds on its own: 5 short values.
        let five =
            format!("t={NOW}") + &format!(",v1={}", "0".repeat(64)).repeat(MAX_SIGNATURES + 1);
        assert!(five.len() <= signature::MAX_HEADER_BYTES);
        assert!(matches!(
            parse_tuneplane(&five),
            Err(SignatureError::Malformed { reason, .. }) if reason.contains("more than 4")
        ));
        // Even with the right signature among them, the header is refused, not searched.
        let h = HeaderMap::from_iter([(
            axum::http::HeaderName::from_static(TUNEPLANE_SIGNATURE_HEADER),
            HeaderValue::from_str(&many).unwrap(),
        )]);
        assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)));
    }

    #[test]
    fn extreme_timestamps_are_stale_or_malformed_never_an_overflow() {
        for t in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX] {
            assert!(!within_window(t, NOW), "{t}");
            assert!(!within_window(NOW, t) || t == NOW, "{t}");
        }
        assert!(within_window(NOW - WINDOW_SECONDS, NOW));
        for t in [i64::MIN.to_string(), i64::MAX.to_string(), "-5".into()] {
            let h = headers(
                TUNEPLANE_SIGNATURE_HEADER,
                &format!("t={t},v1={}", sign(NOW, BODY)),
            );
            assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)), "{t}");
        }
        // A clock at the far end of the range does not overflow either.
        let h = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t=999999999999,v1={}", sign(999_999_999_999, BODY)),
        );
        assert_eq!(
            verify(TP, SECRET, &h, BODY, i64::MIN),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn a_repeated_signature_header_is_malformed() {
        let value = format!("t={NOW},v1={}", sign(NOW, BODY));
        let mut h = headers(TUNEPLANE_SIGNATURE_HEADER, &value);
        h.append(
            TUNEPLANE_SIGNATURE_HEADER,
            HeaderValue::from_str(&value).unwrap(),
        );
        assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)));
    }
}
