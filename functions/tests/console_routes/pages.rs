//! The console's pages besides sign-in and submit: capacity (with usage against the quota), a
//! pending job's detail, playgrounds, the jobs list's paging, archived logs, the quota refusal,
//! and the headers every page carries.

use axum::http::{StatusCode, header};
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::job::{EventSource, JobEvent, JobState, Pending, PendingReason};

use super::harness::*;

#[tokio::test]
async fn capacity_page_shows_the_published_snapshot() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let empty = s.get("/console/capacity", Some(&session)).await;
    assert!(empty.body.contains("No capacity snapshot yet"));
    let cordoned = NodeCapacity {
        cordoned: true,
        ..h200_node("h-2", 0)
    };
    let snap = CapacitySnapshot::from_nodes(
        1_000,
        vec![h200_node("h-0", 3), h200_node("h-1", 6), cordoned],
    );
    s.publish_capacity(&snap).await;
    let page = s.get("/console/capacity", Some(&session)).await;
    let c = &snap.series["h200"];
    let attrs = format!(
        "data-series=\"h200\" data-total=\"{}\" data-used=\"{}\" data-free=\"{}\" data-blocked=\"{}\" data-largest=\"{}\" data-nodes=\"3\"",
        c.total_gpus, c.used_gpus, c.free_gpus, c.blocked_gpus, c.largest_free_block
    );
    assert!(page.body.contains(&attrs), "{attrs} not in page");
    assert!(page.body.contains("Cordoned"));
}

#[tokio::test]
async fn pending_job_detail_explains_the_reason_next_to_the_kubernetes_warning() {
    let s = stack().await;
    let id = s.submit_api(&s.key_a, "waiting").await;
    let jobs = s.state.submit.jobs();
    let mut job = s.job(&id).await;
    job.pending = Some(Pending {
        reason: PendingReason::InsufficientGpu,
        message: "pool main: needs 2 nodes with 8 free h200 GPUs, 1 available".into(),
        since_ms: 5,
    });
    jobs.update_job(&job).await.unwrap();
    let warn = |at: i64, key: &str| JobEvent {
        at_ms: at,
        key: key.into(),
        source: EventSource::Kubernetes,
        kind: "Warning".into(),
        reason: "FailedScheduling".into(),
        message: "0/3 nodes are available".into(),
        object: Some("pod/p".into()),
    };
    jobs.append_events(&id, &[warn(10, "e1"), warn(20, "e2")])
        .await
        .unwrap();
    let session = s.sign_in(&s.key_a).await;
    let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
    assert!(page.body.contains("Why is it pending?"));
    assert!(page.body.contains("Waiting for GPUs"));
    assert!(page.body.contains("needs 2 nodes with 8 free h200 GPUs"));
    assert!(
        page.body
            .contains("<strong>FailedScheduling</strong>: 0/3 nodes are available")
    );
    assert!(
        page.body
            .contains("<td class=\"count\" data-label=\"Count\">2</td>"),
        "repeats counted"
    );
    assert_eq!(job.state, JobState::Queued);
}

/// The text of the `error` query of a redirect, percent-decoded.
fn error_of(location: &str) -> String {
    let raw = location.split_once("error=").map_or("", |(_, r)| r);
    let mut out = Vec::new();
    let mut rest = raw.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        let hex = tail
            .get(..2)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                rest = &tail[2..];
            }
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn playgrounds_are_created_and_deleted_through_the_console() {
    use tuneplane_core::store::{PlaygroundState, PlaygroundStatus};
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/playgrounds", Some(&session)).await;
    let csrf = csrf_of(&page.body);
    let create = |series: &'static str, gpus: &'static str, ttl: &'static str| {
        s.request_playground(&session, &csrf, ["tiny-model", series, gpus, ttl])
    };
    let bad = create("h200", "99", "10").await;
    assert!(
        error_of(bad.location()).contains("gpus: 99 GPUs: at most 16"),
        "{}",
        bad.location()
    );
    // The lifetime is asked in minutes, and the error says minutes.
    let bad = create("h200", "1", "2000").await;
    assert_eq!(
        error_of(bad.location()),
        "lifetime: give between 1 and 1440 minutes"
    );
    let res = create("h200", "1", "10").await;
    assert_eq!(res.location(), "/console/playgrounds");
    let all = s.state.submit.jobs().list_playgrounds().await.unwrap();
    assert_eq!(all.len(), 1);
    let listed = s.get("/console/playgrounds", Some(&session)).await;
    assert!(listed.body.contains("tiny-model") && listed.body.contains("data-countdown-to"));
    assert!(listed.body.contains("data-state=\"Queued\""), "state shown");
    // The reconciler's reason is shown with the scheduler's message and plain words.
    let mut pg = all[0].clone();
    pg.pod_name = Some(pg.id.clone());
    pg.status = Some(PlaygroundStatus {
        state: PlaygroundState::Pending,
        reason: Some("InsufficientGpu".into()),
        message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu".into(),
        since_ms: 1,
        updated_ms: 1,
    });
    s.state.submit.jobs().put_playground(&pg).await.unwrap();
    let listed = s.get("/console/playgrounds", Some(&session)).await;
    assert!(listed.body.contains("data-state=\"Pending\""));
    assert!(
        listed
            .body
            .contains("<span class=\"reason\">InsufficientGpu</span>")
    );
    assert!(
        listed
            .body
            .contains("0/3 nodes are available: 3 Insufficient nvidia.com/gpu")
    );
    assert!(listed.body.contains("Waiting for GPUs"));
    let url = format!("/v1/playgrounds/{}/proxy/", pg.id);
    assert!(listed.body.contains(&url), "{url} not shown");
    let del = s
        .post_form(
            &format!("/console/playgrounds/{}/delete", all[0].id),
            Some(&session),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(del.status, StatusCode::SEE_OTHER);
    let after = s.state.submit.jobs().get_playground(&all[0].id).await;
    let after = after.ok().flatten().expect("pg");
    assert!(after.expires_at_ms <= (s.state.clock)());
    // Deleted: gone from the page at once (the reconciler removes the pod in the background).
    let gone = s.get("/console/playgrounds", Some(&session)).await;
    assert!(
        !gone.body.contains("tiny-model"),
        "deleted playground still listed"
    );
    assert!(gone.body.contains("No playgrounds."));
}

#[tokio::test]
async fn a_playground_the_fleet_cannot_host_is_refused_in_the_console_with_the_known_series() {
    let s = stack().await;
    let node = |name: &str| NodeCapacity::ready(name, Some("l40s"), 4, 48.0, 256.0);
    let snap = CapacitySnapshot::from_nodes(1_000, vec![node("l-0")]);
    s.publish_capacity(&snap).await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/playgrounds", Some(&session)).await;
    assert!(
        page.body.contains("<option value=\"l40s\">"),
        "series offered"
    );
    let csrf = csrf_of(&page.body);
    for (series, gpus, expected) in [
        ("h100", "1", "series: unknown series \"h100\"; known: l40s"),
        (
            "l40s",
            "8",
            "gpus: 8 GPUs, but the largest l40s node has 4; ask for at most 4",
        ),
    ] {
        let res = s
            .request_playground(&session, &csrf, ["m", series, gpus, "10"])
            .await;
        assert_eq!(error_of(res.location()), expected);
        let shown = s.get(res.location(), Some(&session)).await;
        assert!(shown.body.contains("role=\"alert\""), "error shown");
    }
    let none = s.state.submit.jobs().list_playgrounds().await.unwrap();
    assert!(none.is_empty(), "nothing stored for refused requests");
}

#[tokio::test]
async fn pages_forbid_framing_and_caching_and_assets_are_served() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/jobs", Some(&session)).await;
    let csp = page
        .headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(
        page.headers
            .get(header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    for asset in ["console.css", "console.js"] {
        assert_eq!(
            s.get(&format!("/console/assets/{asset}"), None)
                .await
                .status,
            StatusCode::OK
        );
    }
    let out = s.sign_out(&session, &csrf_of(&page.body)).await;
    assert!(
        out.cookies()
            .iter()
            .any(|c| c.starts_with("tp_session=;") && c.contains("Max-Age=0"))
    );
    assert_eq!(s.get("/", None).await.location(), "/console/jobs");
}

#[tokio::test]
async fn the_jobs_list_pages_newest_first() {
    let s = stack().await;
    let first = s.submit_api(&s.key_a, "first").await;
    let jobs = s.state.submit.jobs();
    let template = s.job(&first).await;
    for i in 0..30 {
        let mut job = template.clone();
        job.id = format!("j-page{i:02}").parse().unwrap();
        job.version = 0;
        job.submitted_at_ms = template.submitted_at_ms + 1 + i;
        jobs.create_job(&job, None).await.unwrap();
    }
    let session = s.sign_in(&s.key_a).await;
    let page1 = s.get("/console/jobs", Some(&session)).await;
    assert!(page1.body.contains("j-page29"), "newest first");
    assert!(!page1.body.contains(&first));
    let marker = "rel=\"next\" href=\"";
    let next = page1
        .body
        .split(marker)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("no next page link")
        .replace("&amp;", "&");
    let page2 = s.get(&next, Some(&session)).await;
    assert!(page2.body.contains(&first) && page2.body.contains("j-page00"));
    assert!(!page2.body.contains("j-page29"));
    assert!(page2.body.contains("First page"));
}

#[tokio::test]
async fn archived_logs_are_previewed_and_downloadable_through_a_short_lived_link() {
    let s = stack().await;
    let id = s.submit_api(&s.key_a, "logged").await;
    let lines: String = (0..60).map(|i| format!("step {i}\n")).collect();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut h = tar::Header::new_gnu();
    h.set_size(lines.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "tp-x-head/ray-head.log", lines.as_bytes())
        .unwrap();
    let bytes = b.into_inner().and_then(|g| g.finish()).unwrap();
    let key = format!("logs/{id}/logs.tar.gz");
    s.state.submit.blobs().put(&key, bytes).await.unwrap();
    let jobs = s.state.submit.jobs();
    let mut job = s.job(&id).await;
    job.logs_key = Some(key.clone());
    jobs.update_job(&job).await.unwrap();
    let session = s.sign_in(&s.key_a).await;
    let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
    assert!(page.body.contains("step 59") && !page.body.contains("step 19\n"));
    assert!(page.body.contains("tp-x-head/ray-head.log"));
    let link = s
        .get(&format!("/console/jobs/{id}/logs"), Some(&session))
        .await;
    assert_eq!(link.status, StatusCode::SEE_OTHER);
    assert!(link.location().contains(&key), "{}", link.location());
    let other = s.sign_in(&s.key_b).await;
    let denied = s
        .get(&format!("/console/jobs/{id}/logs"), Some(&other))
        .await;
    assert_eq!(denied.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn capacity_page_shows_the_signed_in_tenants_usage_against_its_quota_and_no_one_elses() {
    use tuneplane_core::quota::{Demand, TenantQuota, TenantUsage};
    let s = stack().await;
    let jobs = s.state.submit.jobs();
    let mut quota = TenantQuota::unlimited(&"acme".parse().unwrap());
    quota.set_gpu_limit("h200", 16, false);
    jobs.put_quota(&quota).await.unwrap();
    // Before a snapshot the limits show already.
    let session_a = s.sign_in(&s.key_a).await;
    let empty = s.get("/console/capacity", Some(&session_a)).await;
    assert!(empty.body.contains("No capacity snapshot yet"));
    assert!(
        empty.body.contains("0 of 16 GPUs admitted, 0 queued"),
        "{}",
        empty.body
    );

    let mut snap =
        CapacitySnapshot::from_nodes(1_000, vec![h200_node("h-0", 8), h200_node("h-1", 4)]);
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
    snap.tenants.insert("acme".into(), usage("h200", 12, 8));
    snap.tenants.insert("globex".into(), usage("a100", 40, 24));
    s.publish_capacity(&snap).await;

    let page_a = s.get("/console/capacity", Some(&session_a)).await;
    assert_eq!(page_a.status, StatusCode::OK);
    assert!(page_a.body.contains("Your team"), "{}", page_a.body);
    assert!(
        page_a.body.contains(
            "data-quota-series=\"h200\" data-limit=\"16\" data-admitted=\"12\" data-queued=\"8\""
        ),
        "{}",
        page_a.body
    );
    assert!(page_a.body.contains("12 of 16 GPUs admitted, 8 queued"));
    assert!(page_a.body.contains("4 of 16 GPUs free"), "{}", page_a.body);
    // The fleet-wide totals are still there, beside it.
    assert!(
        page_a
            .body
            .contains("data-series=\"h200\" data-total=\"16\"")
    );
    // Quoted or as text: the page's random tokens are hex and may hold the letters "a100".
    assert!(
        !page_a.body.contains("\"a100\"")
            && !page_a.body.contains(">a100")
            && !page_a.body.contains("globex"),
        "{}",
        page_a.body
    );

    // globex sees its own a100 usage (unlimited) and nothing of acme's quota or usage.
    let session_b = s.sign_in(&s.key_b).await;
    let page_b = s.get("/console/capacity", Some(&session_b)).await;
    assert!(
        page_b.body.contains("data-quota-series=\"a100\" data-limit=\"unlimited\" data-admitted=\"40\" data-queued=\"24\""),
        "{}",
        page_b.body
    );
    assert!(
        page_b
            .body
            .contains("40 GPUs admitted (unlimited), 24 queued")
    );
    assert!(
        page_b.body.contains(
            "data-quota-series=\"h200\" data-limit=\"unlimited\" data-admitted=\"0\" data-queued=\"0\""
        ),
        "{}",
        page_b.body
    );
    assert!(
        !page_b.body.contains("acme"),
        "acme leaked into globex's page"
    );
    assert!(!page_b.body.contains("12 of 16"));
}

#[tokio::test]
async fn a_job_above_the_quota_is_refused_in_the_submit_form_with_the_reason() {
    use tuneplane_core::quota::{CpuLimit, TenantQuota};
    let s = stack().await;
    let mut quota = TenantQuota::unlimited(&"acme".parse().unwrap());
    quota.cpu = Some(CpuLimit {
        cpus: Some(0.5),
        memory_gb: None,
        borrow: false,
    });
    s.state.submit.jobs().put_quota(&quota).await.unwrap();
    let session = s.sign_in(&s.key_a).await;
    let form = s.get("/console/submit", Some(&session)).await;
    let csrf = csrf_of(&form.body);
    let spec = "name: big\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";
    let res = s.submit_form(&session, &csrf, "console-q", spec).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert!(
        res.body
            .contains("quota is 0.5 CPUs for CPU-only jobs; this job needs 1"),
        "{}",
        res.body
    );
    assert!(s.stored_jobs("acme").await.is_empty(), "nothing is stored");
}
