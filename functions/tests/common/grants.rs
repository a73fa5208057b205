//! Attempts' grants and a job's outputs and checkpoints: a grant opens only its own job's folders,
//! refuses paths that would leave them, dies with its attempt; checkpoints count only once
//! recorded complete, the newest `keep` are kept, the newest is offered for resume; outputs list
//! with download links for the job's tenant only.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tuneplane_core::job::{FailureReason, JobRecord, JobState};

use super::archives::{SPEC, body, code};
use super::{Harness, grant_key};

/// A submitted job of tenant A, made RUNNING in the store (as the reconciler would).
async fn running_job(h: &Harness) -> JobRecord {
    let reply = h.submit(&body(SPEC, &code()), None).await;
    let id = reply.json["job_id"].as_str().unwrap_or_default().to_owned();
    let mut job = h.jobs().get_job(&id).await.expect("get").expect("the job");
    job.state = JobState::Running;
    job.admitted_at_ms = Some(tuneplane_core::clock::now_ms());
    job.running_at_ms = job.admitted_at_ms;
    h.jobs().update_job(&job).await.expect("running")
}

async fn as_grant(
    h: &Harness,
    token: &str,
    method: Method,
    path: &str,
    body: Value,
) -> super::Reply {
    h.call(
        method,
        path,
        Some(token),
        &[("content-type", "application/json")],
        serde_json::to_vec(&body).unwrap_or_default(),
    )
    .await
}

async fn presign(h: &Harness, token: &str, job: &str, method: &str, paths: Value) -> super::Reply {
    as_grant(
        h,
        token,
        Method::POST,
        &format!("/v1/jobs/{job}/grant/presign"),
        json!({"method": method, "paths": paths}),
    )
    .await
}

/// Uploads `bytes` to job path `path` of `job` through the grant, as the runner does.
async fn upload(h: &Harness, token: &str, job: &str, path: &str, bytes: &[u8]) {
    let r = presign(h, token, job, "PUT", json!([path])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let entry = &r.json["urls"][0];
    let url = entry["url"].as_str().expect("url");
    let mut req = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .put(url)
        .body(bytes.to_vec());
    for h in entry["headers"].as_array().into_iter().flatten() {
        req = req.header(h[0].as_str().unwrap_or(""), h[1].as_str().unwrap_or(""));
    }
    // The harness's blob server is not listening: write through the store as the signed URL
    // would, when the URL cannot be reached (the fs store's URLs point at a dead port).
    match req.send().await {
        Ok(resp) if resp.status().is_success() => {}
        _ => {
            let key = tuneplane_core::outputs::JobPath::parse(path)
                .expect("path")
                .key(super::TENANT_A, job);
            h.blobs().put(&key, bytes.to_vec()).await.expect("put");
        }
    }
}

pub async fn a_grant_opens_only_its_own_jobs_folders(h: &Harness) {
    let a = running_job(h).await;
    let b = running_job(h).await;
    let token = grant_key().token(&a.id, 1);
    let ok = presign(
        h,
        &token,
        &a.id,
        "PUT",
        json!(["outputs/model/w.bin", "checkpoints/step-1/opt.pt"]),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.json);
    let urls: Vec<&str> = ok.json["urls"]
        .as_array()
        .expect("urls")
        .iter()
        .filter_map(|u| u["url"].as_str())
        .collect();
    assert!(
        urls[0].contains(&format!("outputs/{}/{}/model/w.bin", super::TENANT_A, a.id)),
        "{urls:?}"
    );
    assert!(
        urls[1].contains(&format!(
            "checkpoints/{}/{}/step-1/opt.pt",
            super::TENANT_A,
            a.id
        )),
        "{urls:?}"
    );
    for bad in [
        "outputs/../../b/x",
        "checkpoints/step-1/.complete",
        "logs/x",
        "capsules/sha256/x/capsule.zip",
    ] {
        let r = presign(h, &token, &a.id, "PUT", json!(["outputs/fine.txt", bad])).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.json);
        assert!(
            r.json["error"]["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("paths[1]:"),
            "{}",
            r.json
        );
    }
    // Outputs are never read back through a grant.
    let r = presign(h, &token, &a.id, "GET", json!(["outputs/model/w.bin"])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // A's token does not open B; a tenant's API key is no grant; a forged token is refused.
    for (job, tok) in [
        (&b.id, token.clone()),
        (&a.id, h.key_a.clone()),
        (&a.id, format!("tpg1.1.{}", "0".repeat(64))),
    ] {
        let r = presign(h, &tok, job, "PUT", json!(["outputs/x"])).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "invalid_grant");
    }
}

pub async fn a_grant_dies_with_its_attempt(h: &Harness) {
    let mut job = running_job(h).await;
    let first = grant_key().token(&job.id, 1);
    let now = tuneplane_core::clock::now_ms();
    // Attempt 1 was lost long ago (past its grace and the upload slack); attempt 2 runs.
    job.requeue(
        tuneplane_core::job::Failure::new(FailureReason::NodeLost, "node gone"),
        None,
        now - 3_600_000,
    )
    .expect("requeue");
    job.state = JobState::Running;
    let job = h.jobs().update_job(&job).await.expect("attempt 2");
    let r = presign(h, &first, &job.id, "PUT", json!(["outputs/x"])).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.json);
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("ended with the attempt"),
        "{}",
        r.json
    );
    let second = grant_key().token(&job.id, 2);
    assert_eq!(
        presign(h, &second, &job.id, "PUT", json!(["outputs/x"]))
            .await
            .status,
        StatusCode::OK
    );
    // An attempt the record does not know.
    let third = grant_key().token(&job.id, 3);
    assert_eq!(
        presign(h, &third, &job.id, "PUT", json!(["outputs/x"]))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // Once the job ended an hour ago, attempt 2's grant is dead too.
    let mut ended = job.clone();
    ended.state = JobState::Succeeded;
    ended.finished_at_ms = Some(now - 3_600_000);
    h.jobs().update_job(&ended).await.expect("ended");
    assert_eq!(
        presign(h, &second, &job.id, "PUT", json!(["outputs/x"]))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

pub async fn checkpoints_count_once_complete_and_only_the_newest_are_kept(h: &Harness) {
    let job = running_job(h).await;
    let token = grant_key().token(&job.id, 1);
    let latest = format!("/v1/jobs/{}/grant/checkpoints/latest", job.id);
    // None yet; a folder with files but no marker is not a checkpoint.
    upload(
        h,
        &token,
        &job.id,
        "checkpoints/step-1/state.json",
        b"{\"step\":1}",
    )
    .await;
    let r = as_grant(h, &token, Method::GET, &latest, Value::Null).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.json);
    // An empty checkpoint cannot be completed.
    let empty = as_grant(
        h,
        &token,
        Method::POST,
        &format!("/v1/jobs/{}/grant/checkpoints/step-0/complete", job.id),
        json!({}),
    )
    .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST, "{}", empty.json);
    // The spec keeps 2 (the default): three complete checkpoints leave the newest two.
    for step in 1..=3 {
        if step > 1 {
            upload(
                h,
                &token,
                &job.id,
                &format!("checkpoints/step-{step}/state.json"),
                format!("{{\"step\":{step}}}").as_bytes(),
            )
            .await;
        }
        let r = as_grant(
            h,
            &token,
            Method::POST,
            &format!("/v1/jobs/{}/grant/checkpoints/step-{step}/complete", job.id),
            json!({}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let r = as_grant(h, &token, Method::GET, &latest, Value::Null).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["name"], "step-3");
    assert_eq!(r.json["files"][0]["path"], "state.json");
    // The owner sees the two kept; step-1 and its files are gone.
    let outputs = h.get(&format!("/v1/jobs/{}/outputs", job.id)).await;
    assert_eq!(outputs.status, StatusCode::OK, "{}", outputs.json);
    let names: Vec<&str> = outputs.json["checkpoints"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["step-2", "step-3"]);
    assert_eq!(
        h.object_count(&format!(
            "checkpoints/{}/{}/step-1/",
            super::TENANT_A,
            job.id
        ))
        .await,
        0
    );
}

pub async fn outputs_are_listed_with_links_for_their_tenant_only(h: &Harness) {
    let job = running_job(h).await;
    let token = grant_key().token(&job.id, 1);
    upload(h, &token, &job.id, "outputs/model/w.bin", b"weights").await;
    upload(h, &token, &job.id, "outputs/metrics.json", b"{}").await;
    let r = h.get(&format!("/v1/jobs/{}/outputs", job.id)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let list = r.json["outputs"].as_array().expect("outputs");
    let paths: Vec<(&str, u64)> = list
        .iter()
        .map(|o| {
            (
                o["path"].as_str().unwrap_or(""),
                o["size"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(paths, vec![("metrics.json", 2), ("model/w.bin", 7)]);
    assert!(
        list.iter()
            .all(|o| o["url"].as_str().is_some_and(|u| u.starts_with("http")))
    );
    let other = h
        .call(
            Method::GET,
            &format!("/v1/jobs/{}/outputs", job.id),
            Some(&h.key_b.clone()),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}
