//! What a delivery carries: the body (TunePlane's JSON event or a Slack message) and its
//! signature, in the same `t=<unix>,v1=<hex>` scheme inbound webhooks use: HMAC-SHA256 with the
//! tenant's callback secret over `<t>.<body>`. A receiver checks the signature, refuses a `t`
//! far from its clock, and deduplicates by the event id (the body's `id`, also the
//! `X-TunePlane-Event-Id` header), which is the same on every retry.

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::Format;
use super::outbox::OutboxEntry;

/// The signature header of deliveries (and of inbound webhooks of the `tuneplane` scheme).
pub const SIGNATURE_HEADER: &str = "X-TunePlane-Signature";
/// The event id header.
pub const EVENT_ID_HEADER: &str = "X-TunePlane-Event-Id";
/// The event kind header (`job.succeeded`, ...).
pub const EVENT_HEADER: &str = "X-TunePlane-Event";

/// The hex HMAC-SHA256 of `<t>.<body>` under `secret`.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The value of [`SIGNATURE_HEADER`] for `body` signed at `t`.
pub fn signature_header(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", sign(secret, t, body))
}

/// The links of a job under the platform's public URL (none without one).
fn links(public_url: Option<&str>, job_id: &str) -> Value {
    match public_url.map(|u| u.trim_end_matches('/')) {
        Some(base) if !base.is_empty() => json!({
            "api": format!("{base}/v1/jobs/{job_id}"),
            "console": format!("{base}/console/jobs/{job_id}"),
        }),
        _ => json!({}),
    }
}

/// The body of `entry`'s delivery in `format`; `public_url` (the API's public address) makes
/// the links.
pub fn body(entry: &OutboxEntry, format: Format, public_url: Option<&str>) -> Vec<u8> {
    let e = &entry.event;
    let links = links(public_url, &e.job_id);
    let value = match format {
        Format::Json => {
            let mut value = json!({
                "id": entry.id,
                "type": format!("job.{}", e.kind),
                "at_ms": e.at_ms,
                "job": {
                    "id": e.job_id,
                    "name": e.job_name,
                    "tenant": e.tenant,
                    "state": e.state,
                    "attempt": e.attempt,
                    "reason": e.reason,
                    "message": e.message,
                    "submitted_at_ms": e.submitted_at_ms,
                    "admitted_at_ms": e.admitted_at_ms,
                    "running_at_ms": e.running_at_ms,
                    "finished_at_ms": e.finished_at_ms,
                },
                "links": links,
            });
            // Only for arrays, so a job outside one has the body it always had.
            if let Some(array) = &e.array {
                value["job"]["array"] = json!(array);
            }
            value
        }
        Format::Slack => {
            let mut text = format!("TunePlane job *{}* (`{}`) {}", e.job_name, e.job_id, e.kind);
            if let Some(a) = &e.array
                && let (Some(parent), Some(index)) = (&a.parent, a.index)
            {
                text.push_str(&format!(" (child {index} of array `{parent}`)"));
            }
            if e.attempt > 1 || e.kind == super::EventKind::Requeued {
                text.push_str(&format!(" (attempt {})", e.attempt));
            }
            if let Some(reason) = &e.reason {
                text.push_str(&format!(": {reason}"));
            }
            if !e.message.is_empty() {
                text.push_str(&format!("\n{}", e.message));
            }
            if let Some(console) = links.get("console").and_then(Value::as_str) {
                text.push_str(&format!("\n<{console}|Open in TunePlane>"));
            }
            json!({"text": text})
        }
    };
    // A `Value` always serialises.
    serde_json::to_vec(&value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callback::EventKind;
    use crate::callback::outbox::CallbackEvent;
    use crate::job::JobState;

    fn entry() -> OutboxEntry {
        OutboxEntry {
            id: "ev_1".into(),
            order: 16,
            event: CallbackEvent {
                kind: EventKind::Failed,
                job_id: "j1".parse().unwrap(),
                job_name: "llama-sft".into(),
                tenant: "t".parse().unwrap(),
                state: JobState::Failed,
                attempt: 2,
                reason: Some("OutOfMemory".into()),
                message: "the entrypoint was killed".into(),
                at_ms: 5,
                submitted_at_ms: 1,
                admitted_at_ms: Some(2),
                running_at_ms: Some(3),
                finished_at_ms: Some(5),
                array: None,
            },
            notify: Vec::new(),
            deliveries: None,
            created_ms: 5,
            rev: 1,
        }
    }

    #[test]
    fn the_json_body_carries_id_state_reason_clocks_and_links() {
        let body: Value = serde_json::from_slice(&body(
            &entry(),
            Format::Json,
            Some("https://tp.example.com/"),
        ))
        .unwrap();
        assert_eq!(body["id"], "ev_1");
        assert_eq!(body["type"], "job.failed");
        assert_eq!(body["job"]["state"], "FAILED");
        assert_eq!(body["job"]["reason"], "OutOfMemory");
        assert_eq!(body["job"]["running_at_ms"], 3);
        assert_eq!(
            body["links"]["console"],
            "https://tp.example.com/console/jobs/j1"
        );
    }

    #[test]
    fn an_array_childs_body_names_its_parent_and_index_and_other_bodies_are_unchanged() {
        let plain: Value = serde_json::from_slice(&body(&entry(), Format::Json, None)).unwrap();
        assert!(plain["job"].get("array").is_none(), "{plain}");
        let mut child = entry();
        child.event.array = Some(crate::callback::outbox::CallbackArray {
            size: 8,
            parent: Some("j-p".parse().unwrap()),
            index: Some(3),
            counts: None,
        });
        let json: Value = serde_json::from_slice(&body(&child, Format::Json, None)).unwrap();
        assert_eq!(
            json["job"]["array"],
            json!({"size": 8, "parent": "j-p", "index": 3})
        );
        let slack: Value = serde_json::from_slice(&body(&child, Format::Slack, None)).unwrap();
        let text = slack["text"].as_str().unwrap();
        assert!(text.contains("(child 3 of array `j-p`)"), "{text}");
    }

    #[test]
    fn the_slack_body_is_one_text_with_the_job_and_its_link() {
        let body: Value = serde_json::from_slice(&body(
            &entry(),
            Format::Slack,
            Some("https://tp.example.com"),
        ))
        .unwrap();
        let text = body["text"].as_str().unwrap();
        assert!(
            text.starts_with("TunePlane job *llama-sft* (`j1`) failed (attempt 2): OutOfMemory"),
            "{text}"
        );
        assert!(
            text.ends_with("<https://tp.example.com/console/jobs/j1|Open in TunePlane>"),
            "{text}"
        );
        assert_eq!(body.as_object().unwrap().len(), 1);
    }

    #[test]
    fn the_signature_is_hmac_of_t_dot_body() {
        // Computed independently: printf '1700000000.{}' | openssl dgst -sha256 -hmac whsec_x
        assert_eq!(
            sign("whsec_x", 1_700_000_000, b"{}"),
            "be8cb8325f2202445260a855532f967e30ad2a9394ce28da66ee02880ddcb661"
        );
        let h = signature_header("whsec_x", 7, b"body");
        assert!(h.starts_with("t=7,v1="));
        assert_eq!(h.len(), "t=7,v1=".len() + 64);
        assert_ne!(sign("whsec_x", 7, b"body"), sign("whsec_y", 7, b"body"));
        assert_ne!(sign("whsec_x", 7, b"body"), sign("whsec_x", 8, b"body"));
    }
}
