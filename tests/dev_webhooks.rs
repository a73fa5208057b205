//! `tuneplane dev --webhooks FILE`: the dev stack serves the configured webhook sources, and a
//! delivery signed with `openssl` exactly as the README's tour does submits a job; without the
//! file the source is unknown (404), and a misconfigured file fails startup naming the file and
//! the source, never the secret.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tuneplane::dev::{Backend, ClusterChoice, Stack, StackOptions, webhook_sources};
use tuneplane_core::fleet::Fleet;
use tuneplane_core::store::JobQuery;

const SECRET: &str = "change-me-to-a-long-random-secret";

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn options(dir: &Path, webhooks: Option<&Path>) -> StackOptions {
    let fleet =
        Fleet::from_yaml(&std::fs::read_to_string(examples().join("fleet.yaml")).unwrap()).unwrap();
    StackOptions {
        data_dir: dir.join("data"),
        port: 0,
        fleet,
        execute: false,
        unpullable_images: Vec::new(),
        pass_interval: Duration::from_millis(500),
        backend: Backend::Embedded,
        cluster: ClusterChoice::Simulated,
        webhooks: webhook_sources(webhooks, None).unwrap(),
        capsule_delivery: tuneplane_core::render::CapsuleDelivery::Presigned,
        blob_tls: None,
        preemption_min_run: None,
    }
}

/// The README's delivery: the hello-cpu code inline, signed over `<t>.<body>` with openssl.
fn signed_delivery(dir: &Path) -> (Vec<u8>, String) {
    let script = r#"
CODE=$(tar czf - -C "$EXAMPLE" hello.py greeting.py | base64 | tr -d '\n')
printf '{"spec": {"name": "hello-webhook", "plugin": "custom/custom", "image": "python:3.12-slim", "entrypoint": "python3 hello.py", "pools": [{"name": "main", "nodes": 1, "gpus_per_node": 0, "cpus": 1, "memory_gb": 1}]}, "code": {"inline": "%s"}}' "$CODE" > delivery.json
T=$(date +%s)
SIG=$( (printf '%s.' "$T"; cat delivery.json) | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
printf 't=%s,v1=%s' "$T" "$SIG"
"#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("EXAMPLE", examples().join("hello-cpu"))
        .env("SECRET", SECRET)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = std::fs::read(dir.join("delivery.json")).unwrap();
    (body, String::from_utf8(out.stdout).unwrap())
}

async fn deliver(stack: &Stack, body: Vec<u8>, signature: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .post(format!("{}/v1/webhooks/ci", stack.api_url))
        .header("content-type", "application/json")
        .header("x-tuneplane-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_signed_with_openssl_submits_a_job_on_the_dev_stack() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("webhooks.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"ci": {{"secret": "{SECRET}", "tenant": "default", "scheme": "tuneplane"}}}}"#
        ),
    )
    .unwrap();
    let stack = Stack::start(options(t.path(), Some(&file))).await.unwrap();
    assert_eq!(stack.webhook_sources, ["ci"]);
    let (body, signature) = signed_delivery(t.path());
    let (status, text) = deliver(&stack, body.clone(), &signature).await;
    assert_eq!(status, 201, "{text}");
    let jobs = stack
        .jobs
        .list_jobs(&"default".parse().unwrap(), &JobQuery::default())
        .await
        .unwrap();
    assert_eq!(jobs.items.len(), 1);
    assert_eq!(jobs.items[0].spec.name, "hello-webhook");
    // The same delivery again is a replay.
    assert_eq!(deliver(&stack, body, &signature).await.0, 401);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_webhooks_the_source_is_unknown_and_a_bad_file_names_itself_not_the_secret() {
    let t = tempfile::tempdir().unwrap();
    let stack = Stack::start(options(t.path(), None)).await.unwrap();
    let (body, signature) = signed_delivery(t.path());
    let (status, text) = deliver(&stack, body, &signature).await;
    assert_eq!(status, 404, "{text}");
    stack.shutdown().await;

    let file = t.path().join("bad.json");
    std::fs::write(&file, format!(r#"{{"ci": "{SECRET}"}}"#)).unwrap();
    let err = match Stack::start(options(t.path(), Some(&file))).await {
        Ok(_) => panic!("a misconfigured webhooks file started"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("bad.json") && err.contains("\"ci\""), "{err}");
    assert!(!err.contains(SECRET), "the secret leaked: {err}");
}

/// The dev key kept in the data dir is reused at the next start while it is valid; once revoked
/// (`tuneplane admin keys revoke`), the next start makes a new one instead of printing a key the
/// API refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_dev_key_is_replaced_at_the_next_start() {
    use tuneplane_core::store::{ApiKeyChange, hash_api_key};
    let t = tempfile::tempdir().unwrap();
    let stack = Stack::start(options(t.path(), None)).await.unwrap();
    let first = stack.api_key.clone();
    stack.shutdown().await;
    let stack = Stack::start(options(t.path(), None)).await.unwrap();
    assert_eq!(stack.api_key, first, "a valid key is kept across restarts");
    let revoked = stack
        .jobs
        .update_api_key(&hash_api_key(&first), ApiKeyChange::Revoke { at_ms: 1 })
        .await
        .unwrap();
    assert!(revoked.is_some_and(|r| r.revoked_at_ms.is_some()));
    stack.shutdown().await;
    let stack = Stack::start(options(t.path(), None)).await.unwrap();
    assert_ne!(stack.api_key, first, "a revoked key is replaced");
    let record = stack
        .jobs
        .get_api_key(&hash_api_key(&stack.api_key))
        .await
        .unwrap()
        .expect("the new key is stored");
    assert_eq!(record.revoked_at_ms, None);
    assert_eq!(record.tenant, "default");
    stack.shutdown().await;
}
