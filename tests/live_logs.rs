//! Live logs end to end: the `tuneplane` binary follows a job that prints a line a second on the
//! whole stack (API, embedded stores, kubesim in execution mode, reconciler): its lines appear
//! while the job is RUNNING, and once it ended the output is whole, in order, each line once; a
//! plain `tuneplane logs` (and `status`) of a running job shows its output up to now.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod live_support;
mod stack_support;

use live_support::{cli, expected, job_dir, ticks_of};
use serde_json::{Value, json};
use stack_support::{examples, submit_folder, wait_until};
use tuneplane::dev::Backend;
use tuneplane_core::job::{JobRecord, JobState};

const TICKS: usize = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_follow_shows_running_output_then_all_of_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, &dir.path().join("data")).await;
    let job = submit_folder(&api, &job_dir(dir.path(), TICKS)).await;

    // `tuneplane logs -f` from submission on; each line with when it arrived.
    let mut child = cli(&stack)
        .args(["logs", "-f", &job.id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });

    // Watch the job's state beside it, bounded: 25 ticks take 25 s; allow 150 s in all.
    let started = Instant::now();
    let mut running_since: Option<Instant> = None;
    let mut seen_while_running: Vec<String> = Vec::new();
    let mut all: Vec<(Instant, String)> = Vec::new();
    let end = loop {
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "job {} did not end in time",
            job.id
        );
        let now: JobRecord = api.get(&format!("/jobs/{}", job.id)).await.unwrap();
        while let Ok(line) = rx.try_recv() {
            if now.state == JobState::Running {
                seen_while_running.push(line.1.clone());
            }
            all.push(line);
        }
        if now.state == JobState::Running && running_since.is_none() {
            running_since = Some(Instant::now());
        }
        if now.state.is_terminal() {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");
    let status = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    reader.join().unwrap();
    all.extend(rx.try_iter());
    assert!(
        status.status.success(),
        "logs -f exit {:?}: {}",
        status.status.code(),
        String::from_utf8_lossy(&status.stderr)
    );

    // Lines were printed while the job was still RUNNING ...
    let live = ticks_of(&seen_while_running.join("\n"));
    assert!(
        live.len() >= 5,
        "only {} tick lines arrived while the job ran: {live:?}",
        live.len()
    );
    // ... and in the end every line, in order, once.
    let printed: Vec<String> = all.iter().map(|(_, l)| l.clone()).collect();
    assert_eq!(ticks_of(&printed.join("\n")), expected(TICKS));
    if let (Some(run), Some((first, _))) = (
        running_since,
        all.iter().find(|(_, l)| l.starts_with("tick 1")),
    ) {
        eprintln!(
            "first line printed {:.1} s after the job was seen RUNNING; {} of {TICKS} lines before it ended",
            first.saturating_duration_since(run).as_secs_f64(),
            live.len()
        );
    }

    // After the end: the archive, whole; --tail, --container; index.json only as JSON.
    let id = job.id.clone();
    let stack_cli = |args: &[&str]| {
        let out = cli(&stack).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let whole = stack_cli(&["logs", &id]);
    assert_eq!(ticks_of(&whole), expected(TICKS));
    assert!(!whole.contains("index.json"), "{whole}");
    let job_only = stack_cli(&["logs", &id, "--container", "job"]);
    assert_eq!(ticks_of(&job_only), expected(TICKS));
    let body = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with("==> "))
            .map(str::to_owned)
            .collect()
    };
    let tail = stack_cli(&["logs", &id, "--tail", "3", "--container", "job"]);
    let all_lines = body(&job_only);
    assert_eq!(body(&tail), all_lines[all_lines.len() - 3..].to_vec());
    let none = stack_cli(&["logs", &id, "--pod", "no-such-pod"]);
    assert!(ticks_of(&none).is_empty(), "{none}");
    let as_json: Value = serde_json::from_str(&stack_cli(&["logs", &id, "-o", "json"])).unwrap();
    assert!(as_json["index.json"].is_string(), "{as_json}");

    // The archive holds everything now: the live segments (there were some, the lines above
    // arrived while the job ran) and their list are gone from the blob store.
    let job_blobs = dir.path().join("data/blobs/data/logs").join(id.as_str());
    assert!(
        job_blobs.join("logs.tar.gz").is_file(),
        "{}",
        job_blobs.display()
    );
    let live_dir = job_blobs.join("live");
    let left: Vec<_> = walk(&live_dir);
    assert!(
        left.is_empty(),
        "live segments left after the archive: {left:?}"
    );

    // A closed stdout pipe ends `events` quietly.
    let mut events = cli(&stack)
        .args(["events", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(events.stdout.take());
    let out = events.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submit_wait_streams_the_main_output_and_dry_run_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, &dir.path().join("data")).await;
    let job = job_dir(dir.path(), 8);
    let run = |extra: &[&str]| {
        let mut c = cli(&stack);
        c.args(["submit", job.to_str().unwrap(), "--wait"])
            .args(extra);
        c
    };
    let out = tokio::task::spawn_blocking({
        let mut c = run(&[]);
        move || c.output().unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ticks_of(&text), expected(8), "{text}");
    assert!(
        !text.contains("==> "),
        "main output only, no headers: {text}"
    );

    let out = tokio::task::spawn_blocking({
        let mut c = run(&["--quiet"]);
        move || c.output().unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(ticks_of(&text).is_empty(), "--quiet printed output: {text}");

    // A failed entrypoint's exit status is in the record, as a number.
    let failing = dir.path().join("fails");
    std::fs::create_dir_all(&failing).unwrap();
    std::fs::write(
        failing.join("tuneplane.yaml"),
        std::fs::read_to_string(job.join("tuneplane.yaml"))
            .unwrap()
            .replace("python3 tick.py", "python3 fail.py"),
    )
    .unwrap();
    std::fs::write(failing.join("fail.py"), "import sys\nsys.exit(7)\n").unwrap();
    let submitted = submit_folder(&api, &failing).await;
    let ended = wait_until(&api, &submitted.id, 120, "terminal", |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(ended.state, JobState::Failed, "{ended:?}");
    assert_eq!(
        ended.failure.as_ref().and_then(|f| f.exit_code),
        Some(7),
        "{ended:?}"
    );
    let raw: Value = api.get(&format!("/jobs/{}", submitted.id)).await.unwrap();
    assert_eq!(raw["failure"]["exit_code"], json!(7), "{raw}");

    // `submit --dry-run` and `validate --api` check against the live capacity and send nothing.
    let count = |v: Value| v["jobs"].as_array().map_or(0, Vec::len);
    let before = count(api.get("/jobs?limit=1000").await.unwrap());
    let too_big = examples().join("too-big");
    let run_cli = |args: Vec<String>| {
        let mut c = cli(&stack);
        c.args(args);
        async move {
            tokio::task::spawn_blocking(move || c.output().unwrap())
                .await
                .unwrap()
        }
    };
    let out = run_cli(vec![
        "submit".into(),
        too_big.display().to_string(),
        "--dry-run".into(),
    ])
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("largest h200 node has 8") && err.contains("nothing was sent"),
        "{err}"
    );
    let out = run_cli(vec![
        "validate".into(),
        too_big.join("tuneplane.yaml").display().to_string(),
        "--api".into(),
        stack.api_url.clone(),
    ])
    .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("largest h200 node has 8"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_cli(vec![
        "submit".into(),
        examples().join("hello-cpu").display().to_string(),
        "--dry-run".into(),
    ])
    .await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("fits the fleet's live capacity") && text.contains("nothing was submitted"),
        "{text}"
    );
    assert_eq!(count(api.get("/jobs?limit=1000").await.unwrap()), before);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_look_at_a_running_job_shows_its_output_up_to_now() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, &dir.path().join("data")).await;
    let config = tuneplane_kubesim::testbed::admin_config(&stack.kubeconfig)
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    live_support::plain_looks_show_the_output_up_to_now(&stack, &api, &client, dir.path()).await;
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_look_at_a_silent_running_job_is_answered_with_nothing_new() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, &dir.path().join("data")).await;
    let job_dir = dir.path().join("quiet");
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::write(
        job_dir.join("tuneplane.yaml"),
        std::fs::read_to_string(live_support::job_dir(dir.path(), 1).join("tuneplane.yaml"))
            .unwrap()
            .replace("python3 tick.py", "python3 quiet.py"),
    )
    .unwrap();
    std::fs::write(
        job_dir.join("quiet.py"),
        "import time\nprint('ready', flush=True)\ntime.sleep(120)\n",
    )
    .unwrap();
    let job = submit_folder(&api, &job_dir).await;
    let running = wait_until(&api, &job.id, 120, "RUNNING", |j| {
        j.state == JobState::Running
    })
    .await;
    let config = tuneplane_kubesim::testbed::admin_config(&stack.kubeconfig)
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let started = Instant::now();
    while !live_support::log_of(&client, &running.spec.namespace, &job.id)
        .await
        .contains("ready")
    {
        assert!(started.elapsed() < Duration::from_secs(60), "never ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The first look ships "ready"; the second finds nothing new, and is answered all the same
    // (the reconciler writes the answer to the segment list), not left to the API's wait.
    for look in 1..=2 {
        let (stdout, stderr, _) = live_support::run(&stack, &["logs", &job.id]).await;
        assert!(stderr.contains("up to now"), "look {look}: {stderr}");
        assert_eq!(
            stdout.lines().filter(|l| *l == "ready").count(),
            1,
            "look {look}: {stdout}"
        );
        // Past the second in which looks share one want.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    stack_support::stop(&api, &job.id).await;
    wait_until(&api, &job.id, 120, "terminal", |j| j.state.is_terminal()).await;
    stack.shutdown().await;
}

/// Every file under `dir` (none when it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
