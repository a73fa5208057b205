//! What the live-logs tests share on either tier: a job folder that prints `tick N` once a
//! second, the `tuneplane` binary pointed at a stack, and the check that a plain look at a job
//! running for 20 s shows its output up to now (issue 32).

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api as KubeApi, ListParams, LogParams};
use kube::{Client, ResourceExt};
use tuneplane::client::Api;
use tuneplane::dev::Stack;
use tuneplane_core::job::{JobRecord, JobState};

/// A job folder whose job prints `tick 1` .. `tick <ticks>`, one a second.
pub fn job_dir(dir: &Path, ticks: usize) -> PathBuf {
    let job = dir.join(format!("ticker-{ticks}"));
    std::fs::create_dir_all(&job).unwrap();
    std::fs::write(
        job.join("tuneplane.yaml"),
        "name: ticker\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 tick.py\n\
         pools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n\
         deadlines: {pre_running_seconds: 120, run_seconds: 300}\n",
    )
    .unwrap();
    std::fs::write(
        job.join("tick.py"),
        format!(
            "import time\nfor i in range(1, {}):\n    print('tick', i, flush=True)\n    time.sleep(1)\n",
            ticks + 1
        ),
    )
    .unwrap();
    job
}

/// The `tuneplane` binary with `stack`'s API and key.
pub fn cli(stack: &Stack) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tuneplane"));
    c.env("TUNEPLANE_API", &stack.api_url)
        .env("TUNEPLANE_API_KEY", &stack.api_key)
        .env("NO_COLOR", "1");
    c
}

/// The `tick N` lines of `text`.
pub fn ticks_of(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("tick "))
        .map(str::to_owned)
        .collect()
}

/// The numbers of the `tick N` lines of `text`.
pub fn numbers_of(text: &str) -> Vec<usize> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("tick ")?.trim().parse().ok())
        .collect()
}

/// `tick 1` .. `tick n`.
pub fn expected(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("tick {i}")).collect()
}

/// The last lines of job `id`'s pod's `job` container, read from the API server (the
/// kubelet's log).
pub async fn log_of(client: &Client, namespace: &str, id: &str) -> String {
    let pods: KubeApi<Pod> = KubeApi::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("tuneplane.io/job-id={id}")))
        .await
        .unwrap();
    let pod = list.items.first().expect("the job's pod");
    let params = LogParams {
        container: Some("job".into()),
        tail_lines: Some(3),
        ..LogParams::default()
    };
    pods.logs(&pod.name_any(), &params).await.unwrap()
}

/// The newest tick job `id`'s pod has printed.
pub async fn newest_tick(client: &Client, namespace: &str, id: &str) -> usize {
    numbers_of(&log_of(client, namespace, id).await)
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// Runs `tuneplane <args>` (off the async runtime); stdout, stderr and how long it took.
pub async fn run(stack: &Stack, args: &[&str]) -> (String, String, Duration) {
    let mut c = cli(stack);
    c.args(args);
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    let took = started.elapsed();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    (stdout, stderr, took)
}

/// Longest a plain look may take (issue 32: "in under 10 s").
pub const LOOK_BOUND: Duration = Duration::from_secs(10);

/// How far behind the newest line a plain look may end (issue 32: "within 10 of the newest").
pub const LINES_BEHIND: usize = 10;

/// The issue-32 scenario on `stack` (its cluster read through `client`): a job printing a line a
/// second, RUNNING for 20 s; three plain `tuneplane logs JOB` a few seconds apart each print, in
/// under 10 s, its lines 1 .. n in order with n within 10 of the newest one the job printed;
/// `status JOB` shows its last lines the same way; `--no-wait` answers with what was shipped
/// (whole lines, in order). The job is stopped at the end.
pub async fn plain_looks_show_the_output_up_to_now(
    stack: &Stack,
    api: &Api,
    client: &Client,
    dir: &Path,
) {
    let job = crate::stack_support::submit_folder(api, &job_dir(dir, 90)).await;
    let running =
        crate::stack_support::wait_until(api, &job.id, 120, "RUNNING", |j: &JobRecord| {
            j.state == JobState::Running
        })
        .await;
    assert_eq!(running.state, JobState::Running);
    let seen_running = Instant::now();
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(seen_running.elapsed())).await;
    let ns = running.spec.namespace.clone();

    for look in 1..=3 {
        let (stdout, stderr, took) = run(stack, &["logs", &job.id]).await;
        let newest = newest_tick(client, &ns, &job.id).await;
        let printed = numbers_of(&stdout);
        let last = printed.last().copied().unwrap_or(0);
        eprintln!(
            "look {look}: {} lines, the last tick {last}, the job's newest {newest}, in {:.1} s",
            printed.len(),
            took.as_secs_f64()
        );
        assert!(took < LOOK_BOUND, "look {look} took {took:?}: {stderr}");
        assert_eq!(
            printed,
            (1..=last).collect::<Vec<_>>(),
            "look {look}: the output whole, in order, once: {stdout}"
        );
        assert!(
            last + LINES_BEHIND >= newest,
            "look {look}: printed up to tick {last}, the job had printed tick {newest}: {stderr}"
        );
        assert!(stderr.contains("up to now"), "look {look}: {stderr}");
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    let (stdout, stderr, took) = run(stack, &["status", &job.id]).await;
    let newest = newest_tick(client, &ns, &job.id).await;
    let shown = numbers_of(&stdout);
    assert!(took < LOOK_BOUND, "status took {took:?}: {stderr}");
    assert!(
        stdout.contains("last 5 lines, up to now"),
        "status of a running job: {stdout}"
    );
    assert_eq!(shown.len(), 5, "{stdout}");
    let last = shown.last().copied().unwrap_or(0);
    assert_eq!(shown, (last - 4..=last).collect::<Vec<_>>(), "{stdout}");
    assert!(
        last + LINES_BEHIND >= newest,
        "status showed up to tick {last}, the job had printed tick {newest}: {stdout}"
    );

    let (stdout, stderr, _) = run(stack, &["logs", &job.id, "--no-wait"]).await;
    let printed = numbers_of(&stdout);
    // The looks above had the output shipped: it is there at once, whole and in order.
    assert!(!printed.is_empty(), "{stdout}\n{stderr}");
    assert_eq!(printed, (1..=printed.len()).collect::<Vec<_>>(), "{stdout}");
    assert!(stderr.contains("shipped so far"), "{stderr}");

    crate::stack_support::stop(api, &job.id).await;
    let ended =
        crate::stack_support::wait_until(api, &job.id, 120, "terminal", |j| j.state.is_terminal())
            .await;
    assert_eq!(ended.state, JobState::Stopped, "{ended:?}");
}
