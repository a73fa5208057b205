//! The three function binaries under the real Lambda Runtime API protocol: `cargo lambda watch
//! --only-lambda-apis` (cargo-lambda from PyPI, installed into the repository venv by
//! `scripts/bootstrap-venv.sh`) plays the Lambda service, each bootstrap polls it for invocations
//! exactly as it does on AWS, and the tests invoke it with the events API Gateway v2, EventBridge
//! Scheduler, S3 and EventBridge send. The stores are DynamoDB and S3 on the local endpoint
//! (moto_server, started by `scripts/with-moto.sh`).
//!
//! These run the host build of the bootstraps: `sam build` makes arm64 ones, which this x86_64
//! machine cannot execute; the code is the same.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod venv;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use common::archives::{SPEC, body, code};
use common::triggers::{fixture, s3_created, store_schedule, submission_event};
use common::{Harness, SENDER_ACCOUNT, TENANT_A};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tuneplane_functions::config::Backend;
use venv::venv_tool;

fn cargo_lambda() -> PathBuf {
    venv_tool("cargo-lambda", "cargo-lambda")
}

use tuneplane_testkit::free_port;

/// One function behind its own emulated Lambda service; both processes end with the value.
struct Function {
    name: &'static str,
    port: u16,
    http: reqwest::Client,
    _service: Child,
    _bootstrap: Child,
}

impl Function {
    /// Starts the Runtime API emulator, waits until it listens, then starts the bootstrap with the
    /// variables the emulator asks for and the stack's configuration.
    async fn start(name: &'static str, binary: &str, h: &Harness) -> Function {
        Function::start_with(name, binary, h, &[]).await
    }

    /// [`Function::start`] with extra variables for the bootstrap.
    async fn start_with(
        name: &'static str,
        binary: &str,
        h: &Harness,
        extra: &[(&str, &str)],
    ) -> Function {
        let port = free_port();
        let service = Command::new(cargo_lambda())
            .args(["lambda", "watch", "--only-lambda-apis", "--invoke-address"])
            .args(["127.0.0.1", "--invoke-port", &port.to_string()])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting cargo lambda watch");
        let mut listening = false;
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                listening = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            listening,
            "cargo lambda watch did not listen on {port} within 30 s"
        );
        let Backend::Aws { table, bucket } = &h.backend else {
            panic!("the runtime-loop tests run on the AWS stores");
        };
        let scratch = std::env::temp_dir();
        let bootstrap = Command::new(binary)
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("http://127.0.0.1:{port}/.rt"),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", "_")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("TUNEPLANE_TABLE", table)
            .env("TUNEPLANE_BUCKET", bucket)
            .env("TUNEPLANE_SCRATCH_DIR", &scratch)
            .env("TUNEPLANE_LOG_FORMAT", "json")
            .env(
                "TUNEPLANE_EVENT_SENDERS",
                json!({ SENDER_ACCOUNT: TENANT_A }).to_string(),
            )
            .env("TUNEPLANE_CONSOLE_SECRET", "c".repeat(32))
            .env_remove("TUNEPLANE_LISTEN")
            .env_remove("TUNEPLANE_DATA_DIR")
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the function binary");
        Function {
            name,
            port,
            http: reqwest::Client::new(),
            _service: service,
            _bootstrap: bootstrap,
        }
    }

    /// Invokes the function with `event` the way the Lambda Invoke API does; returns its result.
    async fn invoke(&self, event: &Value) -> Value {
        let (status, text) = self.invoke_raw(event).await;
        assert!(
            status.is_success(),
            "{} answered {status}: {text}",
            self.name
        );
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} returned no JSON ({e}): {text}", self.name))
    }

    /// The Invoke API's status and body, whatever they are.
    async fn invoke_raw(&self, event: &Value) -> (reqwest::StatusCode, String) {
        let url = format!(
            "http://127.0.0.1:{}/2015-03-31/functions/_/invocations",
            self.port
        );
        let response = self
            .http
            .post(&url)
            .timeout(Duration::from_secs(60))
            .body(event.to_string())
            .send()
            .await
            .expect("invoke the function");
        let status = response.status();
        (status, response.text().await.unwrap_or_default())
    }
}

/// An API Gateway v2 (HTTP API) event.
fn gateway_event(method: &str, path: &str, key: &str, idempotency_key: &str, body: &str) -> Value {
    let mut event = fixture(
        "apigw_v2_request.json",
        &[
            ("METHOD", method),
            ("PATH", path),
            ("AUTHORIZATION", &format!("Bearer {key}")),
            ("IDEMPOTENCY_KEY", idempotency_key),
        ],
    );
    event["body"] = body.into();
    event
}

fn response_body(response: &Value) -> Value {
    let text = response["body"].as_str().unwrap_or_default();
    let bytes = if response["isBase64Encoded"] == true {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default()
    } else {
        text.as_bytes().to_vec()
    };
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_function_serves_gateway_events_through_the_runtime_api() {
    let h = Harness::aws().await;
    let api = Function::start("api", env!("CARGO_BIN_EXE_api"), &h).await;

    let health = api
        .invoke(&gateway_event("GET", "/v1/healthz", "none", "-", ""))
        .await;
    assert_eq!(health["statusCode"], 200, "{health}");
    assert_eq!(response_body(&health)["status"], "ok");
    assert_eq!(health["headers"]["x-request-id"], "Hx1a2b3cDoEEJmQ=");

    let submit = gateway_event(
        "POST",
        "/v1/jobs",
        &h.key_a,
        "rt-1",
        &body(SPEC, &code()).to_string(),
    );
    let created = api.invoke(&submit).await;
    assert_eq!(created["statusCode"], 201, "{created}");
    let job_id = response_body(&created)["job_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!job_id.is_empty(), "{created}");
    let again = api.invoke(&submit).await;
    assert_eq!(again["statusCode"], 200, "{again}");
    assert_eq!(response_body(&again)["job_id"], job_id.as_str());
    assert_eq!(h.job_count(TENANT_A).await, 1);

    let unauthorised = api
        .invoke(&gateway_event("GET", "/v1/jobs", "tp_wrong", "-", ""))
        .await;
    assert_eq!(unauthorised["statusCode"], 401, "{unauthorised}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scheduled_function_answers_scheduler_events_with_json_outcomes() {
    let h = Harness::aws().await;
    store_schedule(&h, "nightly").await;
    let scheduled = Function::start("scheduled", env!("CARGO_BIN_EXE_scheduled"), &h).await;

    let event = fixture("scheduler_event.json", &[("SCHEDULE", "nightly")]);
    let once = scheduled.invoke(&event).await;
    assert_eq!(once["outcomes"][0]["outcome"], "submitted", "{once}");
    assert_eq!(once["outcomes"][0]["created"], true, "{once}");
    let twice = scheduled.invoke(&event).await;
    assert_eq!(twice["outcomes"][0]["created"], false, "{twice}");
    assert_eq!(
        twice["outcomes"][0]["job_id"],
        once["outcomes"][0]["job_id"]
    );

    let missing = fixture("scheduler_event.json", &[("SCHEDULE", "gone")]);
    let refused = scheduled.invoke(&missing).await;
    assert_eq!(refused["outcomes"][0]["outcome"], "rejected", "{refused}");
    assert_eq!(h.job_count(TENANT_A).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_function_handles_s3_and_eventbridge_events_and_refuses_forged_tenants() {
    let h = Harness::aws().await;
    let key = "inbox/acme/my job+v2.zip";
    let archive = common::archives::zip(&[("tuneplane.yaml", SPEC), ("train.py", "print(1)\n")]);
    assert!(h.blobs().put(key, archive).await.is_ok());
    let inbox = Function::start("inbox", env!("CARGO_BIN_EXE_inbox"), &h).await;

    // S3 notification: the key URL-encoded, a space as `+` and `+` as `%2B`.
    let s3 = s3_created("inbox/acme/my+job%2Bv2.zip", "e1");
    let first = inbox.invoke(&s3).await;
    assert_eq!(first["outcomes"][0]["outcome"], "submitted", "{first}");
    assert_eq!(first["outcomes"][0]["created"], true, "{first}");

    // The same object through EventBridge: a redelivery of the same job.
    let eventbridge = json!({
        "version": "0",
        "id": "b1",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": SENDER_ACCOUNT,
        "detail": {"bucket": {"name": "tp"}, "object": {"key": key, "etag": "e1"}}
    });
    let again = inbox.invoke(&eventbridge).await;
    assert_eq!(again["outcomes"][0]["created"], false, "{again}");
    assert_eq!(
        again["outcomes"][0]["job_id"],
        first["outcomes"][0]["job_id"]
    );

    // A name the store cannot hold: a final rejection with its note, not a retried error.
    let bad = s3_created("inbox/acme/50%25.zip", "e2");
    let refused = inbox.invoke(&bad).await;
    assert_eq!(refused["outcomes"][0]["outcome"], "rejected", "{refused}");
    assert_eq!(
        refused["outcomes"][0]["note_key"],
        "inbox/acme/50_.zip.error.json"
    );

    // Submission events: the tenant is the sending account's; another account is refused.
    let submission = submission_event;
    let accepted = inbox.invoke(&submission(SENDER_ACCOUNT)).await;
    assert_eq!(
        accepted["outcomes"][0]["outcome"], "submitted",
        "{accepted}"
    );
    let mut forged = submission("999988887777");
    forged["id"] = "forged".into();
    let forged = inbox.invoke(&forged).await;
    assert_eq!(forged["outcomes"][0]["outcome"], "rejected", "{forged}");
    assert!(
        forged["outcomes"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("999988887777"),
        "{forged}"
    );
    assert_eq!(h.job_count(TENANT_A).await, 2);
    assert_eq!(h.job_count(common::TENANT_B).await, 0);
}

/// A store that cannot be reached is the one failure that is not final: the function reports an
/// error, so Lambda (and S3/EventBridge behind it) delivers the event again later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_function_fails_the_invocation_when_the_store_is_unreachable() {
    let h = Harness::aws().await;
    let closed = free_port();
    let endpoint = format!("http://127.0.0.1:{closed}");
    let inbox = Function::start_with(
        "inbox",
        env!("CARGO_BIN_EXE_inbox"),
        &h,
        &[("AWS_ENDPOINT_URL", &endpoint), ("AWS_MAX_ATTEMPTS", "1")],
    )
    .await;
    let s3 = s3_created("inbox/acme/run.zip", "e1");
    let (status, text) = inbox.invoke_raw(&s3).await;
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert!(!status.is_success(), "expected a function error: {text}");
    assert_eq!(body["errorType"], "RetryableFailure", "{text}");
    assert!(
        body["errorMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("inbox/acme/run.zip"),
        "{text}"
    );
    assert!(body.get("outcomes").is_none(), "{text}");
}
