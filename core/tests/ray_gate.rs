//! The head pod's dashboard gate (`core/src/render/ray_gate.py`), run by the machine's python3 in
//! front of a stand-in dashboard on loopback that records what reaches it and answers like Ray
//! (401 without a token, 403 with a wrong one). Real Ray behind the gate is tested on the real tier.
//! Without the token, a failed job's status carries none of the driver's log Ray puts in it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tuneplane_core::render::bootstrap::MISMATCH_TEXT;
use tuneplane_core::render::rayjob::GATE_SCRIPT;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const SUBMISSION: &str = "tp-j-1";

/// Requests the stand-in dashboard received: (request line, headers lower-cased).
type Seen = Arc<Mutex<Vec<(String, Vec<(String, String)>)>>>;

/// A stand-in for Ray's dashboard: job info with secrets in it for the token, Ray's refusals
/// otherwise.
fn dashboard() -> (u16, Seen) {
    dashboard_answering(
        "200 OK",
        format!(
            r#"{{"type":"SUBMISSION","job_id":"02000000","submission_id":"{SUBMISSION}","status":"RUNNING","message":"running","start_time":1,"end_time":null,"entrypoint":"python secret.py","runtime_env":{{"working_dir":"https://blobs/capsule.zip?signature=SECRET"}},"metadata":{{"k":"SECRET"}}}}"#
        ),
    )
}

/// A stand-in dashboard that answers `status` and `job` to the token, Ray's refusals otherwise.
fn dashboard_answering(status: &'static str, job: String) -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(64) {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                    break;
                }
                let (k, v) = h.trim_end().split_once(':').unwrap();
                headers.push((k.trim().to_lowercase(), v.trim().to_owned()));
            }
            let token = headers
                .iter()
                .find(|(k, _)| k == "authorization" || k == "x-ray-authorization")
                .map(|(_, v)| v.clone());
            record
                .lock()
                .unwrap()
                .push((line.trim_end().to_owned(), headers));
            let (status, body) = match token.as_deref() {
                None => (
                    "401 Unauthorized",
                    "Unauthorized: Missing authentication token".to_owned(),
                ),
                Some(t) if t != format!("Bearer {TOKEN}") => (
                    "403 Forbidden",
                    "Forbidden: Invalid authentication token".to_owned(),
                ),
                Some(_) => (status, job.clone()),
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

use tuneplane_testkit::free_port;

struct Gate(Child);

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gate(port: u16, upstream: u16) -> Gate {
    let child = Command::new("python3")
        .args(["-c", GATE_SCRIPT])
        .env("RAY_AUTH_TOKEN", TOKEN)
        .env("TUNEPLANE_GATE_SUBMISSION_ID", SUBMISSION)
        .env("TUNEPLANE_GATE_PORT", port.to_string())
        .env("TUNEPLANE_GATE_UPSTREAM_PORT", upstream.to_string())
        .stdout(Stdio::null())
        .spawn()
        .expect("python3");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the gate did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Gate(child)
}

/// Sends `request` to the gate; the status code and body of the answer.
fn send(port: u16, request: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_gate_lets_the_operator_read_its_jobs_status_and_stop_it_and_nothing_else_without_the_token()
{
    let (upstream, seen) = dashboard();
    let port = free_port();
    let _gate = gate(port, upstream);

    // The operator's call (no credentials): the job's status only, fetched with the token.
    let (status, body) = send(
        port,
        &format!("GET /api/jobs/{SUBMISSION} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200, "{body}");
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(info["status"], "RUNNING");
    assert_eq!(info["submission_id"], SUBMISSION);
    assert!(!body.contains("SECRET"), "{body}");
    assert!(info.get("entrypoint").is_none() && info.get("runtime_env").is_none());
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let token = seen[0].1.iter().find(|(k, _)| k == "x-ray-authorization");
        assert_eq!(
            token.map(|(_, v)| v.as_str()),
            Some(format!("Bearer {TOKEN}").as_str())
        );
    }

    // Without credentials, anything else is refused at the gate: submitting, listing, another
    // job's status, logs. None of it reaches the dashboard.
    let body = r#"{"entrypoint": "curl evil"}"#;
    for request in [
        format!(
            "POST /api/jobs/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        "GET /api/jobs/ HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
        "GET /api/jobs/tp-j-2 HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
        format!("GET /api/jobs/{SUBMISSION}/logs HTTP/1.1\r\nHost: x\r\n\r\n"),
        "POST /api/jobs/tp-j-2/stop HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".to_owned(),
        format!("DELETE /api/jobs/{SUBMISSION} HTTP/1.1\r\nHost: x\r\n\r\n"),
    ] {
        let (status, answer) = send(port, &request);
        assert_eq!(status, 401, "{request}: {answer}");
        assert!(answer.contains("token"), "{answer}");
    }
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Credentials pass unchanged, and the dashboard judges them: a wrong token is refused by it,
    // the right one answers.
    let post = |auth: &str| {
        format!(
            "POST /api/jobs/ HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
            body.len()
        )
    };
    let (status, _) = send(port, &post("Authorization: Bearer not-the-token"));
    assert_eq!(status, 403);
    let (status, _) = send(port, &post(&format!("X-Ray-Authorization: Bearer {TOKEN}")));
    assert_eq!(status, 200);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    let wrong = seen[1].1.iter().find(|(k, _)| k == "authorization");
    assert_eq!(wrong.map(|(_, v)| v.as_str()), Some("Bearer not-the-token"));
    // Passed requests end their connection: a client's next request comes through the gate.
    for (_, headers) in &seen[1..] {
        let connection: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k == "connection")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(connection, ["close"], "{headers:?}");
    }
    assert!(seen[1].0.starts_with("POST /api/jobs/"), "{:?}", seen[1]);
}

/// The operator's request: the job's status without credentials.
fn status_request() -> String {
    format!("GET /api/jobs/{SUBMISSION} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
}

/// Ray's job info of a failed job whose message holds the tail of the driver's `log`.
fn failed_job(log: &str) -> String {
    let message = format!(
        "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n{log}"
    );
    serde_json::json!({
        "type": "SUBMISSION", "job_id": "02000000", "submission_id": SUBMISSION,
        "status": "FAILED", "message": message, "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR",
        "start_time": 1_700_000_000_000_u64, "end_time": 1_700_000_060_000_u64,
        "driver_exit_code": 1, "driver_info": {"id": "01", "node_ip_address": "10.0.0.7"},
    })
    .to_string()
}

#[test]
fn a_failed_jobs_answer_without_the_token_carries_no_log_text() {
    let log = "Traceback (most recent call last):\n  File \"train.py\", line 9\nValueError: HF_TOKEN=hf_LEAKED";
    let (upstream, _seen) = dashboard_answering("200 OK", failed_job(log));
    let port = free_port();
    let _gate = gate(port, upstream);

    let (status, body) = send(port, &status_request());

    assert_eq!(status, 200, "{body}");
    for words in [
        "hf_LEAKED",
        "Traceback",
        "train.py",
        "last available logs",
        "10.0.0.7",
    ] {
        assert!(!body.contains(words), "{words:?} in {body}");
    }
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(info.get("message").is_none(), "{body}");
    // What KubeRay follows the job by is all there.
    assert_eq!(info["status"], "FAILED");
    assert_eq!(info["submission_id"], SUBMISSION);
    assert_eq!(info["job_id"], "02000000");
    assert_eq!(info["start_time"], 1_700_000_000_000_u64);
    assert_eq!(info["end_time"], 1_700_000_060_000_u64);
    assert_eq!(info["driver_exit_code"], 1);
    assert_eq!(info["error_type"], "JOB_ENTRYPOINT_COMMAND_ERROR");
}

#[test]
fn a_refused_capsule_is_still_named_without_the_log_that_names_it() {
    let log = format!(
        "[tuneplane-runner] {MISMATCH_TEXT}: secret_plan.py: sha256 ab, the manifest says cd; nothing was executed"
    );
    let (upstream, _seen) = dashboard_answering("200 OK", failed_job(&log));
    let port = free_port();
    let _gate = gate(port, upstream);

    let (status, body) = send(port, &status_request());

    assert_eq!(status, 200, "{body}");
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = info["message"].as_str().unwrap_or_default();
    // The reconciler tells a tampered capsule by these words (CapsuleMismatch).
    assert!(message.contains(MISMATCH_TEXT), "{body}");
    assert!(
        !body.contains("secret_plan.py") && !body.contains("sha256 ab"),
        "{body}"
    );
}

#[test]
fn the_dashboards_error_answer_is_not_passed_on_without_the_token() {
    let (upstream, _seen) = dashboard_answering(
        "500 Internal Server Error",
        "Traceback: driver log line HF_TOKEN=hf_LEAKED".to_owned(),
    );
    let port = free_port();
    let _gate = gate(port, upstream);

    let (status, body) = send(port, &status_request());

    assert_eq!(status, 500, "{body}");
    assert!(
        !body.contains("hf_LEAKED") && !body.contains("Traceback"),
        "{body}"
    );
}

#[test]
fn the_stop_of_its_own_job_is_forwarded_with_the_token_and_answered_with_the_outcome_only() {
    let (upstream, seen) = dashboard_answering(
        "200 OK",
        r#"{"stopped": true, "message": "driver said hf_LEAKED"}"#.to_owned(),
    );
    let port = free_port();
    let _gate = gate(port, upstream);

    let (status, body) = send(
        port,
        &format!(
            "POST /api/jobs/{SUBMISSION}/stop HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        ),
    );

    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer, serde_json::json!({"stopped": true}));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].0,
        format!("POST /api/jobs/{SUBMISSION}/stop HTTP/1.1")
    );
    let token = seen[0].1.iter().find(|(k, _)| k == "x-ray-authorization");
    assert_eq!(
        token.map(|(_, v)| v.clone()),
        Some(format!("Bearer {TOKEN}"))
    );
}
