//! Suite case of the audit trail: every change through every door of the functions (API,
//! webhook, schedule, inbox, submission event) appears exactly once, with its actor and source,
//! for its own tenant only. The console's and the admin CLI's doors are tested beside them.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tuneplane_core::clock::now_secs;
use tuneplane_core::store::hash_api_key;

use super::archives::{SPEC, body, code};
use super::triggers::{deliver, fixture, s3_created, store_schedule, submission_event};
use super::{Harness, SENDER_ACCOUNT, WEBHOOK_SECRET, tuneplane_signature};

fn key_id(secret: &str) -> String {
    format!("k-{}", &hash_api_key(secret)[..16])
}

async fn audit_of(h: &Harness, key: &str, query: &str) -> super::Reply {
    h.call(
        Method::GET,
        &format!("/v1/audit{query}"),
        Some(key),
        &[],
        Vec::new(),
    )
    .await
}

pub async fn every_change_through_every_door_is_audited_once_with_its_actor_and_source(
    h: &Harness,
) {
    use tuneplane_functions::triggers::{handle_inbox, handle_scheduled};
    let a = h.key_a.clone();
    // API: a submission, repeated with its idempotency key (one change), stopped twice (one).
    let first = h.submit(&body(SPEC, &code()), Some("audit-1")).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.json);
    let again = h.submit(&body(SPEC, &code()), Some("audit-1")).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.json);
    let job = first.json["job_id"].as_str().unwrap_or_default().to_owned();
    for expected in [StatusCode::ACCEPTED, StatusCode::OK] {
        let stop = h
            .call(
                Method::POST,
                &format!("/v1/jobs/{job}/stop"),
                Some(&a),
                &[],
                Vec::new(),
            )
            .await;
        assert_eq!(stop.status, expected, "{}", stop.json);
    }
    // API: a playground created and deleted (twice: the second changes nothing).
    let pg = json!({"model": "qwen2.5-7b", "series": "l40s", "gpus": 1, "ttl_seconds": 600});
    let made = h
        .call(
            Method::POST,
            "/v1/playgrounds",
            Some(&a),
            &[],
            pg.to_string().into_bytes(),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
    let pg_id = made.json["id"].as_str().unwrap_or_default().to_owned();
    for _ in 0..2 {
        let gone = h
            .call(
                Method::DELETE,
                &format!("/v1/playgrounds/{pg_id}"),
                Some(&a),
                &[],
                Vec::new(),
            )
            .await;
        assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.json);
    }
    // Webhook `ci`, signed.
    let payload = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let sig = tuneplane_signature(WEBHOOK_SECRET, now_secs(), &payload);
    let hook = deliver(
        h,
        "ci",
        &[("x-tuneplane-signature", sig.as_str())],
        &payload,
    )
    .await;
    assert_eq!(hook.status, StatusCode::CREATED, "{}", hook.json);
    // A schedule (its template job is one more API submission), fired twice: one job.
    store_schedule(h, "audit-nightly").await;
    let fired = fixture("scheduler_event.json", &[("SCHEDULE", "audit-nightly")]);
    for _ in 0..2 {
        handle_scheduled(&h.state, &fired).await.unwrap();
    }
    // The inbox, the same notification twice: one job.
    let archive = super::archives::zip(&[("tuneplane.yaml", SPEC), ("train.py", "print(1)\n")]);
    assert!(h.blobs().put("inbox/acme/audit.zip", archive).await.is_ok());
    let dropped = s3_created("inbox/acme/audit.zip", "feedbeef");
    // A submission event, twice: one job.
    let event = submission_event(SENDER_ACCOUNT);
    for _ in 0..2 {
        handle_inbox(&h.state, &dropped).await.unwrap();
        handle_inbox(&h.state, &event).await.unwrap();
    }

    let listed = audit_of(h, &a, "").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.json);
    let entries = listed.json["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &entries {
        assert_eq!(e["tenant"], "acme", "{e}");
        let k = (
            e["action"].as_str().unwrap_or_default().to_owned(),
            e["actor"]["source"].as_str().unwrap_or_default().to_owned(),
        );
        *counts.entry(k).or_default() += 1;
    }
    let want: BTreeMap<(String, String), usize> = [
        (("job.submit", "api"), 2),
        (("job.submit", "webhook"), 1),
        (("job.submit", "schedule"), 1),
        (("job.submit", "inbox"), 1),
        (("job.submit", "event"), 1),
        (("job.stop", "api"), 1),
        (("playground.create", "api"), 1),
        (("playground.delete", "api"), 1),
    ]
    .into_iter()
    .map(|((a, s), n)| ((a.to_owned(), s.to_owned()), n))
    .collect();
    assert_eq!(counts, want, "{}", listed.json);

    // Actors: the API key's id for the API; the trigger for the others.
    let by = |action: &str, source: &str| -> Vec<&Value> {
        entries
            .iter()
            .filter(|e| e["action"] == action && e["actor"]["source"] == source)
            .collect()
    };
    for e in by("job.submit", "api")
        .into_iter()
        .chain(by("job.stop", "api"))
        .chain(by("playground.create", "api"))
    {
        assert_eq!(e["actor"]["key_id"], key_id(&a).as_str(), "{e}");
    }
    assert_eq!(by("job.stop", "api")[0]["target"], job.as_str());
    assert_eq!(by("playground.delete", "api")[0]["target"], pg_id.as_str());
    assert_eq!(
        by("job.submit", "webhook")[0]["actor"]["key_id"],
        "webhook:ci"
    );
    assert_eq!(
        by("job.submit", "schedule")[0]["actor"]["key_id"],
        "schedule:audit-nightly"
    );
    assert_eq!(
        by("job.submit", "inbox")[0]["actor"]["key_id"],
        "inbox:inbox/acme/audit.zip"
    );
    // Every API request had its own request id; the entries are oldest first.
    let mut ids: Vec<&str> = [
        "job.submit",
        "job.stop",
        "playground.create",
        "playground.delete",
    ]
    .iter()
    .flat_map(|a| by(a, "api"))
    .map(|e| e["actor"]["request_id"].as_str().unwrap_or_default())
    .collect();
    assert!(ids.iter().all(|id| !id.is_empty() && *id != "-"), "{ids:?}");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5, "one request id per API change");
    let times: Vec<i64> = entries
        .iter()
        .map(|e| e["at_ms"].as_i64().unwrap_or(0))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // Another tenant sees none of it; a bad bound is named.
    let other = audit_of(h, &h.key_b.clone(), "").await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.json);
    assert_eq!(other.json["entries"], json!([]));
    let bad = audit_of(h, &a, "?since=yesterday").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.json);
    let message = bad.json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("since:"), "{message}");
    // A window before everything: nothing.
    let none = audit_of(h, &a, "?since=0&until=1").await;
    assert_eq!(none.json["entries"], json!([]), "{}", none.json);
}
