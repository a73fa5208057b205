//! The usage page shows what `GET /v1/usage` answers for the signed-in tenant: per series and
//! per day, and nothing of other tenants.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tuneplane_core::job::JobState;

use super::harness::stack;

/// `GET path` with `key`, as JSON.
async fn api_json(s: &super::harness::Stack, key: &str, path: &str) -> serde_json::Value {
    let req = Request::get(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::empty())
        .unwrap();
    let res = s.call(req).await;
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn the_usage_page_shows_the_apis_figures_per_series_and_day() {
    let s = stack().await;
    let now = (s.state.clock)();
    // A finished 2 × 4 h200 GPU job of acme that held them for 90 minutes, ending an hour ago,
    // and a job of globex.
    for (key, gpus) in [(&s.key_a, 4), (&s.key_b, 8)] {
        let id = s.submit_api(key, "gpu").await;
        let mut job = s.job(&id).await;
        job.spec.pools[0].series = Some("h200".into());
        job.spec.pools[0].nodes = 2;
        job.spec.pools[0].gpus_per_node = gpus;
        job.state = JobState::Succeeded;
        job.admitted_at_ms = Some(now - 9_000_000);
        job.finished_at_ms = Some(now - 3_600_000);
        s.state.submit.jobs().update_job(&job).await.unwrap();
    }
    let api = api_json(&s, &s.key_a, "/v1/usage?from=2d").await;
    let h200 = api["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["series"] == "h200")
        .cloned()
        .unwrap();
    assert_eq!(h200["gpu_hours"], 12.0, "2 × 4 GPUs × 1.5 h");

    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/usage?days=2", Some(&session)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body
            .contains("data-series=\"h200\" data-gpu-hours=\"12.00\""),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<strong class=\"total-gpu-hours\">12.00</strong>"),
        "{}",
        page.body
    );
    // The days of the chart add up to the same total; globex's 24 GPU-hours are not shown.
    let days: f64 = page
        .body
        .split("<tr data-day=\"")
        .skip(1)
        .map(|row| {
            let h = row.split("data-gpu-hours=\"").nth(1).unwrap();
            h.split('"').next().unwrap().parse::<f64>().unwrap()
        })
        .sum();
    assert!((days - 12.0).abs() < 0.02, "{days}");
    assert!(!page.body.contains("24.00"), "another tenant's usage shown");
    let bad = s.get("/console/usage?days=0", Some(&session)).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}
