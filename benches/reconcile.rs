//! The reconciler at fleet scale, on one machine, with no execution (kubesim simulates the pods).
//!
//! The reconciler runs as a **separate process** (this binary re-executed with `child`), exactly as
//! in production, against kubesim (in the parent) over HTTP on 127.0.0.1 and the embedded job store
//! (the same redb file, opened by both processes) or DynamoDB on the local endpoint. Jobs are
//! written straight into the store, so the figures isolate admission. The child prints its metrics
//! every 100 ms; the parent reads its memory from `/proc/<pid>/status`. Sections:
//!
//! - `capacity`: `Cluster::new` + `Cluster::capacity` over 1,000 Node and 10,000 Pod objects
//!   (the conversion from Kubernetes objects plus `compute_capacity`), in this process.
//! - `admit`: admissions per second from a queue of 5,000 small CPU jobs (target ≥ 500/s).
//! - `aws`: the same against DynamoDB on the local endpoint (needs `AWS_ENDPOINT_URL`, e.g. under
//!   `scripts/with-moto.sh`), with store requests per admitted job; 1,000 jobs by default.
//! - `memory`: the reconciler's RSS with 1,000 nodes, 10,000 pods and 10,000 active jobs
//!   (target < 150 MB), and its pass time in that steady state.
//! - `history`: pass time with 1,000 active jobs, before and after 100,000 terminal jobs are added
//!   to the store (a pass reads the active index only, so it must not grow).
//! - `array`: one array of 5,000 children (the reconciler creates them) admitted, against the 5,000
//!   single jobs of `admit`; then an array of 10,000 children with `parallelism: 10` (9,990 held
//!   back): the steady pass time beside an empty fleet's.
//!
//! Run: `cargo bench --bench reconcile [-- SECTION...]`. Sizes:
//! `TUNEPLANE_BENCH_ADMIT_JOBS`, `TUNEPLANE_BENCH_AWS_JOBS`, `TUNEPLANE_BENCH_TERMINAL_JOBS`,
//! `TUNEPLANE_BENCH_MEMORY_JOBS` (active jobs of `memory`, default 10,000) and
//! `TUNEPLANE_BENCH_MEMORY_NODES` (its 16-CPU nodes, default 1,000; 5,000 nodes and 50,000 jobs is
//! issue 49's fleet-scale pass);
//! `TUNEPLANE_BENCH_HOLD_SECS` keeps `memory`'s steady state that long for a profiler;
//! `TUNEPLANE_BENCH_CHILD_WRAPPER` runs the reconciler process under a profiler (`heaptrack -o F`);
//! `TUNEPLANE_BENCH_REDB_CACHE_MB` sets the reconciler's embedded-store page cache;
//! `TUNEPLANE_BENCH_QPS` (the reconciler's API rate limit in the bench, default 5,000/s; the
//! production default of 20/s would cap admissions at 20/s). Prints figures, asserts none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location
#![allow(missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::json;
use tuneplane_core::constants::DEFAULT_NAMESPACE;
use tuneplane_core::fleet::Fleet;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::store::{BlobStore, JobRecords, JobStore};
use tuneplane_kubesim::{KubeSim, SimConfig};
use tuneplane_reconciler::cluster::Cluster;
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::{Config, Reconciler};
use tuneplane_stores::aws::{RequestCounter, dynamodb_client};
use tuneplane_stores::{DynamoJobStore, EmbeddedJobStore, FsBlobStore};

const SHA: &str = "5f0c6a1b2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccdd0";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cpu_job(i: usize, state: JobState) -> JobRecord {
    let now = tuneplane_core::clock::now_ms();
    let mut job = tuneplane_testkit::records::queued(&format!("j{i:06}"))
        .tenant("bench")
        .capsule(SHA)
        .submitted_at(now)
        .image("python:3.12-slim")
        .deadlines(3600, 86400)
        .spec_field("name", json!("bench"))
        .spec_field("entrypoint", json!("python train.py"))
        .spec_field("env", json!({"EPOCHS": "1"}))
        .spec_field("labels", json!({"team": "bench"}))
        .spec_field("namespace", json!(DEFAULT_NAMESPACE))
        .spec_field("platform_version", json!("0.1.0"))
        .build();
    job.state = state;
    if state.is_terminal() {
        job.admitted_at_ms = Some(now);
        job.running_at_ms = Some(now);
        job.finished_at_ms = Some(now);
    }
    job
}

// ---------------------------------------------------------------------------------------------
// The child: one reconciler process.

/// `child <kube url> embedded:<dir> | dynamo:<table> <qps>`: runs a reconciler and prints
/// `stat <admissions> <passes> <pass seconds sum> <last pass seconds> <store requests>` every 100 ms.
fn child(args: &[String]) {
    let [url, store, qps] = args else {
        panic!("usage: child URL STORE QPS")
    };
    let qps: u32 = qps.parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let counter = RequestCounter::new();
        let scratch = tempfile::tempdir().unwrap();
        let jobs: Arc<dyn JobStore> = if let Some(dir) = store.strip_prefix("embedded:") {
            let cache = std::env::var("TUNEPLANE_BENCH_REDB_CACHE_MB")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(tuneplane_stores::embedded::CACHE_BYTES, |mb| mb << 20);
            Arc::new(EmbeddedJobStore::open_with_cache(Path::new(dir).join("jobs"), cache).unwrap())
        } else if let Some(table) = store.strip_prefix("dynamo:") {
            let sdk = tuneplane_stores::aws::load_config().await;
            Arc::new(DynamoJobStore::new(
                dynamodb_client(&sdk, Some(counter.clone())),
                table,
            ))
        } else {
            panic!("unknown store {store}")
        };
        let blobs: Arc<dyn BlobStore> = Arc::new(
            FsBlobStore::open(
                scratch.path().join("blobs"),
                b"bench".to_vec(),
                "http://127.0.0.1:9/blobs",
            )
            .unwrap(),
        );
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let config = Config {
            namespace: "default".into(),
            identity: "bench".into(),
            pass_interval: Duration::from_secs(1),
            lease_duration: Duration::from_secs(15),
            kube_qps: qps,
            kube_burst: qps,
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            // The `preempt` section preempts jobs that have run a few seconds.
            preemption_min_run: Duration::from_secs(env_usize(
                "TUNEPLANE_BENCH_PREEMPTION_MIN_RUN",
                600,
            ) as u64),
            ..Config::default()
        };
        let metrics = Arc::new(Metrics::default());
        let r = Reconciler::new(config, client, jobs, blobs, metrics.clone())
            .await
            .unwrap();
        let printer = async {
            loop {
                let text = metrics.render();
                let value = |name: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                        .unwrap_or("0")
                        .to_owned()
                };
                let line = format!(
                    "stat {} {} {} {} {} {}",
                    metrics.admissions(),
                    metrics.passes(),
                    value("tuneplane_pass_duration_seconds_sum"),
                    value("tuneplane_last_pass_duration_seconds"),
                    counter.total(),
                    value("tuneplane_preemptions_total{reason=\"priority\"}"),
                );
                let mut out = std::io::stdout().lock();
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return; // the parent went away
                }
                drop(out);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            r = r.run_until(std::future::pending()) => r.unwrap(),
            () = printer => {}
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The parent's view of the child.

#[derive(Debug, Clone, Copy, Default)]
struct Stat {
    at: Option<Instant>,
    admissions: u64,
    passes: u64,
    pass_sum: f64,
    last_pass: f64,
    requests: u64,
    preemptions: u64,
}

struct Proc {
    child: Child,
    stats: Receiver<Stat>,
    last: Stat,
}

impl Proc {
    fn start(url: &str, store: &str, qps: usize) -> Proc {
        Proc::start_with(url, store, qps, &[])
    }

    /// [`Proc::start`] with more environment for the child.
    fn start_with(url: &str, store: &str, qps: usize, env: &[(&str, &str)]) -> Proc {
        // `TUNEPLANE_BENCH_CHILD_WRAPPER` (e.g. `heaptrack -o /tmp/reconciler`) runs the child
        // under a profiler; the memory figures are then the wrapper's, not the reconciler's.
        let exe = std::env::current_exe().unwrap();
        let wrapper = std::env::var("TUNEPLANE_BENCH_CHILD_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut child = match words.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(words).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        child.envs(env.iter().copied());
        // glibc's malloc settings as the reconciler's Deployment sets them
        // (infra/kustomize/base/deployment.yaml); the same variables in the bench's environment
        // override them (e.g. MALLOC_ARENA_MAX=16, glibc's default on 2 cores).
        for (name, value) in [
            ("MALLOC_ARENA_MAX", "1"),
            ("MALLOC_MMAP_THRESHOLD_", "131072"),
            ("MALLOC_TRIM_THRESHOLD_", "131072"),
        ] {
            child.env(name, std::env::var(name).unwrap_or_else(|_| value.into()));
        }
        let mut child = child
            .args(["child", url, store, &qps.to_string()])
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, stats) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() == 7 && f[0] == "stat" {
                    let stat = Stat {
                        at: Some(Instant::now()),
                        admissions: f[1].parse().unwrap_or(0),
                        passes: f[2].parse().unwrap_or(0),
                        pass_sum: f[3].parse().unwrap_or(0.0),
                        last_pass: f[4].parse().unwrap_or(0.0),
                        requests: f[5].parse().unwrap_or(0),
                        preemptions: f[6].parse().unwrap_or(0),
                    };
                    if tx.send(stat).is_err() {
                        return;
                    }
                }
            }
        });
        Proc {
            child,
            stats,
            last: Stat::default(),
        }
    }

    /// Waits (at most `limit`) for a stat satisfying `done`; returns it, or the last one on timeout.
    fn wait(&mut self, limit: Duration, done: impl Fn(&Stat) -> bool) -> (Stat, bool) {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.stats.recv_timeout(left) {
                Ok(s) => {
                    self.last = s;
                    if done(&s) {
                        return (s, true);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return (self.last, false),
                Err(RecvTimeoutError::Disconnected) => panic!("the reconciler process died"),
            }
        }
    }

    /// Drops the stats queued while nobody read them, keeping the newest as `last`.
    fn drain(&mut self) {
        while let Ok(s) = self.stats.try_recv() {
            self.last = s;
        }
    }

    /// Average pass time over the next `window` (seconds per pass, passes). Stats queued before
    /// the call are dropped first: the window starts now, not where the reader last stopped.
    fn pass_time(&mut self, window: Duration) -> (f64, u64) {
        self.drain();
        let (start, _) = self.wait(Duration::from_secs(5), |_| true);
        let (end, _) = self.wait(window, |_| false);
        let passes = end.passes.saturating_sub(start.passes);
        let avg = if passes == 0 {
            end.last_pass
        } else {
            (end.pass_sum - start.pass_sum) / passes as f64
        };
        (avg, passes)
    }

    /// (VmRSS, VmHWM) in MiB.
    fn memory(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn sim(cpu_nodes: usize, cpus: u32) -> KubeSim {
    let fleet = format!(
        "node_groups:\n  - {{name: cpu, count: {cpu_nodes}, cpus: {cpus}, memory_gb: 512}}\n"
    );
    let mut config = SimConfig {
        fleet: Some(Fleet::from_yaml(&fleet).unwrap()),
        tick: Duration::from_millis(100),
        ..SimConfig::default()
    };
    config.scenario.start_delay = Duration::from_millis(50);
    config.scenario.pod_run = None; // pods run until deleted: a steady state
    KubeSim::start(config).await.unwrap()
}

async fn write_jobs(store: &dyn JobStore, from: usize, count: usize, state: JobState) -> f64 {
    let start = Instant::now();
    for i in from..from + count {
        store.create_job(&cpu_job(i, state), None).await.unwrap();
    }
    start.elapsed().as_secs_f64()
}

async fn count_running(store: &dyn JobStore) -> usize {
    let active = store.list_active().await.unwrap();
    active
        .iter()
        .filter(|j| j.state == JobState::Running)
        .count()
}

// ---------------------------------------------------------------------------------------------
// Sections.

fn section_capacity() {
    let series = ["h200", "h100", "l40s", "a10g"];
    let nodes: Vec<Arc<k8s_openapi::api::core::v1::Node>> = (0..1_000)
        .map(|i| {
            Arc::new(serde_json::from_value(json!({
                "metadata": {"name": format!("node-{i:05}"), "labels": {"tuneplane/gpu-series": series[i % 4]}},
                "spec": {},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2048Gi"},
                    "allocatable": {"nvidia.com/gpu": "8", "cpu": "191500m", "memory": "2000Gi"},
                    "conditions": [{"type": "Ready", "status": "True"}]
                }
            })).unwrap())
        })
        .collect();
    let pods: Vec<Arc<tuneplane_reconciler::watched_pod::WatchedPod>> = (0..10_000)
        .map(|i| {
            Arc::new(serde_json::from_value(json!({
                "metadata": {"name": format!("pod-{i:05}"), "namespace": DEFAULT_NAMESPACE,
                    "labels": {"tuneplane.io/job-id": format!("j{:05}", i / 2)},
                    "annotations": {"tuneplane.io/admitted-gpus": "1"}},
                "spec": {"nodeName": format!("node-{:05}", (i * 7) % 1_000), "containers": [{"name": "ray",
                    "image": "img", "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                    "limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": if i % 10 == 0 { "Succeeded" } else { "Running" }}
            })).unwrap())
        })
        .collect();
    let mut times = Vec::new();
    for _ in 0..31 {
        let start = Instant::now();
        let cluster = Cluster::new(nodes.clone(), pods.clone(), Vec::new(), Vec::new());
        let snap = cluster.capacity(0, Default::default(), &[]);
        times.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(snap.nodes.len(), 1_000);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "capacity from Kubernetes objects (Cluster::new + capacity), 1,000 nodes x 10,000 pods: median {:.2} ms, best {:.2} ms",
        times[times.len() / 2],
        times[0]
    );
}

async fn section_admit(jobs: usize, qps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedJobStore::open(dir.path().join("jobs")).unwrap();
    let took = write_jobs(&store, 0, jobs, JobState::Queued).await;
    println!(
        "admit (embedded): {jobs} queued jobs written in {took:.1} s ({:.0} creates/s)",
        jobs as f64 / took
    );
    let sim = sim(jobs.div_ceil(50), 64).await;
    let started = Instant::now();
    let mut p = Proc::start(
        &sim.url(),
        &format!("embedded:{}", dir.path().display()),
        qps,
    );
    run_admissions(&mut p, "embedded", jobs, started);
}

fn run_admissions(p: &mut Proc, label: &str, jobs: usize, started: Instant) {
    let (first, _) = p.wait(Duration::from_secs(120), |s| s.admissions > 0);
    let (done, ok) = p.wait(Duration::from_secs(600), |s| s.admissions >= jobs as u64);
    let (t0, t1) = (first.at.unwrap(), done.at.unwrap());
    let window = t1.duration_since(t0).as_secs_f64().max(1e-3);
    let admitted = done.admissions.saturating_sub(first.admissions);
    println!(
        "admit ({label}): {} of {jobs} admitted{}; {:.0} admissions/s from the first to the last \
         (±0.1 s sampling), {:.1} s from process start to the last",
        done.admissions,
        if ok { "" } else { " (TIMED OUT)" },
        admitted as f64 / window,
        t1.duration_since(started).as_secs_f64()
    );
    if done.requests > 0 {
        println!(
            "admit ({label}): {} store requests from start to the last admission = {:.1} per admitted job",
            done.requests,
            done.requests as f64 / done.admissions.max(1) as f64
        );
    }
}

async fn section_aws(jobs: usize, qps: usize) {
    let Ok(url) = std::env::var("AWS_ENDPOINT_URL") else {
        println!("aws: skipped (AWS_ENDPOINT_URL unset; run under scripts/with-moto.sh)");
        return;
    };
    let host = url.split("://").nth(1).unwrap_or_default();
    assert!(
        host.starts_with("127.0.0.1:"),
        "refusing non-local endpoint {url}"
    );
    let sdk = tuneplane_stores::aws::load_config().await;
    let dynamo = dynamodb_client(&sdk, None);
    let table = format!("tp-bench-{}", std::process::id());
    tuneplane_stores::dynamo::table::create_table(&dynamo, &table)
        .await
        .unwrap();
    let store = DynamoJobStore::new(dynamo, table.clone());
    let took = write_jobs(&store, 0, jobs, JobState::Queued).await;
    println!(
        "admit (dynamodb, local endpoint): {jobs} queued jobs written in {took:.1} s ({:.0} creates/s)",
        jobs as f64 / took
    );
    let sim = sim(jobs.div_ceil(50), 64).await;
    let started = Instant::now();
    let mut p = Proc::start(&sim.url(), &format!("dynamo:{table}"), qps);
    run_admissions(&mut p, "dynamodb, local endpoint", jobs, started);
}

async fn section_memory(qps: usize, nodes: usize, jobs: usize, hold: u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedJobStore::open(dir.path().join("jobs")).unwrap();
    write_jobs(&store, 0, jobs, JobState::Queued).await;
    let sim = sim(nodes, 16).await;
    let started = Instant::now();
    let mut p = Proc::start(
        &sim.url(),
        &format!("embedded:{}", dir.path().display()),
        qps,
    );
    let (done, ok) = p.wait(Duration::from_secs(600), |s| s.admissions >= jobs as u64);
    println!(
        "memory: {} of {jobs} admitted{} after {:.1} s",
        done.admissions,
        if ok { "" } else { " (TIMED OUT)" },
        started.elapsed().as_secs_f64()
    );
    // Steady state: every job RUNNING (its pod Running), bounded wait.
    let mut running = 0;
    for _ in 0..300 {
        running = count_running(&store).await;
        if running >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (pass, passes) = p.pass_time(Duration::from_secs(15));
    let (rss, hwm) = p.memory();
    println!(
        "memory: steady state {running} RUNNING jobs, {nodes} nodes: reconciler \
         process VmRSS {rss:.0} MiB, VmHWM {hwm:.0} MiB (peak, includes the admission burst); \
         pass {:.1} ms (mean of {passes})",
        pass * 1e3
    );
    if hold > 0 {
        // For profiling the steady state: `perf record -g -p <pid>` while this waits.
        println!(
            "memory: holding the steady state {hold} s (reconciler pid {})",
            p.child.id()
        );
        tokio::time::sleep(Duration::from_secs(hold)).await;
        let (pass, passes) = p.pass_time(Duration::from_secs(15));
        let (rss, hwm) = p.memory();
        println!(
            "memory: after holding: VmRSS {rss:.0} MiB, VmHWM {hwm:.0} MiB; pass {:.1} ms (mean of {passes})",
            pass * 1e3
        );
    }
}

/// A full fleet of 1,000 CPU nodes (10 CPUs each) running 10,000 one-CPU jobs of priority 0;
/// then 8 priority-10 jobs of 10 CPUs each arrive: each takes the place of a node's ten jobs.
/// Reports the passes that preempt (their duration, from the metrics), how long until all 8 are
/// admitted, and the steady pass beside it.
async fn section_preempt(qps: usize) {
    let (nodes, jobs, urgent) = (1_000, 10_000, 8);
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedJobStore::open(dir.path().join("jobs")).unwrap();
    write_jobs(&store, 0, jobs, JobState::Queued).await;
    let sim = sim(nodes, 10).await;
    let mut p = Proc::start_with(
        &sim.url(),
        &format!("embedded:{}", dir.path().display()),
        qps,
        &[("TUNEPLANE_BENCH_PREEMPTION_MIN_RUN", "0")],
    );
    p.wait(Duration::from_secs(600), |s| s.admissions >= jobs as u64);
    for _ in 0..300 {
        if count_running(&store).await >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (steady, n0) = p.pass_time(Duration::from_secs(10));
    let started = Instant::now();
    for i in 0..urgent {
        let mut j = cpu_job(jobs + i, JobState::Queued);
        j.spec.priority = 10;
        j.spec.pools[0].cpus = 10.0;
        JobRecords::create_job(&store, &j, None).await.unwrap();
    }
    let before = p.last;
    let (done, ok) = p.wait(Duration::from_secs(120), |s| {
        s.admissions >= (jobs + urgent) as u64
    });
    let took = started.elapsed().as_secs_f64();
    // The passes from the arrivals to the first one that ended after the last admission (the
    // admissions are counted while a pass runs, its duration once it ended).
    let (after, _) = p.wait(Duration::from_secs(30), |s| s.passes > done.passes);
    let passes = after.passes.saturating_sub(before.passes).max(1);
    let mean = (after.pass_sum - before.pass_sum) / passes as f64;
    println!(
        "preempt: {nodes} nodes full with {jobs} running jobs; {urgent} higher-priority jobs admitted{} after {took:.2} s by {} preemptions, over {passes} passes of mean {:.1} ms (steady pass before: {:.1} ms, mean of {n0})",
        if ok { "" } else { " (TIMED OUT)" },
        done.preemptions,
        mean * 1e3,
        steady * 1e3
    );
}

/// An array parent of `size` CPU children (the reconciler creates them).
fn array_parent(i: usize, size: u32, parallelism: Option<u32>) -> JobRecord {
    let mut j = cpu_job(i, JobState::Queued);
    j.spec.array = Some(tuneplane_core::spec::ArraySpec { size, parallelism });
    j.array = Some(tuneplane_core::array::ArrayRole::Parent(Default::default()));
    j
}

async fn section_array(qps: usize) {
    // Admission rate: one submission of 5,000 children against `admit`'s 5,000 single jobs.
    let children: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedJobStore::open(dir.path().join("jobs")).unwrap();
    let written = Instant::now();
    JobRecords::create_job(&store, &array_parent(0, children as u32, None), None)
        .await
        .unwrap();
    println!(
        "array: 1 parent of {children} children written in {:.3} s (one store write)",
        written.elapsed().as_secs_f64()
    );
    let fleet = sim(children.div_ceil(50), 64).await;
    let started = Instant::now();
    let mut p = Proc::start(
        &fleet.url(),
        &format!("embedded:{}", dir.path().display()),
        qps,
    );
    run_admissions(&mut p, "array children", children, started);
    drop(p);
    drop(fleet);

    // Held back: 10,000 children, 10 at a time; the steady pass with 9,990 waiting.
    let (size, parallel) = (10_000u32, 10u32);
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedJobStore::open(dir.path().join("jobs")).unwrap();
    let fleet = sim(4, 64).await;
    let mut p = Proc::start(
        &fleet.url(),
        &format!("embedded:{}", dir.path().display()),
        qps,
    );
    let (empty, n0) = p.pass_time(Duration::from_secs(10));
    JobRecords::create_job(&store, &array_parent(0, size, Some(parallel)), None)
        .await
        .unwrap();
    let created = Instant::now();
    for _ in 0..600 {
        if store.list_active().await.unwrap().len() > size as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all_there = created.elapsed().as_secs_f64();
    p.wait(Duration::from_secs(120), |s| {
        s.admissions >= u64::from(parallel)
    });
    // Let every held child's reason be written once, then measure.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (steady, n1) = p.pass_time(Duration::from_secs(15));
    println!(
        "array: {size} children created by the reconciler in {all_there:.1} s; with {parallel} running and {} held back by parallelism, a pass takes {:.1} ms (mean of {n1}); an empty fleet's pass {:.1} ms (mean of {n0})",
        size - parallel,
        steady * 1e3,
        empty * 1e3
    );
}

async fn section_history(qps: usize, terminal: usize) {
    let active = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedJobStore::open(dir.path().join("jobs")).unwrap();
    write_jobs(&store, 0, active, JobState::Queued).await;
    let sim = sim(active.div_ceil(50), 64).await;
    let mut p = Proc::start(
        &sim.url(),
        &format!("embedded:{}", dir.path().display()),
        qps,
    );
    p.wait(Duration::from_secs(300), |s| s.admissions >= active as u64);
    for _ in 0..120 {
        if count_running(&store).await >= active {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (before, n0) = p.pass_time(Duration::from_secs(15));
    let took = write_jobs(&store, active, terminal, JobState::Succeeded).await;
    let (after, n1) = p.pass_time(Duration::from_secs(15));
    println!(
        "history: {active} active jobs: pass {:.2} ms (mean of {n0}) with no terminal jobs; \
         {:.2} ms (mean of {n1}) with {terminal} terminal jobs in the store (written in {took:.0} s)",
        before * 1e3,
        after * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        child(&args[1..]);
        return;
    }
    let wanted: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let on = |name: &str| wanted.is_empty() || wanted.contains(&name);
    let qps = env_usize("TUNEPLANE_BENCH_QPS", 5_000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    if on("capacity") {
        section_capacity();
    }
    rt.block_on(async {
        if on("admit") {
            section_admit(env_usize("TUNEPLANE_BENCH_ADMIT_JOBS", 5_000), qps).await;
        }
        if on("aws") {
            section_aws(env_usize("TUNEPLANE_BENCH_AWS_JOBS", 1_000), qps).await;
        }
        if on("memory") {
            section_memory(
                qps,
                env_usize("TUNEPLANE_BENCH_MEMORY_NODES", 1_000),
                env_usize("TUNEPLANE_BENCH_MEMORY_JOBS", 10_000),
                env_usize("TUNEPLANE_BENCH_HOLD_SECS", 0) as u64,
            )
            .await;
        }
        if on("preempt") {
            section_preempt(qps).await;
        }
        if on("array") {
            section_array(qps).await;
        }
        if on("history") {
            let terminal = env_usize("TUNEPLANE_BENCH_TERMINAL_JOBS", 100_000);
            section_history(qps, terminal).await;
        }
    });
}
