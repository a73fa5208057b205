//! Cold start of the API function: process start to first response, measured under a local
//! stand-in for the Lambda runtime API (loopback only).
//!
//! Each run starts the `api` binary with `AWS_LAMBDA_RUNTIME_API` pointing at a small server here
//! that hands out one API Gateway v2 event (`GET /v1/healthz`, then an unauthenticated
//! `GET /v1/jobs` that reads the key table) and records when each response arrives. The process
//! is then stopped. Run with `cargo bench -p tuneplane-functions --bench cold_start`; with
//! `AWS_ENDPOINT_URL` set (`scripts/with-moto.sh`) the DynamoDB/S3 configuration is measured too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::sync::mpsc;

const RUNS: usize = 10;
const EVENT: &str = include_str!("../tests/fixtures/apigw_v2_request.json");

#[derive(Clone)]
struct Runtime {
    events: Arc<Mutex<Vec<String>>>,
    done: mpsc::UnboundedSender<(String, Instant, String)>,
}

async fn next(State(rt): State<Runtime>) -> impl IntoResponse {
    let event = rt.events.lock().map(|mut e| e.pop()).unwrap_or(None);
    match event {
        Some(body) => {
            let mut headers = HeaderMap::new();
            let id = format!("req-{}", body.len());
            let deadline = (std::time::SystemTime::now() + Duration::from_secs(30))
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let pairs = [
                ("lambda-runtime-aws-request-id", id),
                ("lambda-runtime-deadline-ms", deadline.to_string()),
                (
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:us-east-1:000000000000:function:api".to_owned(),
                ),
            ];
            for (k, v) in pairs {
                if let Ok(v) = HeaderValue::from_str(&v) {
                    headers.insert(k, v);
                }
            }
            (StatusCode::OK, headers, body).into_response()
        }
        // No more events: hold the poll open until the process is stopped.
        None => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

async fn respond(State(rt): State<Runtime>, Path(id): Path<String>, body: Bytes) -> StatusCode {
    let _ = rt.done.send((
        id,
        Instant::now(),
        String::from_utf8_lossy(&body).into_owned(),
    ));
    StatusCode::ACCEPTED
}

fn event(method: &str, path: &str) -> String {
    EVENT
        .replace("{{METHOD}}", method)
        .replace("{{PATH}}", path)
        .replace("{{AUTHORIZATION}}", "Bearer tp_unknown")
        .replace("{{IDEMPOTENCY_KEY}}", "none")
        .replace("{{BODY}}", "")
}

async fn one_run(
    exe: &str,
    extra_env: &[(String, String)],
) -> Result<(Duration, Duration), String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    // Popped from the end: healthz first, then the store-reading request.
    let events = vec![event("GET", "/v1/jobs"), event("GET", "/v1/healthz")];
    let rt = Runtime {
        events: Arc::new(Mutex::new(events)),
        done: tx,
    };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(respond),
        )
        .route("/2018-06-01/runtime/invocation/{id}/error", post(respond))
        .route(
            "/2018-06-01/runtime/init/error",
            post(|| async { StatusCode::ACCEPTED }),
        )
        .with_state(rt);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let data = tempfile::tempdir().map_err(|e| e.to_string())?;

    let start = Instant::now();
    let mut cmd = tokio::process::Command::new(exe);
    cmd.env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "api")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("TUNEPLANE_DATA_DIR", data.path())
        .env("TUNEPLANE_BLOB_SECRET", "bench-secret")
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| format!("{exe}: {e}"))?;
    let mut times = Vec::new();
    while times.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some((_, at, body))) => {
                if times.is_empty() && !body.contains("\"statusCode\":200") {
                    return Err(format!("unexpected first response: {body}"));
                }
                times.push(at - start);
            }
            _ => return Err("no response within 30 s".into()),
        }
    }
    let _ = child.kill().await;
    server.abort();
    Ok((times[0], times[1]))
}

fn summary(label: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label}: median {:.1} ms, min {:.1} ms, max {:.1} ms ({} runs)",
        ms(xs[xs.len() / 2]),
        ms(xs[0]),
        ms(xs[xs.len() - 1]),
        xs.len()
    );
}

async fn measure(label: &str, exe: &str, env: &[(String, String)]) {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        match one_run(exe, env).await {
            Ok((a, b)) => {
                first.push(a);
                second.push(b);
            }
            Err(e) => {
                println!("{label}: run failed: {e}");
                return;
            }
        }
    }
    summary(
        &format!("{label} — process start to first response (GET /v1/healthz)"),
        first,
    );
    summary(
        &format!("{label} — process start to first store read (GET /v1/jobs, 401)"),
        second,
    );
}

#[tokio::main]
async fn main() {
    let exe = env!("CARGO_BIN_EXE_api");
    measure("api, local stores", exe, &[]).await;
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    if endpoint.starts_with("http://127.0.0.1:") {
        // The table must exist for the key lookup to answer 401 rather than 500.
        let table = format!("tp-cold-start-{}", std::process::id());
        let sdk = tuneplane_stores::aws::load_config().await;
        let client = tuneplane_stores::aws::dynamodb_client(&sdk, None);
        if let Err(e) = tuneplane_stores::dynamo::table::create_table(&client, &table).await {
            println!("cannot create the table on {endpoint}: {e}");
            return;
        }
        let env = [
            ("TUNEPLANE_TABLE".to_owned(), table.clone()),
            ("TUNEPLANE_BUCKET".to_owned(), table),
        ];
        measure("api, DynamoDB + S3 (local endpoint)", exe, &env).await;
    }
}
