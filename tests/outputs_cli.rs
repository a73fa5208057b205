//! Failures, attempts and outputs on the command line, as a user runs them against the API (the
//! functions router and the blob server on one loopback port over embedded stores): `status`
//! shows the attempt, the failure's cause and evidence and the earlier attempts; `logs
//! --attempt N` prints an earlier attempt's archive; `outputs` lists outputs and checkpoints and
//! `--get` downloads a file, a folder or everything, never outside `--dir` and never another
//! tenant's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tuneplane_core::job::{Attempt, Failure, FailureReason, JobRecord, JobState};
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_core::submit::{SCOPE_JOBS_READ, new_api_key};
use tuneplane_functions::config::{Backend, Config};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The API and its blob server on a loopback port over embedded stores in `dir`.
struct Served {
    url: String,
    /// `jobs:read` keys of tenants `team-a` and `team-b`.
    key_a: String,
    key_b: String,
    jobs: Arc<dyn JobStore>,
    blobs: Arc<dyn BlobStore>,
}

async fn serve(dir: &Path) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let blob_url = format!("{url}/blobs");
    let submit = tuneplane_core::submit::SubmitConfig {
        scratch_dir: dir.join("scratch"),
        ..Default::default()
    };
    std::fs::create_dir_all(&submit.scratch_dir).unwrap();
    let config = Config {
        backend: Backend::Local {
            dir: dir.to_path_buf(),
            blob_secret: "test-secret".into(),
            blob_url: blob_url.clone(),
        },
        submit,
        webhooks: Default::default(),
        event_senders: Default::default(),
        json_logs: false,
        listen: None,
        playground_pod_networks: Vec::new(),
        rate_per_key: None,
        rate_per_source: None,
        grant_key: None,
        console_secret: None,
    };
    let (jobs, blobs) = tuneplane_functions::runtime::stores(&config).await.unwrap();
    let mut keys = Vec::new();
    for tenant in ["team-a", "team-b"] {
        let (secret, record) = new_api_key(
            tuneplane_functions::runtime::random_bytes(),
            &tenant.parse().unwrap(),
            vec![SCOPE_JOBS_READ.to_owned()],
            "test",
            0,
        );
        jobs.put_api_key(&record).await.unwrap();
        keys.push(secret);
    }
    let state = tuneplane_functions::runtime::state_with(&config, jobs.clone(), blobs.clone());
    // The same folder the API's blob store signs for, served as `tuneplane dev` serves it.
    let fs =
        tuneplane_stores::FsBlobStore::open(dir.join("blobs"), "test-secret", blob_url).unwrap();
    let app = tuneplane_functions::router(state)
        .nest("/blobs", tuneplane_stores::blob_server::router(fs, 1 << 30));
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Served {
        url,
        key_b: keys.remove(1),
        key_a: keys.remove(0),
        jobs,
        blobs,
    }
}

/// `tuneplane ARGS` against `url` with `key`, in folder `cwd`.
async fn cli(url: &str, key: &str, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tuneplane"));
    cmd.args(args)
        .current_dir(cwd)
        .env("TUNEPLANE_API", url)
        .env("TUNEPLANE_API_KEY", key)
        .env("NO_COLOR", "1");
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the CLI did not finish within 60 s")
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A `logs.tar.gz` holding one log, `pod/main.log`, with `body`.
fn archive(body: &str) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "pod/main.log", body.as_bytes())
        .unwrap();
    b.into_inner().and_then(|g| g.finish()).unwrap()
}

/// Bytes of the model output (not text, a few KiB).
fn weights() -> Vec<u8> {
    (0..5000u32).map(|i| (i * 7 % 251) as u8).collect()
}

/// Job `j-out-1` of team-a: attempt 1 lost its node (archived), attempt 2 was evicted and the
/// job ended FAILED with the infrastructure cause; its outputs and one complete checkpoint.
async fn failed_job_with_outputs(s: &Served) -> JobRecord {
    let spec = "name: trainer\nimage: python:3.12-slim\nentrypoint: python3 train.py\n\
                retries: {infrastructure: 1, application: 1}\n\
                pools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";
    let spec = tuneplane_core::spec::validate(spec, None, &Default::default())
        .unwrap()
        .spec;
    let now = tuneplane_core::clock::now_ms();
    let job = JobRecord::new_queued(
        "j-out-1".parse().unwrap(),
        "team-a".parse().unwrap(),
        spec,
        "ab".repeat(32),
        now - 600_000,
    );
    s.jobs.create_job(&job, None).await.unwrap();
    let mut job = s.jobs.get_job("j-out-1").await.unwrap().unwrap();

    let first_logs = "logs/j-out-1/attempt-1/logs.tar.gz".to_owned();
    s.blobs
        .put(
            &first_logs,
            archive("first attempt: step 1\nfirst attempt: step 2\n"),
        )
        .await
        .unwrap();
    let current_logs = "logs/j-out-1/logs.tar.gz".to_owned();
    s.blobs
        .put(
            &current_logs,
            archive("second attempt: resumed from step 2\n"),
        )
        .await
        .unwrap();
    let mut lost = Failure::new(
        FailureReason::NodeLost,
        "node h200-1 was deleted while the job ran",
    );
    lost.evidence = vec!["node/h200-1: deleted".into()];
    job.attempts.push(Attempt {
        number: 1,
        admitted_at_ms: Some(now - 500_000),
        running_at_ms: Some(now - 490_000),
        finished_at_ms: now - 400_000,
        workload_name: Some("tp-j-out-1-a1".into()),
        logs_key: Some(first_logs),
        placements: Vec::new(),
        failure: lost,
    });
    job.attempt = 2;
    job.state = JobState::Failed;
    job.admitted_at_ms = Some(now - 300_000);
    job.running_at_ms = Some(now - 290_000);
    job.finished_at_ms = Some(now - 100_000);
    let mut evicted = Failure::new(FailureReason::Evicted, "pod tp-j-out-1-a2 was evicted");
    evicted.evidence = vec![
        "pod/tp-j-out-1-a2: DisruptionTarget EvictionByEvictionAPI: Eviction API: evicting".into(),
        "node/h200-2: NotReady".into(),
    ];
    job.failure = Some(evicted);
    job.logs_key = Some(current_logs);
    s.jobs.update_job(&job).await.unwrap();

    let out = |p: &str| format!("outputs/team-a/j-out-1/{p}");
    s.blobs
        .put(&out("metrics.json"), b"{\"loss\": 0.1}\n".to_vec())
        .await
        .unwrap();
    s.blobs.put(&out("model/w.bin"), weights()).await.unwrap();
    s.blobs
        .put(&out("model/cfg/a.json"), b"{}".to_vec())
        .await
        .unwrap();
    s.blobs
        .put("checkpoints/team-a/j-out-1/step-20/state.pt", vec![7; 3000])
        .await
        .unwrap();
    tuneplane_core::outputs::complete_checkpoint(
        s.blobs.as_ref(),
        "team-a",
        "j-out-1",
        "step-20",
        1,
        now - 420_000,
        2,
    )
    .await
    .unwrap();
    s.jobs.get_job("j-out-1").await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_attempt_the_cause_its_evidence_and_the_earlier_attempts() {
    let t = tempfile::tempdir().unwrap();
    let s = serve(t.path()).await;
    let job = failed_job_with_outputs(&s).await;
    let out = ok(&cli(&s.url, &s.key_a, t.path(), &["status", &job.id]).await);
    eprintln!("{out}");
    let lines: Vec<&str> = out.lines().collect();
    for expected in [
        "status    FAILED (Evicted)",
        // 1 + retries.infrastructure + retries.application.
        "attempt   2 of up to 3",
        "failure   Evicted: pod tp-j-out-1-a2 was evicted",
        "cause     infrastructure (Evicted)",
        "evidence  pod/tp-j-out-1-a2: DisruptionTarget EvictionByEvictionAPI: Eviction API: evicting",
        "          node/h200-2: NotReady",
        "attempts  1 earlier (their logs: tuneplane logs j-out-1 --attempt N)",
        "          node h200-1 was deleted while the job ran",
        "          evidence: node/h200-1: deleted",
    ] {
        assert!(
            lines.contains(&expected),
            "{expected:?} missing from:\n{out}"
        );
    }
    let first = lines
        .iter()
        .find(|l| l.starts_with("  #1 "))
        .unwrap_or_else(|| panic!("no line for attempt 1 in:\n{out}"));
    assert!(
        first.contains("NodeLost (infrastructure), ended ") && first.ends_with("ago (ran 1m30s)"),
        "{first}"
    );

    // As JSON: the record, attempts and causes included.
    let json = ok(&cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["status", &job.id, "-o", "json"],
    )
    .await);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["attempt"], 2);
    assert_eq!(v["attempts"][0]["failure"]["cause"], "infrastructure");
    assert_eq!(v["failure"]["evidence"][1], "node/h200-2: NotReady");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_prints_the_current_attempt_or_an_earlier_one_asked_for() {
    let t = tempfile::tempdir().unwrap();
    let s = serve(t.path()).await;
    let job = failed_job_with_outputs(&s).await;
    let current = ok(&cli(&s.url, &s.key_a, t.path(), &["logs", &job.id]).await);
    assert!(
        current.contains("second attempt: resumed from step 2"),
        "{current}"
    );
    assert!(!current.contains("first attempt"), "{current}");

    let first = ok(&cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["logs", &job.id, "--attempt", "1"],
    )
    .await);
    assert!(first.contains("==> pod/main <=="), "{first}");
    assert!(first.contains("first attempt: step 2"), "{first}");
    assert!(!first.contains("second attempt"), "{first}");
    let tail = ok(&cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["logs", &job.id, "--attempt", "1", "--tail", "1"],
    )
    .await);
    assert!(
        tail.contains("first attempt: step 2") && !tail.contains("step 1"),
        "{tail}"
    );

    let missing = cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["logs", &job.id, "--attempt", "5"],
    )
    .await;
    assert_eq!(missing.status.code(), Some(1));
    let err = text(&missing.stderr);
    assert!(
        err.contains("has no attempt 5; its attempts are 1 to 2"),
        "{err}"
    );
    let zero = cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["logs", &job.id, "--attempt", "0"],
    )
    .await;
    assert!(!zero.status.success());
    let followed = cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["logs", &job.id, "-f", "--attempt", "1"],
    )
    .await;
    assert!(!followed.status.success(), "an archive is not followed");

    // Another tenant's job is not there, whatever the attempt.
    let other = cli(
        &s.url,
        &s.key_b,
        t.path(),
        &["logs", &job.id, "--attempt", "1"],
    )
    .await;
    assert_eq!(other.status.code(), Some(1));
    assert!(
        text(&other.stderr).contains("404"),
        "{}",
        text(&other.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_lists_files_and_checkpoints_and_get_downloads_a_file_a_folder_or_all() {
    let t = tempfile::tempdir().unwrap();
    let s = serve(t.path()).await;
    let job = failed_job_with_outputs(&s).await;
    let work = t.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let run = |key: &str, args: &[&str]| {
        let mut all = vec!["outputs", job.id.as_str()];
        all.extend_from_slice(args);
        let (url, key, work) = (s.url.clone(), key.to_owned(), work.clone());
        let all: Vec<String> = all.iter().map(|a| a.to_string()).collect();
        async move {
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            cli(&url, &key, &work, &all).await
        }
    };

    let listing = ok(&run(&s.key_a, &[]).await);
    eprintln!("{listing}");
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["PATH", "SIZE"]
    );
    for (path, size) in [
        ("metrics.json", "14 B"),
        ("model/cfg/a.json", "2 B"),
        ("model/w.bin", "4.9 KiB"),
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")
                    == format!("{path} {size}")),
            "{path} {size} missing from:\n{listing}"
        );
    }
    assert!(listing.contains("3 outputs, 4.9 KiB"), "{listing}");
    let checkpoint = lines
        .iter()
        .skip_while(|l| !l.starts_with("CHECKPOINT"))
        .nth(1)
        .unwrap_or_else(|| panic!("no checkpoint table in:\n{listing}"));
    let cells: Vec<&str> = checkpoint.split_whitespace().collect();
    assert_eq!(cells[0..2], ["step-20", "1"], "{checkpoint}");
    assert!(
        checkpoint.contains("ago") && checkpoint.ends_with("2.9 KiB"),
        "{checkpoint}"
    );

    let json: Value = serde_json::from_str(&ok(&run(&s.key_a, &["-o", "json"]).await)).unwrap();
    assert_eq!(json["outputs"].as_array().map(Vec::len), Some(3));
    assert_eq!(json["checkpoints"][0]["files"], 1);

    // A folder: everything under it, at its path under --dir; nothing else.
    let into = work.join("dl");
    let got = run(
        &s.key_a,
        &["--get", "model/", "--dir", into.to_str().unwrap()],
    )
    .await;
    let summary = ok(&got);
    eprintln!("{}{summary}", text(&got.stderr));
    assert!(summary.contains("2 files"), "{summary}");
    let progress = text(&got.stderr);
    assert!(
        progress.lines().any(|l| l == "model/w.bin  4.9 KiB"),
        "{progress}"
    );
    assert_eq!(std::fs::read(into.join("model/w.bin")).unwrap(), weights());
    assert_eq!(std::fs::read(into.join("model/cfg/a.json")).unwrap(), b"{}");
    assert!(!into.join("metrics.json").exists());
    let leftovers: Vec<_> = std::fs::read_dir(into.join("model"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // One file, into the current folder by default; then everything.
    ok(&run(&s.key_a, &["--get", "metrics.json"]).await);
    assert_eq!(
        std::fs::read(work.join("metrics.json")).unwrap(),
        b"{\"loss\": 0.1}\n"
    );
    let all = work.join("all");
    let json = ok(&run(
        &s.key_a,
        &["--get", ".", "--dir", all.to_str().unwrap(), "-o", "json"],
    )
    .await);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["downloaded"].as_array().map(Vec::len), Some(3), "{json}");
    assert!(all.join("model/w.bin").is_file() && all.join("metrics.json").is_file());

    // Nothing matches: exit 1 and the list of what exists; a prefix of a name is no folder.
    let none = run(&s.key_a, &["--get", "mod"]).await;
    assert_eq!(none.status.code(), Some(1));
    let err = text(&none.stderr);
    eprintln!("{err}");
    assert!(err.contains("no output is \"mod\""), "{err}");
    assert!(
        err.contains("model/w.bin") && err.contains("metrics.json"),
        "{err}"
    );

    // A symbolic link in the folder is not followed out of it.
    let trap = work.join("trap");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&trap).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, trap.join("model")).unwrap();
    let refused = run(
        &s.key_a,
        &["--get", "model", "--dir", trap.to_str().unwrap()],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("symbolic link"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

    // Another tenant sees nothing of it and downloads nothing.
    let other = run(&s.key_b, &[]).await;
    assert_eq!(other.status.code(), Some(1));
    assert!(
        text(&other.stderr).contains("404"),
        "{}",
        text(&other.stderr)
    );
    let theirs = work.join("theirs");
    let other = run(&s.key_b, &["--get", ".", "--dir", theirs.to_str().unwrap()]).await;
    assert_eq!(other.status.code(), Some(1));
    assert!(!theirs.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_outputs_says_so() {
    let t = tempfile::tempdir().unwrap();
    let s = serve(t.path()).await;
    let spec = "name: idle\nimage: python:3.12-slim\nentrypoint: python3 a.py\n\
                pools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";
    let spec = tuneplane_core::spec::validate(spec, None, &Default::default())
        .unwrap()
        .spec;
    let job = JobRecord::new_queued(
        "j-idle".parse().unwrap(),
        "team-a".parse().unwrap(),
        spec,
        "cd".repeat(32),
        0,
    );
    s.jobs.create_job(&job, None).await.unwrap();
    let listing = ok(&cli(&s.url, &s.key_a, t.path(), &["outputs", "j-idle"]).await);
    assert!(
        listing.contains("job j-idle is QUEUED: no outputs yet"),
        "{listing}"
    );
    assert!(listing.contains("no complete checkpoints"), "{listing}");
    let get = cli(
        &s.url,
        &s.key_a,
        t.path(),
        &["outputs", "j-idle", "--get", "."],
    )
    .await;
    assert_eq!(get.status.code(), Some(1));
    assert!(
        text(&get.stderr).contains("no outputs yet"),
        "{}",
        text(&get.stderr)
    );
    // A status of a first attempt says nothing of attempts.
    let status = ok(&cli(&s.url, &s.key_a, t.path(), &["status", "j-idle"]).await);
    assert!(!status.contains("attempt"), "{status}");
}

/// `outputs JOB --checkpoints` lists the complete checkpoints; `--get latest` (or a name)
/// downloads that checkpoint's files into DIR/NAME/; a name that does not exist is refused with
/// the ones that do; another tenant cannot read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_checkpoints_lists_and_downloads_a_checkpoint() {
    let t = tempfile::tempdir().unwrap();
    let s = serve(t.path()).await;
    let job = failed_job_with_outputs(&s).await;
    let work = t.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let listing = ok(&cli(
        &s.url,
        &s.key_a,
        &work,
        &["outputs", &job.id, "--checkpoints"],
    )
    .await);
    assert!(
        listing
            .lines()
            .next()
            .unwrap_or_default()
            .starts_with("CHECKPOINT"),
        "{listing}"
    );
    assert!(
        !listing.contains("PATH"),
        "outputs are not listed: {listing}"
    );
    assert!(listing.contains("step-20"), "{listing}");
    for want in ["latest", "step-20"] {
        let dir = work.join(format!("got-{want}"));
        let got = ok(&cli(
            &s.url,
            &s.key_a,
            &work,
            &[
                "outputs",
                &job.id,
                "--checkpoints",
                "--get",
                want,
                "--dir",
                dir.to_str().unwrap(),
            ],
        )
        .await);
        assert!(got.contains("checkpoint step-20: 1 file"), "{got}");
        assert_eq!(
            std::fs::read(dir.join("step-20/state.pt")).unwrap(),
            vec![7; 3000]
        );
        assert!(
            !dir.join("step-20/.complete").exists(),
            "the marker is not a file of it"
        );
    }
    let missing = cli(
        &s.url,
        &s.key_a,
        &work,
        &["outputs", &job.id, "--checkpoints", "--get", "step-99"],
    )
    .await;
    assert!(!missing.status.success());
    let err = text(&missing.stderr);
    assert!(
        err.contains("no complete checkpoint \"step-99\"") && err.contains("step-20"),
        "{err}"
    );
    let other = cli(
        &s.url,
        &s.key_b,
        &work,
        &["outputs", &job.id, "--checkpoints", "--get", "latest"],
    )
    .await;
    assert!(!other.status.success(), "team-b read team-a's checkpoint");
}
