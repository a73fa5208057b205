//! Callbacks as a user meets them on the dev stack: `tuneplane subscriptions add` for a
//! receiver on this machine (dev allows loopback), a job whose spec names a callback of its own,
//! and the receiver getting every state change signed with the secret `tuneplane subscriptions
//! secret` prints; `list` and `delete` through the CLI, and a refused URL named by its field.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod cli_support;
mod stack_support;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use serde_json::Value;
use stack_support::{examples, submit_dir, wait_until};
use tuneplane::dev::Backend;
use tuneplane_core::callback::sign;

type Got = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

async fn receive(
    State(got): State<Got>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let signature = headers
        .get("x-tuneplane-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    got.lock()
        .unwrap()
        .push((uri.path().to_owned(), signature, body.to_vec()));
    "ok"
}

async fn subscriptions(url: &str, key: &str, args: &[&str]) -> std::process::Output {
    cli_support::client(url, key, "subscriptions", args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_and_a_jobs_own_callback_hear_every_change_signed_with_the_tenants_secret() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let got: Got = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::post(receive))
        .with_state(got.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (url, key) = (stack.api_url.clone(), stack.api_key.clone());

    let out = subscriptions(
        &url,
        &key,
        &[
            "add",
            &format!("http://{addr}/ends"),
            "--events",
            "terminal",
        ],
    )
    .await;
    let said = cli_support::ok(&out);
    assert!(
        said.contains("sends succeeded, failed, stopped to"),
        "{said}"
    );
    let refused = subscriptions(&url, &key, &["add", "https://169.254.169.254/x"]).await;
    assert!(!refused.status.success());
    let why = cli_support::text(&refused.stderr);
    assert!(
        why.contains("url") && why.contains("metadata service"),
        "{why}"
    );
    let listed = cli_support::ok(&subscriptions(&url, &key, &["list"]).await);
    assert!(
        listed.contains(&format!("http://{addr}/ends")) && listed.contains("1 of at most 10"),
        "{listed}"
    );
    let secret = cli_support::ok(&subscriptions(&url, &key, &["secret"]).await)
        .trim()
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");

    // hello-cpu with a callback of its own for every event.
    let spec = std::fs::read_to_string(examples().join("hello-cpu/tuneplane.yaml")).unwrap();
    let spec = format!("{spec}notify: [{{url: 'http://{addr}/job'}}]\n");
    let job = submit_dir(&api, &examples().join("hello-cpu"), &spec).await;
    let done = wait_until(&api, &job.id, 120, "terminal", |j| j.state.is_terminal()).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let types = |path: &str| -> Vec<String> {
        got.lock()
            .unwrap()
            .iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, _, b)| {
                let v: Value = serde_json::from_slice(b).unwrap();
                v["type"].as_str().unwrap_or_default().to_owned()
            })
            .collect()
    };
    while (types("/ends").is_empty() || types("/job").last().is_none_or(|t| t != "job.succeeded"))
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Every change the job went through, as its platform events record them.
    let changes: Vec<String> = stack_support::events(&api, &job.id)
        .await
        .iter()
        .filter_map(tuneplane_core::callback::outbox::kind_of)
        .map(|k| format!("job.{k}"))
        .collect();
    assert_eq!(changes.first().map(String::as_str), Some("job.queued"));
    assert_eq!(changes.last().map(String::as_str), Some("job.succeeded"));
    assert_eq!(
        types("/job"),
        changes,
        "job {} ended {:?}",
        done.id,
        done.state
    );
    assert_eq!(types("/ends"), ["job.succeeded"]);
    for (path, signature, body) in got.lock().unwrap().iter() {
        let (t, v1) = signature
            .strip_prefix("t=")
            .and_then(|r| r.split_once(",v1="))
            .expect("signed");
        assert_eq!(v1, sign(&secret, t.parse().unwrap(), body), "{path}");
        let v: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(v["links"]["api"], format!("{url}/v1/jobs/{}", job.id));
    }

    let id = listed
        .split_whitespace()
        .find(|w| w.starts_with("sub_"))
        .unwrap()
        .to_owned();
    let gone = cli_support::ok(&subscriptions(&url, &key, &["delete", &id]).await);
    assert!(gone.contains("deleted"), "{gone}");
    let empty = cli_support::ok(&subscriptions(&url, &key, &["list"]).await);
    assert!(empty.contains("no subscriptions"), "{empty}");
}
