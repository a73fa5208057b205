//! Suite cases of job-event callbacks at the API: subscriptions per tenant, checked field by
//! field, capped, audited; the signing secret; a job's callback to an internal address refused
//! at submit.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::archives::{SPEC, body, code};
use super::{Harness, TENANT_A};

async fn post(h: &Harness, key: &str, path: &str, value: &Value) -> super::Reply {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    h.call(
        Method::POST,
        path,
        Some(key),
        &[("content-type", "application/json")],
        bytes,
    )
    .await
}

fn field_paths(reply: &super::Reply) -> Vec<String> {
    reply.json["error"]["details"]["fields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    format!(
                        "{}: {}",
                        f["path"].as_str().unwrap_or(""),
                        f["message"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub async fn subscriptions_are_kept_per_tenant_checked_by_field_capped_and_audited(h: &Harness) {
    let (a, b) = (h.key_a.clone(), h.key_b.clone());
    let made = post(
        h,
        &a,
        "/v1/subscriptions",
        &json!({"url": "https://hooks.example.com/tp?token=s3cret", "events": ["terminal"], "format": "slack"}),
    )
    .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
    let id = made.json["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("sub_"), "{}", made.json);
    assert_eq!(
        made.json["url"], "https://hooks.example.com/tp?…",
        "the token is not shown"
    );
    assert_eq!(
        made.json["events"],
        json!(["succeeded", "failed", "stopped"])
    );
    assert_eq!(made.json["format"], "slack");

    // Refused with the field and the reason: internal addresses, unknown events and formats.
    for (bad, words) in [
        (
            json!({"url": "https://169.254.169.254/latest"}),
            "url: \"https://169.254.169.254/latest\": 169.254.169.254 is the cloud metadata service",
        ),
        (json!({"url": "https://10.0.0.8/x"}), "private (10.0.0.0/8)"),
        (
            json!({"url": "https://127.0.0.1:8443/x"}),
            "loopback is allowed only in dev",
        ),
        (
            json!({"url": "http://hooks.example.com/x"}),
            "must be https://",
        ),
        (
            json!({"url": "https://hooks.example.com/x", "events": ["finished"]}),
            "events: unknown event \"finished\"",
        ),
        (
            json!({"url": "https://hooks.example.com/x", "format": "xml"}),
            "format: unknown format \"xml\"",
        ),
    ] {
        let r = post(h, &a, "/v1/subscriptions", &bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.json);
        assert_eq!(r.json["error"]["code"], "invalid_request");
        let fields = field_paths(&r);
        assert!(
            fields.iter().any(|f| f.contains(words)),
            "{bad}: {fields:?}"
        );
    }

    // Tenant B sees none of A's and cannot delete it.
    let listed_b = h.get_with(&b, "/v1/subscriptions").await;
    assert_eq!(
        listed_b.json["subscriptions"],
        json!([]),
        "{}",
        listed_b.json
    );
    let del_b = h
        .call(
            Method::DELETE,
            &format!("/v1/subscriptions/{id}"),
            Some(&b),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(del_b.status, StatusCode::NOT_FOUND, "{}", del_b.json);

    // The cap: ten in all, the eleventh is a 409 that says what to do.
    for i in 1..10 {
        let r = post(
            h,
            &a,
            "/v1/subscriptions",
            &json!({"url": format!("https://hooks.example.com/{i}")}),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    }
    let over = post(
        h,
        &a,
        "/v1/subscriptions",
        &json!({"url": "https://hooks.example.com/11"}),
    )
    .await;
    assert_eq!(over.status, StatusCode::CONFLICT, "{}", over.json);
    assert_eq!(over.json["error"]["code"], "subscription_limit");
    assert!(
        over.json["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("delete one"),
        "{}",
        over.json
    );
    let listed = h.get_with(&a, "/v1/subscriptions").await;
    assert_eq!(
        listed.json["subscriptions"].as_array().map(Vec::len),
        Some(10)
    );
    assert_eq!(
        listed.json["subscriptions"][0]["id"],
        id.as_str(),
        "oldest first"
    );

    let del = h
        .call(
            Method::DELETE,
            &format!("/v1/subscriptions/{id}"),
            Some(&a),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(del.status, StatusCode::OK, "{}", del.json);
    assert_eq!(del.json["deleted"], true);
    let again = h
        .call(
            Method::DELETE,
            &format!("/v1/subscriptions/{id}"),
            Some(&a),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);

    // The secret: made once, the same on every read, replaced by a rotation.
    let s1 = h.get_with(&a, "/v1/subscriptions/secret").await;
    assert_eq!(s1.status, StatusCode::OK, "{}", s1.json);
    let secret = s1.json["secret"].as_str().unwrap_or_default().to_owned();
    assert!(
        secret.starts_with("whsec_") && secret.len() == 6 + 64,
        "{}",
        s1.json
    );
    assert_eq!(
        h.get_with(&a, "/v1/subscriptions/secret").await.json["secret"],
        secret.as_str()
    );
    let rotated = post(h, &a, "/v1/subscriptions/secret/rotate", &json!({})).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.json);
    assert_ne!(rotated.json["secret"], secret.as_str());
    assert_ne!(
        h.get_with(&b, "/v1/subscriptions/secret").await.json["secret"],
        rotated.json["secret"],
        "each tenant has its own"
    );

    // Audited once each, with the API as the source, for tenant A only.
    let audit = h.get_with(&a, "/v1/audit?since=1h").await;
    let actions: Vec<(String, String)> = audit.json["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["action"]
                .as_str()
                .unwrap_or("")
                .starts_with("subscription.")
        })
        .map(|e| {
            (
                e["action"].as_str().unwrap_or("").to_owned(),
                e["actor"]["source"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let count = |action: &str| actions.iter().filter(|(a, _)| a == action).count();
    assert_eq!(count("subscription.create"), 10, "{actions:?}");
    assert_eq!(count("subscription.delete"), 1, "{actions:?}");
    assert_eq!(count("subscription.secret_rotate"), 1, "{actions:?}");
    assert!(
        actions.iter().all(|(_, source)| source == "api"),
        "{actions:?}"
    );
    assert!(
        audit.json["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| e["tenant"] == TENANT_A)
    );
}

pub async fn a_job_calling_back_to_an_internal_address_is_refused_at_submit_and_nothing_is_stored(
    h: &Harness,
) {
    let before = h.job_count(TENANT_A).await;
    let spec = format!(
        "{SPEC}notify:\n  - {{url: 'https://169.254.169.254/latest', events: [terminal]}}\n  - {{url: 'https://10.2.3.4/hook'}}\n"
    );
    let reply = h.submit(&body(&spec, &code()), None).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json);
    assert_eq!(reply.json["error"]["code"], "invalid_spec");
    let fields = field_paths(&reply);
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("notify[0].url") && f.contains("metadata service")),
        "{fields:?}"
    );
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("notify[1].url") && f.contains("private (10.0.0.0/8)")),
        "{fields:?}"
    );
    assert_eq!(h.job_count(TENANT_A).await, before);

    // A public receiver is accepted and kept on the job's spec.
    let ok = format!(
        "{SPEC}notify: [{{url: 'https://hooks.example.com/x', events: [running, terminal]}}]\n"
    );
    let made = h.submit(&body(&ok, &code()), None).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
    let id = made.json["job_id"].as_str().unwrap_or_default();
    let job = h.jobs().get_job(id).await.ok().flatten().expect("stored");
    assert_eq!(job.spec.notify.len(), 1);
    assert_eq!(job.spec.notify[0].events.len(), 4);
    // Its submission's `queued` event waits in the outbox, written with the job.
    let outbox = h.jobs().list_outbox(100).await.unwrap_or_default();
    assert!(
        outbox
            .iter()
            .any(|e| e.event.job_id == id
                && e.event.kind == tuneplane_core::callback::EventKind::Queued),
        "{outbox:?}"
    );
}
