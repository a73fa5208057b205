//! Router-level tests of the console: the whole API router over embedded stores (the functions'
//! shared harness, `common`), driven with plain requests, cookies and CSRF tokens handled by hand
//! as a browser would. Sign-in, sessions, CSRF and the submit form here; the other pages in the
//! modules below.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "console_routes/harness.rs"]
mod harness;

#[path = "console_routes/attempts_outputs.rs"]
mod attempts_outputs;
#[path = "console_routes/audit.rs"]
mod audit;
#[path = "console_routes/callbacks.rs"]
mod callbacks;
#[path = "console_routes/pages.rs"]
mod pages;
#[path = "console_routes/revocation.rs"]
mod revocation;
#[path = "console_routes/usage.rs"]
mod usage;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use harness::*;

#[tokio::test]
async fn a_page_without_a_session_redirects_to_sign_in_and_comes_back() {
    let s = stack().await;
    let res = s.get("/console/jobs?status=QUEUED", None).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER);
    assert_eq!(
        res.location(),
        "/console/sign-in?next=/console/jobs%3Fstatus%3DQUEUED"
    );
}

#[tokio::test]
async fn sign_in_sets_a_strict_secure_httponly_session_that_does_not_hold_the_key() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    assert!(!session.contains(&s.key_a));
    let (nonce, csrf) = s.sign_in_form("/console/sign-in").await;
    let res = s
        .post_form(
            "/console/sign-in",
            Some(&nonce),
            &[
                ("api_key", &s.key_a),
                ("csrf", &csrf),
                ("next", "https://evil.example/"),
            ],
        )
        .await;
    assert_eq!(res.location(), "/console/jobs", "no open redirect");
    let set = res
        .cookies()
        .into_iter()
        .find(|c| c.starts_with("tp_session="))
        .unwrap_or_default();
    for attr in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Max-Age=28800",
        "Path=/",
    ] {
        assert!(set.contains(attr), "{attr} missing in {set}");
    }
    let jobs = s.get("/console/jobs", Some(&session)).await;
    assert_eq!(jobs.status, StatusCode::OK);
    assert!(jobs.body.contains("Tenant <strong>acme</strong>"));
}

#[tokio::test]
async fn a_wrong_key_or_a_missing_sign_in_token_gets_no_session() {
    let s = stack().await;
    let (nonce, csrf) = s.sign_in_form("/console/sign-in").await;
    let wrong = s
        .post_form(
            "/console/sign-in",
            Some(&nonce),
            &[("api_key", "tp_0000"), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.cookie("tp_session").is_none());
    assert!(!wrong.body.contains("tp_0000"), "the key is never echoed");
    let no_nonce = s
        .post_form(
            "/console/sign-in",
            None,
            &[("api_key", &s.key_a), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(no_nonce.status, StatusCode::UNAUTHORIZED);
    assert!(no_nonce.cookie("tp_session").is_none());
    let forged = s
        .get("/console/jobs", Some("tp_session=v1.00.11.99999999999.ab"))
        .await;
    assert_eq!(forged.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn forms_without_the_csrf_token_or_from_another_origin_are_refused() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let id = s.submit_api(&s.key_a, "victim").await;
    let res = s
        .post_form(
            &format!("/console/jobs/{id}/stop"),
            Some(&session),
            &[("csrf", "00")],
        )
        .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
    let csrf = csrf_of(&page.body);
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("/console/jobs/{id}/stop"))
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::ORIGIN, "http://evil.example")
        .header(header::COOKIE, &session)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={csrf}")))
        .unwrap();
    let res = s.call(req).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let job = s.job(&id).await;
    assert!(!job.stop_requested);
    let ok = s
        .post_form(
            &format!("/console/jobs/{id}/stop"),
            Some(&session),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(
        (ok.status, ok.location()),
        (
            StatusCode::SEE_OTHER,
            format!("/console/jobs/{id}?notice=stop-requested").as_str()
        )
    );
    let job = s.job(&id).await;
    assert!(job.stop_requested);
}

#[tokio::test]
async fn a_tenant_sees_only_its_own_jobs() {
    let s = stack().await;
    let id_a = s.submit_api(&s.key_a, "mine").await;
    let session_b = s.sign_in(&s.key_b).await;
    let list = s.get("/console/jobs", Some(&session_b)).await;
    assert!(!list.body.contains(&id_a));
    let detail = s
        .get(&format!("/console/jobs/{id_a}"), Some(&session_b))
        .await;
    assert_eq!(detail.status, StatusCode::NOT_FOUND);
    let session_a = s.sign_in(&s.key_a).await;
    let list = s.get("/console/jobs?status=queued", Some(&session_a)).await;
    assert!(list.body.contains(&id_a));
    let none = s
        .get("/console/jobs?status=RUNNING", Some(&session_a))
        .await;
    assert!(!none.body.contains(&id_a));
}

#[tokio::test]
async fn submit_form_shows_every_spec_problem_inline_and_stores_nothing() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/submit", Some(&session)).await;
    let csrf = csrf_of(&page.body);
    let spec = "name: Bad_Name\nplugin: custom/custom\nimage: x\nentrypoint: run\npools:\n  - {name: main, series: h200, nodes: 1, gpus_per_node: 99}\nbogus: 1\n";
    let res = s.submit_form(&session, &csrf, "console-k1", spec).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
    let expected = tuneplane_core::spec::validate(spec, None, &s.state.submit.config().defaults)
        .expect_err("invalid");
    assert!(expected.0.len() >= 3);
    for e in &expected.0 {
        assert!(
            res.body.contains(&format!("<code>{}</code>", e.path)),
            "{} missing",
            e.path
        );
    }
    assert!(s.stored_jobs("acme").await.is_empty());
    let inline = s
        .post_form(
            "/console/submit/validate",
            Some(&session),
            &[("csrf", &csrf), ("spec", spec)],
        )
        .await;
    assert_eq!(inline.status, StatusCode::OK);
    assert!(inline.body.contains("problems in the spec"));
}

#[tokio::test]
async fn submit_form_creates_one_job_even_when_sent_twice() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/submit", Some(&session)).await;
    let csrf = csrf_of(&page.body);
    let key_marker = "name=\"idempotency_key\" value=\"";
    let key = page
        .body
        .split(key_marker)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_default()
        .to_owned();
    assert!(key.starts_with("console-"));
    let spec = "name: hello\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";
    let mut locations = Vec::new();
    for _ in 0..2 {
        let res = s.submit_form(&session, &csrf, &key, spec).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
        locations.push(
            res.location()
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(locations[0], locations[1]);
    assert_eq!(s.stored_jobs("acme").await.len(), 1);
}
