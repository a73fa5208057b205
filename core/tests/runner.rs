//! The runner inside a real extracted capsule, run by the machine's python3.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::fs;
use std::io::{BufRead, BufReader, Cursor};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tuneplane_core::capsule::{Limits, build_from_source, build_runner_pex, runner_pex};
use tuneplane_core::render::bootstrap::MISMATCH_EXIT;
use tuneplane_core::spec::{Defaults, validate};

/// Builds a capsule of `files` with `entrypoint` and extracts it into `dest`.
fn extracted(files: &[(&str, &str)], entrypoint: &str, dest: &Path) {
    let src = dest.with_extension("src");
    fs::create_dir_all(&src).unwrap();
    for (name, body) in files {
        fs::write(src.join(name), body).unwrap();
    }
    let text = format!(
        "name: r\nimage: python:3.12\nentrypoint: {entrypoint:?}\nenv: {{FROM_SPEC: yes-it-is}}\npools: [{{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}}]\n"
    );
    let spec = validate(&text, None, &Defaults::default()).unwrap().spec;
    let (bytes, _) = build_from_source(
        &src,
        &spec,
        &Limits::default(),
        dest.parent().unwrap(),
        Vec::new(),
    )
    .unwrap();
    zip::ZipArchive::new(Cursor::new(bytes))
        .unwrap()
        .extract(dest)
        .unwrap();
}

#[test]
fn runner_runs_the_entrypoint_in_the_capsule_root_and_returns_its_status() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    extracted(
        &[
            (
                "main.py",
                "import os, helper\nprint('cwd-ok' if os.getcwd() == os.environ['TUNEPLANE_CAPSULE_ROOT'] else 'cwd-wrong')\nprint(helper.X, os.environ['FROM_SPEC'], os.environ['TUNEPLANE_JOB_ID'])\nraise SystemExit(3)\n",
            ),
            ("helper.py", "X = 'sibling-import-ok'\n"),
        ],
        "python3 main.py",
        &root,
    );
    // Started from another directory, as a workload would.
    let out = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .current_dir(t.path())
        .env("TUNEPLANE_JOB_ID", "job-42")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cwd-ok"), "{stdout}");
    assert!(
        stdout.contains("sibling-import-ok yes-it-is job-42"),
        "{stdout}"
    );
}

#[test]
fn runner_forwards_sigterm_to_the_entrypoint() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    extracted(
        &[(
            "wait.sh",
            "trap 'echo got-term; exit 42' TERM\necho ready\nwhile true; do sleep 0.05; done\n",
        )],
        "bash wait.sh",
        &root,
    );
    let mut child = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("runner did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(42));
    assert_eq!(lines.next().unwrap().unwrap(), "got-term");
}

#[test]
fn runner_refuses_a_capsule_without_its_manifest() {
    let t = tempfile::tempdir().unwrap();
    let pex = t.path().join(".tuneplane/runner.pex");
    fs::create_dir_all(pex.parent().unwrap()).unwrap();
    fs::write(&pex, runner_pex()).unwrap();
    let out = Command::new("python3").arg(&pex).output().unwrap();
    assert_eq!(out.status.code(), Some(MISMATCH_EXIT));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("capsule checksum mismatch: cannot read")
            && stderr.contains("manifest.json"),
        "{stderr}"
    );
}

#[test]
fn runner_refuses_a_file_changed_after_the_capsule_was_built_and_runs_nothing() {
    for (change, expect) in [
        ("changed", "main.py: sha256 "),
        ("removed", "main.py: No such file"),
    ] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("capsule");
        extracted(
            &[("main.py", "open('ran', 'w').write('user code ran')\n")],
            "python3 main.py",
            &root,
        );
        if change == "changed" {
            fs::write(root.join("main.py"), "print('tampered')\n").unwrap();
        } else {
            fs::remove_file(root.join("main.py")).unwrap();
        }
        let out = Command::new("python3")
            .arg(root.join(".tuneplane/runner.pex"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(MISMATCH_EXIT), "{change}: {stderr}");
        assert!(
            stderr.contains("capsule checksum mismatch: ")
                && stderr.contains(expect)
                && stderr.contains("nothing was executed"),
            "{change}: {stderr}"
        );
        assert!(!root.join("ran").exists(), "{change}: user code ran");
    }
}

#[test]
fn runner_is_built_reproducibly() {
    let a = build_runner_pex();
    assert!(a.starts_with(b"PK\x03\x04"));
    let names: Vec<String> = {
        let z = zip::ZipArchive::new(Cursor::new(&a)).unwrap();
        z.file_names().map(|n| n.unwrap().into_owned()).collect()
    };
    assert_eq!(names, ["__main__.py"]);
    assert_eq!(build_runner_pex(), a, "two builds give the same bytes");
    assert_eq!(runner_pex(), a.as_slice());
}

/// A stand-in for the API's grant routes and the blob store on 127.0.0.1, answering one request
/// per connection: presign (of uploads that name their size, as the API requires) gives URLs back
/// to itself, or answers `refuse` when set; `PUT /blob/<path>` stores; `complete` records the
/// name, `latest` serves `latest` (or 404). Everything received is in `log`, each upload's named
/// size in `sizes`.
struct FakeApi {
    addr: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    blobs: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>>>,
    sizes: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

impl FakeApi {
    fn start(latest: Option<serde_json::Value>) -> FakeApi {
        FakeApi::start_with(latest, None)
    }

    fn start_with(latest: Option<serde_json::Value>, refuse: Option<u16>) -> FakeApi {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let blobs = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let sizes = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let (l, b, z) = (log.clone(), blobs.clone(), sizes.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { break };
                let mut reader = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap_or("").to_owned(),
                    parts.next().unwrap_or("").to_owned(),
                );
                let mut length = 0usize;
                let mut auth = String::new();
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap_or(0);
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    let lower = h.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("authorization:") {
                        auth = h["authorization:".len()..].trim().to_owned();
                    }
                }
                let mut body = vec![0u8; length];
                reader.read_exact(&mut body).unwrap_or(());
                l.lock().unwrap().push(format!("{method} {path} {auth}"));
                let (status, answer) = if let Some(rest) = path.strip_prefix("/blob/") {
                    if method == "PUT" {
                        b.lock().unwrap().insert(rest.to_owned(), body);
                        (200, Vec::new())
                    } else {
                        match b.lock().unwrap().get(rest) {
                            Some(bytes) => (200, bytes.clone()),
                            None => (404, Vec::new()),
                        }
                    }
                } else if path.ends_with("/grant/presign") {
                    let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let entries = req["paths"].as_array().cloned().unwrap_or_default();
                    // Each upload names its path and size; anything else is a 400, as the API says.
                    let named: Option<Vec<(String, u64)>> = entries
                        .iter()
                        .map(|p| Some((p["path"].as_str()?.to_owned(), p["size"].as_u64()?)))
                        .collect();
                    match (named, refuse) {
                        (_, Some(status)) => (
                            status,
                            b"{\"error\": {\"code\": \"storage_quota_exceeded\"}}".to_vec(),
                        ),
                        (None, None) => (
                            400,
                            b"{\"error\": {\"code\": \"invalid_request\"}}".to_vec(),
                        ),
                        (Some(named), None) => {
                            let urls: Vec<serde_json::Value> = named
                                .iter()
                                .map(|(p, size)| {
                                    z.lock().unwrap().insert(p.clone(), *size);
                                    serde_json::json!({"path": p, "url": format!("http://{addr}/blob/{p}"), "headers": [["content-length", size.to_string()]]})
                                })
                                .collect();
                            (
                                200,
                                serde_json::to_vec(&serde_json::json!({"urls": urls})).unwrap(),
                            )
                        }
                    }
                } else if path.ends_with("/complete") {
                    (200, b"{\"deleted\": []}".to_vec())
                } else if path.ends_with("/grant/checkpoints/latest") {
                    match &latest {
                        Some(v) => (200, serde_json::to_vec(v).unwrap()),
                        None => (404, b"{}".to_vec()),
                    }
                } else {
                    (404, b"{}".to_vec())
                };
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    answer.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(&answer);
            }
        });
        FakeApi {
            addr,
            log,
            blobs,
            sizes,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[test]
fn the_runner_uploads_complete_checkpoints_and_outputs_only_and_never_a_partial_checkpoint() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    let script = "import os\n\
ck = os.environ['TUNEPLANE_CHECKPOINT_DIR']\n\
os.makedirs(os.path.join(ck, 'step-1'))\n\
open(os.path.join(ck, 'step-1', 'w.bin'), 'w').write('one')\n\
open(os.path.join(ck, 'step-1', '.complete'), 'w').close()\n\
os.makedirs(os.path.join(ck, 'step-2', 'sub'))\n\
open(os.path.join(ck, 'step-2', 'sub', 'w.bin'), 'w').write('half-written')\n\
open(os.path.join(os.environ['TUNEPLANE_OUTPUT_DIR'], 'model.txt'), 'w').write('model')\n\
print('resume', os.environ.get('TUNEPLANE_RESUME_FROM'), 'attempt', os.environ['TUNEPLANE_ATTEMPT'])\n\
print('grant visible', 'TUNEPLANE_GRANT' in os.environ)\n";
    extracted(&[("main.py", script)], "python3 main.py", &root);
    let api = FakeApi::start(None);
    let out = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .env("TUNEPLANE_JOB_ID", "job-1")
        .env("TUNEPLANE_API_URL", format!("http://{}", api.addr))
        .env("TUNEPLANE_GRANT", "tpg1.1.abc")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // Attempt 1: nothing to resume; the grant stays the runner's.
    assert!(stdout.contains("resume None attempt 1"), "{stdout}");
    assert!(stdout.contains("grant visible False"), "{stdout}");
    let blobs = api.blobs.lock().unwrap().clone();
    assert_eq!(
        blobs.keys().cloned().collect::<Vec<_>>(),
        ["checkpoints/step-1/w.bin", "outputs/model.txt"],
        "{stderr}"
    );
    // Every upload named its size, the size of what it then sent.
    let sizes = api.sizes.lock().unwrap().clone();
    let sent: std::collections::BTreeMap<String, u64> = blobs
        .iter()
        .map(|(k, v)| (k.clone(), v.len() as u64))
        .collect();
    assert_eq!(sizes, sent);
    let requests = api.requests();
    assert!(
        requests.iter().any(|r| r.starts_with(
            "POST /v1/jobs/job-1/grant/checkpoints/step-1/complete Bearer tpg1.1.abc"
        )),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.contains("step-2")),
        "a checkpoint without .complete was touched: {requests:?}"
    );
    assert!(
        stderr.contains("checkpoint step-1 uploaded (1 files"),
        "{stderr}"
    );
}

#[test]
fn attempt_two_resumes_from_the_newest_checkpoint_before_the_entrypoint_starts() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    let script = "import os\n\
r = os.environ['TUNEPLANE_RESUME_FROM']\n\
print('attempt', os.environ['TUNEPLANE_ATTEMPT'], 'resumes', open(os.path.join(r, 'sub', 'state.json')).read(), os.path.isfile(os.path.join(r, '.complete')))\n";
    extracted(&[("main.py", script)], "python3 main.py", &root);
    let api = FakeApi::start(None);
    let url = format!("http://{}/blob/checkpoints/step-7/sub/state.json", api.addr);
    api.blobs.lock().unwrap().insert(
        "checkpoints/step-7/sub/state.json".into(),
        b"{\"step\": 7}".to_vec(),
    );
    // A second server answers `latest` with that file.
    let latest = FakeApi::start(Some(serde_json::json!({
        "name": "step-7", "attempt": 1, "completed_at_ms": 1,
        "files": [{"path": "sub/state.json", "size": 11, "url": url}],
    })));
    let out = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .env("TUNEPLANE_JOB_ID", "job-1")
        .env("TUNEPLANE_ATTEMPT", "2")
        .env("TUNEPLANE_API_URL", format!("http://{}", latest.addr))
        .env("TUNEPLANE_GRANT", "tpg1.2.abc")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("attempt 2 resumes {\"step\": 7} True"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("resuming from checkpoint step-7 (written by attempt 1"),
        "{stderr}"
    );
    // A size that does not match ends the attempt before the entrypoint runs.
    let short = FakeApi::start(Some(serde_json::json!({
        "name": "step-7", "attempt": 1, "completed_at_ms": 1,
        "files": [{"path": "sub/state.json", "size": 99, "url": format!("http://{}/blob/checkpoints/step-7/sub/state.json", api.addr)}],
    })));
    let out = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .env("TUNEPLANE_ATTEMPT", "2")
        .env("TUNEPLANE_API_URL", format!("http://{}", short.addr))
        .env("TUNEPLANE_GRANT", "tpg1.2.abc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(87));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("resumes"));
}

#[test]
fn a_checkpoint_the_api_refuses_for_its_size_or_quota_is_not_asked_for_again() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    // The checkpoint is complete at once; the entrypoint then runs for a few of the runner's
    // one-second looks.
    let script = "import os, time\n\
ck = os.environ['TUNEPLANE_CHECKPOINT_DIR']\n\
os.makedirs(os.path.join(ck, 'step-1'))\n\
open(os.path.join(ck, 'step-1', 'w.bin'), 'w').write('one')\n\
open(os.path.join(ck, 'step-1', '.complete'), 'w').close()\n\
time.sleep(3.5)\n";
    extracted(&[("main.py", script)], "python3 main.py", &root);
    let api = FakeApi::start_with(None, Some(409));
    let out = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .env("TUNEPLANE_JOB_ID", "job-1")
        .env("TUNEPLANE_API_URL", format!("http://{}", api.addr))
        .env("TUNEPLANE_GRANT", "tpg1.1.abc")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("checkpoint step-1 not uploaded: POST presign: 409"),
        "{stderr}"
    );
    let presigns = api
        .requests()
        .iter()
        .filter(|r| r.contains("/grant/presign"))
        .count();
    assert_eq!(presigns, 1, "asked again: {:?}", api.requests());
    assert!(api.blobs.lock().unwrap().is_empty());
}
