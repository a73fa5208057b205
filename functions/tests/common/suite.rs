//! The API behaviour every store implementation must show; `api_suite!` instantiates each case
//! as a test for one harness constructor.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::capsule::storage_key;
use tuneplane_core::quota::{Demand, TenantQuota, TenantUsage};

use super::archives::{BAD_SPEC, SPEC, body, code, hostile_tar};
use super::{Harness, TENANT_A, TENANT_B};

/// Instantiates every case of the suite for `$make` (an async fn returning a [`Harness`]).
#[macro_export]
macro_rules! api_suite {
    ($make:path) => {
        $crate::api_suite!(@cases $make; suite;
            submit_returns_201_and_stores_the_capsule_once,
            same_request_with_the_same_key_returns_the_same_job,
            same_key_with_another_body_is_409,
            fifty_concurrent_identical_submissions_create_one_job,
            bad_spec_is_400_listing_every_field_error,
            malicious_archive_is_400_naming_the_entry_and_stores_nothing,
            missing_or_wrong_key_is_401,
            another_tenants_job_is_404,
            listing_filters_by_status_and_pages_with_a_cursor,
            stop_is_accepted_once_and_then_reports_the_job,
            logs_of_an_unfinished_job_are_409,
            upload_then_submit_by_upload_id,
            job_that_cannot_fit_the_published_capacity_is_rejected_at_submit,
            job_above_its_tenants_hard_quota_is_refused_at_submit_and_nothing_is_stored,
            quota_shows_the_callers_limits_and_usage_and_never_another_tenants,
            healthz_needs_no_key_and_unknown_routes_are_json_404,
            read_only_key_cannot_submit_or_stop,
            playgrounds_are_created_listed_and_expired_per_tenant,
            playground_that_cannot_fit_the_published_capacity_is_refused_naming_the_field,
            playground_list_shows_state_reason_and_the_proxy_url,
            a_tenant_over_its_playground_limit_gets_a_clear_409,
            a_playground_is_reached_through_the_api_which_adds_the_servers_key,
        );
        $crate::api_suite!(@cases $make; audit;
            every_change_through_every_door_is_audited_once_with_its_actor_and_source,
        );
        $crate::api_suite!(@cases $make; triggers;
            signed_webhook_submits_once_and_a_replay_is_401,
            a_failed_webhook_delivery_stays_remembered_and_a_re_signed_retry_is_heard,
            webhook_with_bad_signature_or_stale_timestamp_is_401,
            git_push_webhook_runs_the_source_template_with_overrides,
            a_signed_webhook_with_steps_submits_a_pipeline,
            a_pipeline_sent_again_with_its_idempotency_key_creates_nothing,
            scheduled_event_delivered_twice_creates_one_job,
            a_pipeline_schedule_fires_every_step_once_per_firing,
            inbox_archive_becomes_a_job,
            bad_inbox_archive_gets_an_error_file_only,
            an_inbox_archive_of_an_unknown_tenant_is_refused_with_a_note,
            submission_event_becomes_a_job,
            forged_submission_events_are_refused,
            inbox_keys_with_spaces_and_plus_are_found_and_bad_names_get_a_note,
        );
        $crate::api_suite!(@cases $make; live;
            a_one_off_read_of_a_running_job_waits_for_the_shipment_that_answers_it,
            a_read_without_wait_or_of_a_follower_answers_at_once,
            a_one_off_read_nobody_answers_gets_what_was_shipped,
            tail_sends_each_containers_last_lines_with_their_offset,
        );
        $crate::api_suite!(@cases $make; security;
            a_webhook_signed_in_the_other_scheme_is_refused_and_stores_nothing,
            webhook_idempotency_comes_from_signed_data_not_the_delivery_header,
            a_signature_header_with_ten_thousand_values_is_refused_as_malformed,
            a_text_plain_submission_is_415_and_stores_nothing,
            a_spec_may_name_only_its_tenants_namespace,
        );
        $crate::api_suite!(@cases $make; callbacks;
            subscriptions_are_kept_per_tenant_checked_by_field_capped_and_audited,
            a_job_calling_back_to_an_internal_address_is_refused_at_submit_and_nothing_is_stored,
        );
        $crate::api_suite!(@cases $make; grants;
            a_grant_opens_only_its_own_jobs_folders,
            a_grant_dies_with_its_attempt,
            every_upload_names_its_size_and_its_url_is_signed_for_that_size,
            uploads_past_the_tenants_storage_quota_are_refused_with_its_use_and_quota,
            checkpoints_count_once_complete_and_only_the_newest_are_kept,
            outputs_are_listed_with_links_for_their_tenant_only,
        );
    };
    (@cases $make:path; $module:ident; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let h = $make().await;
                common::$module::$case(&h).await;
            }
        )*
    };
}

fn job_id(reply: &super::Reply) -> String {
    reply.json["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job_id in {:?}: {}", reply.status, reply.json))
        .to_owned()
}

pub async fn submit_returns_201_and_stores_the_capsule_once(h: &Harness) {
    let first = h.submit(&body(SPEC, &code()), None).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.json);
    assert_eq!(first.json["status"], "QUEUED");
    let sha = first.json["capsule_sha256"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(sha.len(), 64);
    assert!(
        h.blobs()
            .head(&storage_key(&sha))
            .await
            .ok()
            .flatten()
            .is_some()
    );
    let id = job_id(&first);
    assert_eq!(
        first.headers.get("location").and_then(|v| v.to_str().ok()),
        Some(format!("/v1/jobs/{id}").as_str())
    );

    // Same content without a key: a second job, but the capsule is stored once.
    let second = h.submit(&body(SPEC, &code()), None).await;
    assert_eq!(second.status, StatusCode::CREATED);
    assert_ne!(job_id(&second), id);
    assert_eq!(second.json["capsule_sha256"], sha.as_str());
    assert_eq!(h.object_count("capsules/").await, 1);

    let got = h.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json["tenant"], TENANT_A);
    let events = h.get(&format!("/v1/jobs/{id}/events")).await;
    assert_eq!(
        events.json["events"][0]["reason"], "Submitted",
        "{}",
        events.json
    );
}

pub async fn same_request_with_the_same_key_returns_the_same_job(h: &Harness) {
    let first = h.submit(&body(SPEC, &code()), Some("build-7")).await;
    let again = h.submit(&body(SPEC, &code()), Some("build-7")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(again.status, StatusCode::OK, "{}", again.json);
    assert_eq!(job_id(&first), job_id(&again));
    assert_eq!(h.job_count(TENANT_A).await, 1);
}

pub async fn same_key_with_another_body_is_409(h: &Harness) {
    let first = h.submit(&body(SPEC, &code()), Some("k-1")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other = super::archives::tar_gz(&[("train.py", "print('other')\n")]);
    let reply = h.submit(&body(SPEC, &other), Some("k-1")).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.json);
    assert_eq!(reply.json["error"]["code"], "idempotency_conflict");
    assert_eq!(
        reply.json["error"]["details"]["job_id"],
        job_id(&first).as_str()
    );
    assert_eq!(h.job_count(TENANT_A).await, 1);
}

pub async fn fifty_concurrent_identical_submissions_create_one_job(h: &Harness) {
    let request = body(SPEC, &code());
    let mut set = JoinSet::new();
    for _ in 0..50 {
        let app = h.app.clone();
        let key = h.key_a.clone();
        let bytes = serde_json::to_vec(&request).unwrap_or_default();
        set.spawn(async move {
            use tower::ServiceExt;
            let req = axum::http::Request::post("/v1/jobs")
                .header("authorization", format!("Bearer {key}"))
                .header("idempotency-key", "same-50")
                .body(axum::body::Body::from(bytes))
                .unwrap();
            let resp = match app.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            (
                status,
                json["job_id"].as_str().unwrap_or("").to_owned(),
                json,
            )
        });
    }
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    while let Some(joined) = set.join_next().await {
        let (status, id, json) = joined.expect("task");
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::OK => {}
            other => panic!("unexpected {other}: {json}"),
        }
        ids.insert(id);
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(h.job_count(TENANT_A).await, 1);
}

pub async fn bad_spec_is_400_listing_every_field_error(h: &Harness) {
    let reply = h.submit(&body(BAD_SPEC, &code()), None).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json["error"]["code"], "invalid_spec");
    let paths: Vec<&str> = reply.json["error"]["details"]["fields"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default();
    for expected in ["name", "image", "pools[0].nodes", "bogus"] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
    assert_eq!(h.object_count("capsules/").await, 0);
}

pub async fn malicious_archive_is_400_naming_the_entry_and_stores_nothing(h: &Harness) {
    let reply = h.submit(&body(SPEC, &hostile_tar()), Some("evil")).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json);
    assert_eq!(reply.json["error"]["code"], "invalid_code");
    let entry = reply.json["error"]["details"]["entry"]
        .as_str()
        .unwrap_or_default();
    assert!(entry.contains("evil.sh"), "{}", reply.json);
    assert!(
        reply.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("evil.sh")
    );
    assert_eq!(h.object_count("capsules/").await, 0);
    assert_eq!(h.job_count(TENANT_A).await, 0);
}

pub async fn missing_or_wrong_key_is_401(h: &Harness) {
    let bytes = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let cases = [
        None,
        Some("tp_0000000000000000000000000000000000000000".to_owned()),
        Some("not-a-key".to_owned()),
    ];
    for key in cases {
        let reply = h
            .call(Method::POST, "/v1/jobs", key.as_deref(), &[], bytes.clone())
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{key:?}");
        assert_eq!(reply.json["error"]["code"], "unauthenticated");
        let get = h
            .call(Method::GET, "/v1/jobs", key.as_deref(), &[], Vec::new())
            .await;
        assert_eq!(get.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(h.job_count(TENANT_A).await, 0);
}

pub async fn another_tenants_job_is_404(h: &Harness) {
    let id = job_id(&h.submit(&body(SPEC, &code()), None).await);
    let b = h.key_b.clone();
    for (method, path) in [
        (Method::GET, format!("/v1/jobs/{id}")),
        (Method::GET, format!("/v1/jobs/{id}/events")),
        (Method::GET, format!("/v1/jobs/{id}/logs")),
        (Method::POST, format!("/v1/jobs/{id}/stop")),
    ] {
        let reply = h
            .call(method.clone(), &path, Some(&b), &[], Vec::new())
            .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    let list = h
        .call(Method::GET, "/v1/jobs", Some(&b), &[], Vec::new())
        .await;
    assert_eq!(list.json["jobs"], json!([]));
    let mine = h.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(mine.status, StatusCode::OK);
    assert!(!mine.json["stop_requested"].as_bool().unwrap_or(true));
}

pub async fn listing_filters_by_status_and_pages_with_a_cursor(h: &Harness) {
    for i in 0..3 {
        let code = super::archives::tar_gz(&[("train.py", &format!("print({i})\n"))]);
        assert_eq!(
            h.submit(&body(SPEC, &code), None).await.status,
            StatusCode::CREATED
        );
    }
    let page = h.get("/v1/jobs?limit=2").await;
    assert_eq!(
        page.json["jobs"].as_array().map(Vec::len),
        Some(2),
        "{}",
        page.json
    );
    let cursor = page.json["next_cursor"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!cursor.is_empty());
    let rest = h.get(&format!("/v1/jobs?limit=2&cursor={cursor}")).await;
    assert_eq!(rest.json["jobs"].as_array().map(Vec::len), Some(1));
    let queued = h.get("/v1/jobs?status=QUEUED").await;
    assert_eq!(queued.json["jobs"].as_array().map(Vec::len), Some(3));
    let running = h.get("/v1/jobs?status=running").await;
    assert_eq!(running.json["jobs"], json!([]));
    assert_eq!(
        h.get("/v1/jobs?status=LOST").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        h.get("/v1/jobs?cursor=zz").await.status,
        StatusCode::BAD_REQUEST
    );
}

pub async fn stop_is_accepted_once_and_then_reports_the_job(h: &Harness) {
    let id = job_id(&h.submit(&body(SPEC, &code()), None).await);
    let key = h.key_a.clone();
    let path = format!("/v1/jobs/{id}/stop");
    let first = h
        .call(Method::POST, &path, Some(&key), &[], Vec::new())
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.json);
    assert_eq!(first.json["stop_requested"], true);
    let again = h
        .call(Method::POST, &path, Some(&key), &[], Vec::new())
        .await;
    assert_eq!(again.status, StatusCode::OK);
}

pub async fn logs_of_an_unfinished_job_are_409(h: &Harness) {
    let id = job_id(&h.submit(&body(SPEC, &code()), None).await);
    let reply = h.get(&format!("/v1/jobs/{id}/logs")).await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(reply.json["error"]["code"], "logs_not_archived");
}

pub async fn upload_then_submit_by_upload_id(h: &Harness) {
    let key = h.key_a.clone();
    let upload = h
        .call(Method::POST, "/v1/uploads", Some(&key), &[], Vec::new())
        .await;
    assert_eq!(upload.status, StatusCode::CREATED, "{}", upload.json);
    let upload_id = upload.json["upload_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        upload.json["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http"))
    );
    // The client PUTs to the presigned URL; the object lands at the upload's key.
    let blob_key = format!("uploads/{TENANT_A}/{upload_id}/code");
    h.blobs().put(&blob_key, code()).await.expect("upload");
    let by_upload = json!({"spec": SPEC, "code": {"upload_id": upload_id}});
    let reply = h.submit(&by_upload, None).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    let missing = json!({"spec": SPEC, "code": {"upload_id": "u-0000"}});
    assert_eq!(h.submit(&missing, None).await.status, StatusCode::NOT_FOUND);
    // Tenant B cannot submit tenant A's upload: its key resolves under B's prefix.
    let bytes = serde_json::to_vec(&by_upload).unwrap_or_default();
    let b = h.key_b.clone();
    let other = h.call(Method::POST, "/v1/jobs", Some(&b), &[], bytes).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

pub async fn job_that_cannot_fit_the_published_capacity_is_rejected_at_submit(h: &Harness) {
    let accepted = h.submit(&body(SPEC, &code()), None).await;
    let notes = accepted.json["notes"].to_string();
    assert!(notes.contains("capacity"), "{notes}");
    let node = |name: &str| NodeCapacity::ready(name, Some("h200"), 4, 96.0, 1024.0);
    let snapshot = CapacitySnapshot::from_nodes(1, vec![node("n1"), node("n2")]);
    let value = serde_json::to_value(&snapshot).unwrap_or_default();
    h.jobs().put_capacity(&value).await.unwrap();
    let reply = h.submit(&body(SPEC, &code()), None).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json);
    assert!(
        reply.json["error"]["details"]["fields"]
            .to_string()
            .contains("pools[0]")
    );
    let capacity = h.get("/v1/capacity").await;
    assert_eq!(capacity.json["snapshot"]["series"]["h200"]["total_gpus"], 8);
}

fn h200_quota(tenant: &str, gpus: u32, borrow: bool) -> TenantQuota {
    let mut q = TenantQuota::unlimited(&tenant.parse().unwrap());
    q.set_gpu_limit("h200", gpus, borrow);
    q
}

pub async fn job_above_its_tenants_hard_quota_is_refused_at_submit_and_nothing_is_stored(
    h: &Harness,
) {
    // SPEC needs 1 node × 8 h200 GPUs; tenant A may hold at most 4.
    h.jobs()
        .put_quota(&h200_quota(TENANT_A, 4, false))
        .await
        .unwrap();
    let reply = h.submit(&body(SPEC, &code()), Some("q-1")).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json);
    assert_eq!(reply.json["error"]["code"], "quota_exceeded");
    let message = reply.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "tenant {TENANT_A}'s quota is 4 h200 GPUs; this job needs 8"
        )),
        "{message}"
    );
    assert!(message.contains("tuneplane admin quota set"), "{message}");
    assert_eq!(h.job_count(TENANT_A).await, 0);
    assert_eq!(h.object_count("capsules/").await, 0, "no capsule is stored");

    // Tenant B has no quota: exactly as before.
    let bytes = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let key_b = h.key_b.clone();
    let b = h
        .call(
            Method::POST,
            "/v1/jobs",
            Some(&key_b),
            &[("content-type", "application/json")],
            bytes,
        )
        .await;
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.json);

    // A borrowing limit may be exceeded (on idle capacity), so the job is queued; so is a job
    // within a raised limit. The refused idempotency key was never recorded.
    h.jobs()
        .put_quota(&h200_quota(TENANT_A, 4, true))
        .await
        .unwrap();
    let borrowing = h.submit(&body(SPEC, &code()), Some("q-1")).await;
    assert_eq!(borrowing.status, StatusCode::CREATED, "{}", borrowing.json);
    h.jobs()
        .put_quota(&h200_quota(TENANT_A, 8, false))
        .await
        .unwrap();
    let within = h.submit(&body(SPEC, &code()), None).await;
    assert_eq!(within.status, StatusCode::CREATED, "{}", within.json);
    assert_eq!(h.job_count(TENANT_A).await, 2);
}

pub async fn quota_shows_the_callers_limits_and_usage_and_never_another_tenants(h: &Harness) {
    // Before any snapshot: the limits, zero usage, and a note saying why.
    let before = h.get("/v1/quota").await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.json);
    assert_eq!(before.json["tenant"], TENANT_A);
    assert_eq!(before.json["series"], json!([]));
    assert!(
        before.json["note"]
            .as_str()
            .unwrap_or_default()
            .contains("no capacity snapshot"),
        "{}",
        before.json
    );

    let mut quota = h200_quota(TENANT_A, 16, false);
    quota.weight = 2.0;
    h.jobs().put_quota(&quota).await.unwrap();
    let node = |name: &str, gpus_used: u32| {
        NodeCapacity::ready(name, Some("h200"), 8, 96.0, 1024.0).with_gpus_used(gpus_used)
    };
    let mut snapshot = CapacitySnapshot::from_nodes(5, vec![node("n1", 8), node("n2", 4)]);
    let usage = |series: &str, admitted: u32, queued: u32| TenantUsage {
        admitted: Demand {
            gpus: [(series.to_owned(), admitted)].into(),
            ..Demand::default()
        },
        admitted_jobs: 2,
        queued: Demand {
            gpus: [(series.to_owned(), queued)].into(),
            ..Demand::default()
        },
        queued_jobs: 1,
    };
    snapshot
        .tenants
        .insert(TENANT_A.into(), usage("h200", 12, 8));
    // Tenant B runs on a series tenant A never uses: it must never show up in A's answers.
    snapshot
        .tenants
        .insert(TENANT_B.into(), usage("a100", 40, 24));
    let value = serde_json::to_value(&snapshot).unwrap_or_default();
    h.jobs().put_capacity(&value).await.unwrap();

    let mine = h.get("/v1/quota").await;
    assert_eq!(mine.status, StatusCode::OK, "{}", mine.json);
    assert_eq!(
        mine.json["series"],
        json!([{"series": "h200", "gpus_limit": 16, "borrow": false, "admitted_gpus": 12,
            "queued_gpus": 8, "fleet_total_gpus": 16, "fleet_free_gpus": 4}]),
        "{}",
        mine.json
    );
    assert_eq!(mine.json["weight"], 2.0);
    assert_eq!(mine.json["admitted_jobs"], 2);
    assert_eq!(mine.json["queued_jobs"], 1);
    assert_eq!(mine.json["taken_at_ms"], 5);
    assert!(mine.json["note"].is_null());
    assert!(mine.json["cpu"]["cpus_limit"].is_null());
    let text = mine.json.to_string();
    assert!(!text.contains("a100") && !text.contains(TENANT_B), "{text}");

    // /v1/capacity keeps only the caller's own entry of `tenants`.
    let capacity = h.get("/v1/capacity").await;
    let tenants = &capacity.json["snapshot"]["tenants"];
    assert_eq!(
        tenants
            .as_object()
            .map(|t| t.keys().cloned().collect::<Vec<_>>()),
        Some(vec![TENANT_A.to_owned()]),
        "{}",
        capacity.json
    );
    assert_eq!(tenants[TENANT_A]["admitted"]["gpus"]["h200"], 12);
    let text = capacity.json.to_string();
    assert!(!text.contains("a100") && !text.contains(TENANT_B), "{text}");

    // And the other way round: B sees its own usage, B's (absent) quota, nothing of A's.
    let key_b = h.key_b.clone();
    let theirs = h
        .call(Method::GET, "/v1/quota", Some(&key_b), &[], Vec::new())
        .await;
    assert_eq!(theirs.json["tenant"], TENANT_B);
    let a100 = theirs.json["series"]
        .as_array()
        .and_then(|s| s.iter().find(|e| e["series"] == "a100"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(a100["admitted_gpus"], 40, "{}", theirs.json);
    assert!(a100["gpus_limit"].is_null());
    let h200 = theirs.json["series"]
        .as_array()
        .and_then(|s| s.iter().find(|e| e["series"] == "h200"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (h200["admitted_gpus"].as_u64(), h200["gpus_limit"].is_null()),
        (Some(0), true)
    );
    let b_capacity = h
        .call(Method::GET, "/v1/capacity", Some(&key_b), &[], Vec::new())
        .await
        .json
        .to_string();
    assert!(!b_capacity.contains(TENANT_A), "{b_capacity}");
}

pub async fn healthz_needs_no_key_and_unknown_routes_are_json_404(h: &Harness) {
    let health = h
        .call(Method::GET, "/v1/healthz", None, &[], Vec::new())
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json["status"], "ok");
    assert!(health.headers.contains_key("x-request-id"));
    let missing = h.call(Method::GET, "/v2/jobs", None, &[], Vec::new()).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json["error"]["code"], "not_found");
}

pub async fn read_only_key_cannot_submit_or_stop(h: &Harness) {
    use tuneplane_core::submit::{SCOPE_JOBS_READ, new_api_key};
    let id = job_id(&h.submit(&body(SPEC, &code()), None).await);
    let (secret, record) = new_api_key(
        tuneplane_functions::runtime::random_bytes(),
        &TENANT_A.parse().unwrap(),
        vec![SCOPE_JOBS_READ.to_owned()],
        "reader",
        0,
    );
    assert!(h.jobs().put_api_key(&record).await.is_ok());
    let bytes = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let submit = h
        .call(Method::POST, "/v1/jobs", Some(&secret), &[], bytes)
        .await;
    assert_eq!(submit.status, StatusCode::FORBIDDEN);
    assert_eq!(submit.json["error"]["details"]["scope"], "jobs:write");
    let stop_path = format!("/v1/jobs/{id}/stop");
    let stop = h
        .call(Method::POST, &stop_path, Some(&secret), &[], Vec::new())
        .await;
    assert_eq!(stop.status, StatusCode::FORBIDDEN);
    let read_path = format!("/v1/jobs/{id}");
    let read = h
        .call(Method::GET, &read_path, Some(&secret), &[], Vec::new())
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(h.job_count(TENANT_A).await, 1);
}

pub async fn playgrounds_are_created_listed_and_expired_per_tenant(h: &Harness) {
    let (a, b) = (h.key_a.clone(), h.key_b.clone());
    let create = |v: Value| serde_json::to_vec(&v).unwrap_or_default();
    let made = h
        .call(
            Method::POST,
            "/v1/playgrounds",
            Some(&a),
            &[],
            create(json!({"model": "qwen2.5-7b", "series": "l40s", "gpus": 1, "ttl_seconds": 600})),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
    let id = made.json["id"].as_str().unwrap_or_default().to_owned();
    let bad = h
        .call(
            Method::POST,
            "/v1/playgrounds",
            Some(&a),
            &[],
            create(json!({"model": "", "series": "L40S", "gpus": 99})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json["error"]["code"], "invalid_request");
    let message = bad.json["error"]["message"].as_str().unwrap_or_default();
    for field in ["model", "series", "gpus"] {
        assert!(message.contains(field), "{field} missing from {message}");
    }
    let paths: Vec<&str> = bad.json["error"]["details"]["fields"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(paths, ["model", "series", "gpus"], "{}", bad.json);
    // Without a capacity snapshot the fleet is not checked, and the answer says so.
    assert!(
        made.json["notes"]
            .to_string()
            .contains("no capacity snapshot"),
        "{}",
        made.json
    );
    // Accepted, waiting for admission; the server's key is never shown.
    assert_eq!(made.json["state"], "Queued");
    assert!(made.json.get("server_key").is_none(), "{}", made.json);
    let list = h.get("/v1/playgrounds").await;
    assert_eq!(list.json["playgrounds"].as_array().map(Vec::len), Some(1));
    assert_eq!(list.json["playgrounds"][0]["state"], "Queued");
    assert!(list.json["playgrounds"][0].get("server_key").is_none());
    assert!(list.json["playgrounds"][0]["proxy_path"].is_null());
    let path = format!("/v1/playgrounds/{id}");
    let theirs = h.call(Method::GET, &path, Some(&b), &[], Vec::new()).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    let b_list = h
        .call(Method::GET, "/v1/playgrounds", Some(&b), &[], Vec::new())
        .await;
    assert_eq!(b_list.json["playgrounds"], json!([]));
    let gone = h
        .call(Method::DELETE, &path, Some(&a), &[], Vec::new())
        .await;
    assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.json);
    let expires = gone.json["expires_at_ms"].as_i64().unwrap_or(i64::MAX);
    assert!(expires <= tuneplane_functions::runtime::now_ms());
    assert_eq!(gone.json["state"], "Deleting");
    // A deleted playground leaves the listing at once; reading it says it is being removed.
    let after = h.get("/v1/playgrounds").await;
    assert_eq!(after.json["playgrounds"], json!([]), "{}", after.json);
    let one = h.get(&path).await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json["state"], "Deleting");
}

/// Publishes a snapshot of two 8-GPU h200 nodes and one 4-GPU l40s node.
async fn publish_fleet(h: &Harness) {
    let node = |name: &str, series: &str, gpus: u32| {
        NodeCapacity::ready(name, Some(series), gpus, 96.0, 1024.0)
    };
    let snapshot = CapacitySnapshot::from_nodes(
        1,
        vec![
            node("h200-0", "h200", 8),
            node("h200-1", "h200", 8),
            node("l40s-0", "l40s", 4),
        ],
    );
    let value = serde_json::to_value(&snapshot).unwrap_or_default();
    h.jobs().put_capacity(&value).await.unwrap();
}

pub async fn playground_that_cannot_fit_the_published_capacity_is_refused_naming_the_field(
    h: &Harness,
) {
    publish_fleet(h).await;
    let create = |v: Value| serde_json::to_vec(&v).unwrap_or_default();
    let key = h.key_a.clone();
    let post = |v: Value| {
        let body = create(v);
        let key = key.clone();
        async move {
            h.call(Method::POST, "/v1/playgrounds", Some(&key), &[], body)
                .await
        }
    };
    let fields = |r: &super::Reply| -> Vec<(String, String)> {
        r.json["error"]["details"]["fields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| {
                        (
                            f["path"].as_str().unwrap_or_default().to_owned(),
                            f["message"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let unknown = post(json!({"model": "m", "series": "h100", "gpus": 1})).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.json);
    assert_eq!(unknown.json["error"]["code"], "invalid_request");
    assert_eq!(
        fields(&unknown),
        [(
            "series".to_owned(),
            "unknown series \"h100\"; known: h200, l40s".to_owned()
        )]
    );
    let too_many = post(json!({"model": "m", "series": "h200", "gpus": 9})).await;
    assert_eq!(
        too_many.status,
        StatusCode::BAD_REQUEST,
        "{}",
        too_many.json
    );
    let f = fields(&too_many);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "gpus");
    assert!(f[0].1.contains("the largest h200 node has 8"), "{f:?}");
    let message = too_many.json["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("the playground request has 1 problem:\n  gpus: 9 GPUs"),
        "{message}"
    );
    let l40s = post(json!({"model": "m", "series": "l40s", "gpus": 5})).await;
    assert!(
        fields(&l40s)[0].1.contains("the largest l40s node has 4"),
        "{}",
        l40s.json
    );
    let zero = post(json!({"model": "m", "series": "h200", "gpus": 0, "ttl_seconds": 59})).await;
    let paths: Vec<String> = fields(&zero).into_iter().map(|f| f.0).collect();
    assert_eq!(paths, ["gpus", "ttl_seconds"], "{}", zero.json);
    let flag = post(json!({"model": "--trust-remote-code", "series": "h200", "gpus": 1})).await;
    assert_eq!(fields(&flag)[0].0, "model", "{}", flag.json);
    // Nothing was stored for a refused request; a fitting one is accepted without a note.
    assert_eq!(
        h.get("/v1/playgrounds").await.json["playgrounds"],
        json!([])
    );
    let fits = post(json!({"model": "m", "series": "h200", "gpus": 8})).await;
    assert_eq!(fits.status, StatusCode::CREATED, "{}", fits.json);
    assert_eq!(fits.json["notes"], json!([]));
}

/// `reply` is an error of `status` whose message contains `says`.
fn assert_error(reply: &super::Reply, status: StatusCode, says: &str) {
    assert_eq!(reply.status, status, "{}", reply.json);
    assert!(
        reply.json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(says)),
        "{}",
        reply.json
    );
}

/// Creates a playground of tenant A from `body`; its id.
async fn create_playground(h: &Harness, body: Value) -> String {
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let made = h
        .call(
            Method::POST,
            "/v1/playgrounds",
            Some(&h.key_a.clone()),
            &[],
            body,
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
    made.json["id"].as_str().unwrap_or_default().to_owned()
}

pub async fn playground_list_shows_state_reason_and_the_proxy_url(h: &Harness) {
    use tuneplane_core::store::{PlaygroundState, PlaygroundStatus};
    let id = create_playground(h, json!({"model": "m", "series": "l40s", "gpus": 1})).await;
    assert!(id.starts_with("pg-"), "{id}");
    // What the reconciler records once the pod exists and cannot be scheduled.
    let mut pg = h
        .jobs()
        .get_playground(&id)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("playground {id} missing"));
    pg.pod_name = Some(id.clone());
    pg.pod_namespace = Some("play".into());
    pg.status = Some(PlaygroundStatus {
        state: PlaygroundState::Pending,
        reason: Some("InsufficientGpu".into()),
        message: "0/3 nodes are available: 1 Insufficient nvidia.com/gpu".into(),
        since_ms: 1,
        updated_ms: 1,
    });
    h.jobs().put_playground(&pg).await.unwrap();
    let list = h.get("/v1/playgrounds").await;
    let row = &list.json["playgrounds"][0];
    assert_eq!(row["id"], id.as_str());
    assert_eq!(row["state"], "Pending");
    assert_eq!(row["reason"], "InsufficientGpu");
    assert_eq!(
        row["message"],
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu"
    );
    // Once the pod exists the playground is reached through TunePlane's own proxy.
    assert_eq!(
        row["proxy_path"],
        format!("/v1/playgrounds/{id}/proxy/").as_str()
    );
    let one = h.get(&format!("/v1/playgrounds/{id}")).await;
    assert_eq!(one.json["reason"], "InsufficientGpu");
}

/// A tenant may keep two live playgrounds (the default limit): the third is a 409 naming the
/// limit and the way out, stores nothing, and another tenant is not affected; deleting one frees
/// a place.
pub async fn a_tenant_over_its_playground_limit_gets_a_clear_409(h: &Harness) {
    let body = serde_json::to_vec(
        &json!({"model": "qwen2.5-7b", "series": "l40s", "gpus": 1, "ttl_seconds": 600}),
    )
    .unwrap_or_default();
    let create = |key: String| {
        let body = body.clone();
        async move {
            h.call(Method::POST, "/v1/playgrounds", Some(&key), &[], body)
                .await
        }
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let made = create(h.key_a.clone()).await;
        assert_eq!(made.status, StatusCode::CREATED, "{}", made.json);
        ids.push(made.json["id"].as_str().unwrap_or_default().to_owned());
    }
    let third = create(h.key_a.clone()).await;
    assert_eq!(third.status, StatusCode::CONFLICT, "{}", third.json);
    assert_eq!(third.json["error"]["code"], "playground_limit");
    let message = third.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("2 live playgrounds") && message.contains("delete one"),
        "{message}"
    );
    let listed = h.get("/v1/playgrounds").await;
    assert_eq!(listed.json["playgrounds"].as_array().map(Vec::len), Some(2));
    let other = create(h.key_b.clone()).await;
    assert_eq!(other.status, StatusCode::CREATED, "{}", other.json);
    let deleted = h
        .call(
            Method::DELETE,
            &format!("/v1/playgrounds/{}", ids[0]),
            Some(&h.key_a.clone()),
            &[],
            Vec::new(),
        )
        .await;
    assert!(deleted.status.is_success(), "{}", deleted.json);
    let again = create(h.key_a.clone()).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.json);
}

/// A stand-in for a playground's vLLM server on a loopback address of its own, port 8000: it
/// answers `GET /v1/models` and echoes `POST /v1/chat/completions` only with `Bearer <key>`
/// (as vLLM with `--api-key` does), and records every `Authorization` it was sent.
async fn fake_vllm(key: String) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::routing::get;
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let check = {
        let seen = seen.clone();
        move |headers: axum::http::HeaderMap| {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(auth.clone());
            auth == format!("Bearer {key}")
        }
    };
    let (models, chat) = (check.clone(), check);
    let app = axum::Router::new()
        .route(
            "/v1/models",
            get(move |headers: axum::http::HeaderMap| async move {
                if models(headers) {
                    (
                        StatusCode::OK,
                        axum::Json(json!({"data": [{"id": "tiny-model"}]})),
                    )
                } else {
                    (
                        StatusCode::UNAUTHORIZED,
                        axum::Json(json!({"error": "Unauthorized"})),
                    )
                }
            }),
        )
        .route(
            "/v1/chat/completions",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: String| async move {
                    if chat(headers) {
                        (StatusCode::OK, axum::Json(json!({"echo": body})))
                    } else {
                        (
                            StatusCode::UNAUTHORIZED,
                            axum::Json(json!({"error": "Unauthorized"})),
                        )
                    }
                },
            ),
        );
    // A loopback address of this test's own (any 127/8 address is local on Linux).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    for attempt in 0..20u32 {
        let n = nanos.wrapping_add(attempt.wrapping_mul(7919)) ^ std::process::id();
        let ip = format!(
            "127.{}.{}.{}",
            1 + n % 250,
            (n >> 8) % 250,
            1 + (n >> 16) % 250
        );
        if let Ok(listener) = tokio::net::TcpListener::bind((ip.as_str(), 8000)).await {
            tokio::spawn(async move { axum::serve(listener, app).await });
            return (ip, seen);
        }
    }
    panic!("no free loopback address for the fake vLLM server");
}

/// A tenant reaches its running playground through `/v1/playgrounds/{id}/proxy/...` with its own
/// key: the API forwards to the pod's IP with the server's key (never the tenant's), both GET and
/// POST; another tenant gets 404, a playground not running yet a 409 naming its state, and a
/// pod address outside the configured pod networks is never dialled (502).
pub async fn a_playground_is_reached_through_the_api_which_adds_the_servers_key(h: &Harness) {
    use tuneplane_core::store::{PlaygroundState, PlaygroundStatus};
    let id = create_playground(
        h,
        json!({"model": "tiny-model", "series": "l40s", "gpus": 1, "ttl_seconds": 600}),
    )
    .await;
    let proxy = format!("/v1/playgrounds/{id}/proxy/v1/models");
    // Queued: nothing to reach yet, and the answer says why.
    let early = h.get(&proxy).await;
    assert_error(&early, StatusCode::CONFLICT, "is Queued");
    assert_eq!(early.json["error"]["code"], "playground_not_running");
    // What the reconciler records once the pod runs.
    let mut pg = h
        .jobs()
        .get_playground(&id)
        .await
        .ok()
        .flatten()
        .expect("record");
    let key = pg.server_key.clone().expect("a server key was made");
    assert_eq!(key.len(), 64, "32 random bytes as hex");
    let (ip, seen) = fake_vllm(key.clone()).await;
    pg.pod_name = Some(id.clone());
    pg.node = Some("l40s-0".into());
    pg.pod_ip = Some(ip);
    pg.status = Some(PlaygroundStatus {
        state: PlaygroundState::Running,
        reason: None,
        message: "runs".into(),
        since_ms: 1,
        updated_ms: 1,
    });
    let stored = h.jobs().put_playground(&pg).await.unwrap();
    let models = h.get(&proxy).await;
    assert_eq!(models.status, StatusCode::OK, "{}", models.json);
    assert_eq!(models.json["data"][0]["id"], "tiny-model");
    let chat = h
        .call(
            Method::POST,
            &format!("/v1/playgrounds/{id}/proxy/v1/chat/completions"),
            Some(&h.key_a.clone()),
            &[("content-type", "application/json")],
            br#"{"messages":[{"role":"user","content":"hi"}]}"#.to_vec(),
        )
        .await;
    assert_eq!(chat.status, StatusCode::OK, "{}", chat.json);
    assert!(
        chat.json["echo"]
            .as_str()
            .is_some_and(|b| b.contains("\"hi\""))
    );
    // The server saw its own key only, never tenant A's.
    let auths = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(auths, vec![format!("Bearer {key}"); 2]);
    assert!(!auths.iter().any(|a| a.contains(&h.key_a)));
    // Another tenant: as if it did not exist.
    let theirs = h
        .call(Method::GET, &proxy, Some(&h.key_b.clone()), &[], Vec::new())
        .await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.json);
    // A pod address outside the pod networks (127.0.0.0/8 here) is refused before any dial.
    let mut outside = stored.clone();
    outside.pod_ip = Some("192.0.2.10".into());
    h.jobs().put_playground(&outside).await.unwrap();
    let refused = h.get(&proxy).await;
    assert_error(
        &refused,
        StatusCode::BAD_GATEWAY,
        "outside the pod networks",
    );
    assert_eq!(seen.lock().unwrap_or_else(|p| p.into_inner()).len(), 2);
}
