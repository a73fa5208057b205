//! Usage on the command line after a run of mixed jobs on the executing dev stack: a CPU job
//! that succeeds, a two-pool GPU RayJob (h200 + l40s) that succeeds and a job that fails on its
//! pre-running deadline. `tuneplane usage -o json --group-by job` must give each job its GPUs ×
//! held seconds (admission to end, read from its own record) within a second, the totals their
//! sum, `-o csv` the same rows, and `tuneplane admin usage` the same totals from the store.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod cli_support;
mod stack_support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use stack_support::{submit_example, wait_until};
use tuneplane::dev::Backend;
use tuneplane_core::job::{JobRecord, JobState};

/// GPUs, CPUs and GiB × seconds the job held, from its record alone: every attempt from its
/// admission to its end.
fn held(job: &JobRecord) -> (f64, f64) {
    let gpus: u32 = job
        .spec
        .pools
        .iter()
        .map(|p| p.nodes * p.gpus_per_node)
        .sum();
    let cpus: f64 = job
        .spec
        .pools
        .iter()
        .map(|p| f64::from(p.nodes) * p.cpus)
        .sum();
    let mut secs = 0.0;
    for a in &job.attempts {
        if let Some(from) = a.admitted_at_ms {
            secs += (a.finished_at_ms - from) as f64 / 1000.0;
        }
    }
    if let (Some(from), Some(to)) = (job.admitted_at_ms, job.finished_at_ms) {
        secs += (to - from) as f64 / 1000.0;
    }
    (f64::from(gpus) * secs, cpus * secs)
}

async fn usage_cli(url: &str, key: &str, args: &[&str]) -> std::process::Output {
    cli_support::client(url, key, "usage", args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_per_job_equals_gpus_times_held_seconds_and_the_totals_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let submitted = [
        submit_example(&api, "hello-cpu").await,
        submit_example(&api, "ray-multipool").await,
        submit_example(&api, "bad-image").await,
    ];
    let mut jobs = BTreeMap::new();
    for s in &submitted {
        let j = wait_until(&api, &s.id, 120, "terminal", |j| j.state.is_terminal()).await;
        jobs.insert(j.id.clone(), j);
    }
    let states: Vec<JobState> = submitted.iter().map(|s| jobs[&s.id].state).collect();
    assert_eq!(
        states,
        [JobState::Succeeded, JobState::Succeeded, JobState::Failed]
    );

    let (url, key) = (stack.api_url.clone(), stack.api_key.clone());
    let out = usage_cli(
        &url,
        &key,
        &["-o", "json", "--group-by", "job", "--since", "1h"],
    )
    .await;
    assert!(out.status.success(), "{}", cli_support::text(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for row in body["rows"].as_array().unwrap() {
        let e = got
            .entry(row["job_id"].as_str().unwrap().to_owned())
            .or_default();
        e.0 += row["gpu_seconds"].as_f64().unwrap();
        e.1 += row["cpu_seconds"].as_f64().unwrap();
    }
    let mut total_gpu = 0.0;
    for (id, job) in &jobs {
        let (gpu, cpu) = held(job);
        let (g, c) = got.get(id.as_str()).copied().unwrap_or_default();
        let gpus: u32 = job
            .spec
            .pools
            .iter()
            .map(|p| p.nodes * p.gpus_per_node)
            .sum();
        // Within one second of the job's GPUs (and CPUs) per job.
        assert!(
            (g - gpu).abs() <= f64::from(gpus),
            "{id}: {g} GPU-s reported, {gpu} held"
        );
        let cpus: f64 = job
            .spec
            .pools
            .iter()
            .map(|p| f64::from(p.nodes) * p.cpus)
            .sum();
        assert!(
            (c - cpu).abs() <= cpus,
            "{id}: {c} CPU-s reported, {cpu} held"
        );
        assert!(c > 0.0, "{id} held CPUs for a while");
        total_gpu += gpu;
    }
    assert!(total_gpu > 0.0, "the RayJob held GPUs");
    let reported = body["totals"]["gpu_seconds"].as_f64().unwrap();
    assert!(
        (reported - total_gpu).abs() <= 20.0,
        "{reported} vs {total_gpu}"
    );
    // The RayJob's two series are separate rows.
    let series: Vec<&str> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["job_id"] == submitted[1].id.as_str())
        .map(|r| r["series"].as_str().unwrap())
        .collect();
    assert_eq!(series, ["h200", "l40s"]);

    // CSV: a header, then one line per row of the same report.
    let csv = usage_cli(
        &url,
        &key,
        &["-o", "csv", "--group-by", "job", "--since", "1h"],
    )
    .await;
    let text = cli_support::text(&csv.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "tenant,job,series,gpu-hours,cpu-hours,gib-hours");
    assert_eq!(lines.len(), 1 + body["rows"].as_array().unwrap().len());
    // A bad window is refused naming the flag.
    let bad = usage_cli(&url, &key, &["--since", "last week"]).await;
    assert!(!bad.status.success());
    assert!(
        cli_support::text(&bad.stderr).contains("from:"),
        "{}",
        cli_support::text(&bad.stderr)
    );

    // The operator's view from the store, once the stack has let go of it: the same totals.
    drop(api);
    drop(stack);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let admin = cli_support::admin(dir.path(), &["usage", "-o", "json", "--since", "1h"]);
    let admin: Value = serde_json::from_str(&cli_support::ok(&admin)).unwrap();
    let admin_total = admin["totals"]["gpu_seconds"].as_f64().unwrap();
    assert!(
        (admin_total - total_gpu).abs() <= 20.0,
        "{admin_total} vs {total_gpu}"
    );
}
