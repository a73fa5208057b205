//! Attempts' grants and a job's outputs and checkpoints: a grant opens only its own job's folders,
//! refuses paths that would leave them, dies with its attempt; every upload names its size, its
//! URL is signed for that size, and sizes above the object limit or past the tenant's storage
//! quota are refused; checkpoints count only once recorded complete, the newest `keep` are kept,
//! the newest is offered for resume; outputs list with download links for the job's tenant only.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tuneplane_core::job::{FailureReason, JobState};

use super::{Harness, grant_key};

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

/// Uploads named by path alone, each `size` bytes (what a PUT presign request carries).
fn sized(paths: &[&str], size: u64) -> Value {
    paths
        .iter()
        .map(|p| json!({"path": p, "size": size}))
        .collect()
}

/// Uploads `bytes` to job path `path` of `job` through the grant, as the runner does.
async fn upload(h: &Harness, token: &str, job: &str, path: &str, bytes: &[u8]) {
    let r = presign(h, token, job, "PUT", sized(&[path], bytes.len() as u64)).await;
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
    let a = h.running_job().await;
    let b = h.running_job().await;
    let token = grant_key().token(&a.id, 1);
    let ok = presign(
        h,
        &token,
        &a.id,
        "PUT",
        sized(&["outputs/model/w.bin", "checkpoints/step-1/opt.pt"], 10),
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
        let r = presign(
            h,
            &token,
            &a.id,
            "PUT",
            sized(&["outputs/fine.txt", bad], 1),
        )
        .await;
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
        let r = presign(h, &tok, job, "PUT", sized(&["outputs/x"], 1)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "invalid_grant");
    }
}

pub async fn a_grant_dies_with_its_attempt(h: &Harness) {
    let mut job = h.running_job().await;
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
    let r = presign(h, &first, &job.id, "PUT", sized(&["outputs/x"], 1)).await;
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
        presign(h, &second, &job.id, "PUT", sized(&["outputs/x"], 1))
            .await
            .status,
        StatusCode::OK
    );
    // An attempt the record does not know.
    let third = grant_key().token(&job.id, 3);
    assert_eq!(
        presign(h, &third, &job.id, "PUT", sized(&["outputs/x"], 1))
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
        presign(h, &second, &job.id, "PUT", sized(&["outputs/x"], 1))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

pub async fn checkpoints_count_once_complete_and_only_the_newest_are_kept(h: &Harness) {
    let job = h.running_job().await;
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
    let job = h.running_job().await;
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

/// Every upload names its size and its URL is signed for exactly that size; a size above the
/// object limit is 400 naming the field, an upload without a size is 400 naming the field.
pub async fn every_upload_names_its_size_and_its_url_is_signed_for_that_size(h: &Harness) {
    let job = h.running_job().await;
    let token = grant_key().token(&job.id, 1);
    let r = presign(h, &token, &job.id, "PUT", sized(&["outputs/w.bin"], 1234)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let headers: Vec<(String, String)> =
        serde_json::from_value(r.json["urls"][0]["headers"].clone()).expect("headers");
    assert!(
        headers.contains(&("content-length".to_owned(), "1234".to_owned())),
        "the URL binds the size (S3 signs Content-Length, the filesystem store tp-length): {headers:?}"
    );
    let url = r.json["urls"][0]["url"].as_str().unwrap_or_default();
    assert!(
        url.contains("tp-length=1234") || url.to_ascii_lowercase().contains("content-length"),
        "{url}"
    );
    // Without a size, with a size that is no byte count, above the per-object limit.
    let limit = h.state.submit.config().storage.object_max_bytes;
    for (paths, field, code) in [
        (json!(["outputs/w.bin"]), "paths[0].size", "invalid_request"),
        (
            json!([{"path": "outputs/a", "size": 1}, {"path": "outputs/w.bin", "size": -4}]),
            "paths[1].size",
            "invalid_request",
        ),
        (
            json!([{"path": "outputs/w.bin", "size": limit + 1}]),
            "paths[0].size",
            "object_too_large",
        ),
    ] {
        let r = presign(h, &token, &job.id, "PUT", paths.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{paths}: {}", r.json);
        assert_eq!(r.json["error"]["code"], code, "{}", r.json);
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(field), "{message}");
    }
    let r = presign(
        h,
        &token,
        &job.id,
        "PUT",
        sized(&["outputs/w.bin"], limit + 1),
    )
    .await;
    let message = r.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("100 GiB (107374182400 bytes)"),
        "names the limit: {message}"
    );
    // Downloads of checkpoint files still name the path alone.
    let r = presign(h, &token, &job.id, "GET", json!(["checkpoints/step-1/a"])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
}

/// A tenant's stored outputs and checkpoints plus a request may not pass its storage quota
/// (10 TiB by default): the refusal is a 409 naming its use and quota, and what is stored counts.
pub async fn uploads_past_the_tenants_storage_quota_are_refused_with_its_use_and_quota(
    h: &Harness,
) {
    let limits = h.state.submit.config().storage;
    let quota = limits.tenant_bytes.expect("a quota by default");
    let job = h.running_job().await;
    let token = grant_key().token(&job.id, 1);
    // What the tenant stores counts: 5 bytes of an earlier job's outputs.
    let earlier = h.running_job().await;
    let earlier_token = grant_key().token(&earlier.id, 1);
    upload(h, &earlier_token, &earlier.id, "outputs/w.bin", b"12345").await;
    // Sizes (each within the object limit) adding up to `total`.
    let request = |total: u64| {
        let mut sizes = Vec::new();
        let mut left = total;
        while left > 0 {
            let size = left.min(limits.object_max_bytes);
            sizes.push(
                json!({"path": format!("checkpoints/big/part-{}", sizes.len()), "size": size}),
            );
            left -= size;
        }
        Value::Array(sizes)
    };
    let fits = presign(h, &token, &job.id, "PUT", request(quota - 5)).await;
    assert_eq!(fits.status, StatusCode::OK, "{}", fits.json);
    let over = presign(h, &token, &job.id, "PUT", request(quota - 4)).await;
    assert_eq!(over.status, StatusCode::CONFLICT, "{}", over.json);
    assert_eq!(over.json["error"]["code"], "storage_quota_exceeded");
    let message = over.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("tenant {} stores 5 bytes", super::TENANT_A))
            && message.contains("storage quota of 10 TiB (10995116277760 bytes)"),
        "{message}"
    );
    // Signing URLs stores nothing: the quota counts what arrived, not what was signed.
    assert_eq!(
        h.object_count(&format!("checkpoints/{}/{}/", super::TENANT_A, job.id))
            .await,
        0
    );
}
