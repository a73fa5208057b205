//! Fault injection between the reconciler and the API server (issue 8): kubesim answers a seeded
//! share of requests with 500/503/429, drops connections (before handling, and after handling so
//! the answer of an applied write is lost), and delays others; then a full outage. Jobs still all
//! finish exactly once, with their logs, every workload is deleted and created once, retries are
//! bounded and counted, and the request count shows no tight loop.
//!
//! The reconciler's client is built as in production ([`client_config`]: kube-rs's own retry layer
//! off), so every fault reaches `Kube::call` or a watcher. Workload uids are recorded from kubesim's
//! store (its change feed, which no fault touches), so the record is complete.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::render::workload_name;
use tuneplane_kubesim::{FaultPlan, FaultScope};
use tuneplane_reconciler::kube_io::{Kube, client_config};
use tuneplane_reconciler::leader::Elector;
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::{Config, Ctx};

type Uids = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

/// Records every uid each RayJob, and each Pod named in `pods`, ever had, from the store's feed.
fn track(h: &Harness, pods: BTreeSet<String>) -> (Uids, tokio::task::JoinHandle<()>) {
    let uids: Uids = Arc::default();
    let mut feed = h.sim().store().subscribe();
    let out = uids.clone();
    let task = tokio::spawn(async move {
        loop {
            match feed.recv().await {
                Ok(ev) => {
                    let name = ev.object["metadata"]["name"].as_str().unwrap_or_default();
                    let wanted = ev.rt.plural == "rayjobs"
                        || (ev.rt.plural == "pods" && pods.contains(name));
                    if wanted && ev.ty == tuneplane_kubesim::store::EventType::Added {
                        let uid = ev.object["metadata"]["uid"].as_str().unwrap_or_default();
                        out.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(name.to_owned())
                            .or_default()
                            .insert(uid.to_owned());
                    }
                }
                // Shows in the final check (an unexpected name), which a panic here would not.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    out.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(format!("(tracker missed {n} events)"), BTreeSet::new());
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    (uids, task)
}

/// A reconciler whose client is configured as in production.
async fn reconciler(h: &Harness, config: Config) -> (tokio::task::JoinHandle<()>, Arc<Ctx>) {
    let url = h.sim().url().parse().expect("url");
    let client = kube::Client::try_from(client_config(kube::Config::new(url))).expect("client");
    spawn_reconciler(config, client, h.jobs.clone(), h.blobs.clone()).await
}

/// A GPU job that may wait its turn through the faults (a 600 s pre-running deadline).
fn gpu_job(id: &str, series: &str, nodes: u32, gpus: u32) -> JobRecord {
    pre_running(common::gpu_job(id, series, nodes, gpus), 600)
}

/// One value of the metrics exposition.
fn metric(ctx: &Ctx, name: &str) -> f64 {
    tuneplane_testkit::metric(&ctx.metrics.render(), name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// Waits (bounded) until every job is terminal, then checks each succeeded with a complete log
/// archive: one index entry per container and no entry failed by an API server error.
async fn assert_all_succeeded(h: &Harness, ids: &[String], secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let mut open = Vec::new();
        for id in ids {
            let job = h.job(id).await;
            if !job.is_terminal() {
                open.push(format!("{id}:{}", job.state));
            }
        }
        if open.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after {secs}s, jobs not terminal: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in ids {
        let job = h.job(id).await;
        assert_eq!(job.state, JobState::Succeeded, "{id}: {:?}", job.failure);
        let entries = assert_logs_archived(h, &job).await;
        let index: serde_json::Value =
            serde_json::from_str(&entries[0].1).expect("index.json of the archive");
        let logs = index["entries"].as_array().cloned().unwrap_or_default();
        assert!(!logs.is_empty(), "{id}: the archive lists no container");
        for entry in logs {
            let error = entry["error"].as_str().unwrap_or_default();
            for sign in [
                "injected",
                "too many requests",
                "unable to handle",
                "connection",
            ] {
                assert!(
                    !error.contains(sign),
                    "{id}: a log lost to a fault: {error}"
                );
            }
        }
    }
}

/// Waits (bounded) until no workload is left, then checks each was created exactly once.
async fn assert_workloads_once(h: &Harness, uids: &Uids, expected: usize, cpu: &BTreeSet<String>) {
    use tuneplane_kubesim::resources::{PODS, RAYJOBS};
    wait_for(30, "every workload deleted", || async {
        let store = h.sim().store();
        let left = store.count(&RAYJOBS)
            + cpu
                .iter()
                .filter(|n| store.try_get(&PODS, "tuneplane-jobs", n).is_some())
                .count();
        (left == 0).then_some(())
    })
    .await;
    let map = uids.lock().map(|m| m.clone()).unwrap_or_default();
    assert_eq!(map.len(), expected, "workloads created: {:?}", map.keys());
    for (name, set) in map {
        assert_eq!(set.len(), 1, "{name} was created {} times", set.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_finish_exactly_once_while_the_api_server_fails_drops_and_stalls_requests() {
    let h = start(running_for(Duration::from_millis(600))).await;
    // 12 GPU RayJobs that queue behind each other (two h200 nodes, one l40s node; two jobs need
    // both h200 nodes) and 24 CPU pods (8 fit the CPU node at once).
    let mut jobs: Vec<JobRecord> = Vec::new();
    for i in 0..6 {
        jobs.push(gpu_job(&format!("h{i}"), "h200", 1, 8));
    }
    for i in 0..2 {
        jobs.push(gpu_job(&format!("hh{i}"), "h200", 2, 8));
    }
    for i in 0..4 {
        jobs.push(gpu_job(&format!("l{i}"), "l40s", 1, 4));
    }
    for i in 0..24 {
        jobs.push(cpu_job(&format!("c{i}")));
    }
    let ids: Vec<String> = jobs.iter().map(|j| j.id.to_string()).collect();
    let cpu: BTreeSet<String> = ids
        .iter()
        .filter(|id| id.starts_with('c'))
        .map(|id| workload_name(id))
        .collect();
    let (uids, _tracker) = track(&h, cpu.clone());

    let mut config = test_config("faulty");
    config.lease_duration = Duration::from_secs(3);
    let (_task, ctx) = reconciler(&h, config).await;
    // About 17% of all requests (watches and lease included) fail: 10% error statuses, 4% dropped
    // connections, 3% applied but unanswered; 10% more are delayed 50–300 ms.
    let plan = FaultPlan {
        seed: 0x7e57_f00d,
        scope: FaultScope::All,
        path_contains: None,
        error_rate: 0.10,
        error_codes: vec![500, 503, 429],
        retry_after_secs: 1,
        drop_rate: 0.04,
        lost_response_rate: 0.03,
        slow_rate: 0.10,
        slow_min: Duration::from_millis(50),
        slow_max: Duration::from_millis(300),
    };
    h.sim().set_fault_plan(Some(plan));
    let started = tokio::time::Instant::now();
    let before = h.sim().fault_counts().requests;
    // After 1.5 s and then every 4 s the watch history is dropped and open watches end, so the
    // reflectors resume, get 410 Gone and relist, through the faults, again and again.
    let store = h.sim().store().clone();
    let compactions = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = compactions.clone();
    let compactor = tokio::spawn(async move {
        let mut period = Duration::from_millis(1500);
        loop {
            tokio::time::sleep(period).await;
            period = Duration::from_secs(4);
            store.compact();
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    for j in &jobs {
        h.submit(j).await;
    }

    assert_all_succeeded(&h, &ids, 50).await;
    assert_workloads_once(&h, &uids, ids.len(), &cpu).await;
    let elapsed = started.elapsed();
    compactor.abort();
    h.sim().set_fault_plan(None);
    let compactions = compactions.load(std::sync::atomic::Ordering::Relaxed);
    assert!(compactions > 0, "the watches were never ended");

    let c = h.sim().fault_counts();
    let requests = c.requests - before;
    let retries = ctx.metrics.api_retries();
    let (kube_errors, _, _) = ctx.metrics.step_errors();
    eprintln!(
        "faults_kube: {} jobs in {:.1}s; {requests} requests ({:.1}/job); errors {:?}, drops {}, \
         lost responses {}, slow {}; reconciler retries {retries}, failed kube steps {kube_errors}, \
         failed passes {}; watches ended {compactions} times, watch errors {}",
        ids.len(),
        elapsed.as_secs_f64(),
        requests as f64 / ids.len() as f64,
        c.errors,
        c.drops,
        c.lost_responses,
        c.slow,
        ctx.metrics.pass_errors(),
        ctx.metrics.watch_errors(),
    );
    // With this seed every kind is drawn within the first 73 requests (the run makes over 200).
    for code in [429, 500, 503] {
        assert!(
            c.errors.get(&code).copied().unwrap_or(0) > 0,
            "no {code}: {c:?}"
        );
    }
    assert!(c.drops > 0 && c.lost_responses > 0 && c.slow > 0, "{c:?}");
    assert!(retries > 0, "the reconciler never retried");
    assert_eq!(metric(&ctx, "tuneplane_kube_retries_total"), retries as f64);
    // Faulted lists and watches, and the 410s after each compaction, are counted too.
    let watch_errors = ctx.metrics.watch_errors();
    assert!(watch_errors > 0, "no watch error counted");
    assert_eq!(
        metric(&ctx, "tuneplane_watch_errors_total"),
        watch_errors as f64
    );
    // No tight loop. A job costs about 10 requests when nothing fails: create, two pod lists and
    // one log read per container to archive, delete, and the retries of those; the lease adds 2
    // requests per renewal (one a second here) and the four watches a relist (list + watch) per
    // failed watch and per compaction (every 4 s).
    // 40 per job plus 20 per second of run time is several times that, and a loop retrying without
    // backoff would exceed it by orders of magnitude.
    let bound = 40 * ids.len() as u64 + 20 * elapsed.as_secs().max(1);
    assert!(
        requests <= bound,
        "{requests} requests for {} jobs in {elapsed:?} (bound {bound})",
        ids.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_outage_backs_off_then_every_job_finishes_once() {
    let h = start(running_for(Duration::from_millis(600))).await;
    let first: Vec<JobRecord> = vec![
        gpu_job("a0", "h200", 1, 8),
        gpu_job("a1", "l40s", 1, 4),
        cpu_job("a2"),
        cpu_job("a3"),
    ];
    let during: Vec<JobRecord> = vec![gpu_job("b0", "h200", 1, 8), cpu_job("b1"), cpu_job("b2")];
    let ids: Vec<String> = first
        .iter()
        .chain(&during)
        .map(|j| j.id.to_string())
        .collect();
    let cpu: BTreeSet<String> = ["a2", "a3", "b1", "b2"].map(workload_name).into();
    let (uids, _tracker) = track(&h, cpu.clone());

    // A long lease: leadership (held until 8 s after the last renewal) outlives the outage, so
    // passes keep running into it.
    let mut config = test_config("outage");
    config.lease_duration = Duration::from_secs(10);
    let (_task, ctx) = reconciler(&h, config).await;
    for j in &first {
        h.submit(j).await;
    }
    wait_for(20, "a first workload", || async {
        (h.sim()
            .store()
            .count(&tuneplane_kubesim::resources::RAYJOBS)
            > 0)
        .then_some(())
    })
    .await;

    // Every request fails for 4 s: half 503, half dropped connections. Jobs submitted now are
    // admitted (the store works) but their workloads cannot be created.
    let errors_before = ctx.metrics.pass_errors();
    let backoff_before = metric(&ctx, "tuneplane_pass_backoff_seconds_total");
    let requests_before = h.sim().fault_counts().requests;
    h.sim().set_fault_plan(Some(FaultPlan {
        seed: 8,
        error_rate: 0.5,
        error_codes: vec![503],
        drop_rate: 0.5,
        ..FaultPlan::default()
    }));
    for j in &during {
        h.submit(j).await;
    }
    // At least 4 s, and on until a pass has failed and backed off (a pass under a loaded
    // machine's scheduling can outlast 4 s of retries); 20 s at most.
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    for _ in 0..80 {
        if ctx.metrics.pass_errors() > errors_before
            && metric(&ctx, "tuneplane_pass_backoff_seconds_total") > backoff_before
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let outage = started.elapsed();
    let during_outage = h.sim().fault_counts().requests - requests_before;
    h.sim().set_fault_plan(None);
    let failed_passes = ctx.metrics.pass_errors() - errors_before;
    let backoff = metric(&ctx, "tuneplane_pass_backoff_seconds_total") - backoff_before;
    eprintln!(
        "faults_kube outage: {during_outage} requests in {outage:?}, {failed_passes} failed \
         passes, {backoff:.2}s of pass backoff, {} retries",
        ctx.metrics.api_retries()
    );
    assert!(failed_passes > 0, "no pass failed during the outage");
    assert!(backoff > 0.0, "the pass loop never backed off");
    assert!(
        ctx.metrics.step_errors().0 > 0,
        "no failed kube step counted"
    );
    // Bounded request rate: each failing call makes at most 5 attempts over 1.5 s of backoff,
    // passes after failed steps wait a pass interval, 4 watches back off from 0.8 s, the lease
    // polls 3 times a second. 100 requests a second is far above that and far below a tight loop.
    let bound = (100.0 * outage.as_secs_f64()).ceil() as u64;
    assert!(
        during_outage <= bound,
        "{during_outage} requests during a {outage:?} outage (bound {bound})"
    );

    assert_all_succeeded(&h, &ids, 45).await;
    assert_workloads_once(&h, &uids, ids.len(), &cpu).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_the_api_server_never_serves_delays_the_end_a_bounded_number_of_passes() {
    use tuneplane_reconciler::kube_io::MAX_ATTEMPTS;
    use tuneplane_reconciler::logs::STRICT_ARCHIVE_ATTEMPTS;
    let h = start(running_for(Duration::from_millis(600))).await;
    let (_task, _ctx) = reconciler(&h, test_config("logs")).await;
    // Every log read answers 500 (as for a pod whose node is unreachable); nothing else fails.
    h.sim().set_fault_plan(Some(FaultPlan {
        path_contains: Some("/log".into()),
        ..FaultPlan::outage(500, FaultScope::All)
    }));
    h.submit(&cpu_job("n1")).await;
    let job = h.wait_state(50, "n1", JobState::Succeeded).await;
    let entries = assert_logs_archived(&h, &job).await;
    let index: serde_json::Value = serde_json::from_str(&entries[0].1).expect("index.json");
    let logs = index["entries"].as_array().cloned().unwrap_or_default();
    assert!(!logs.is_empty());
    for entry in &logs {
        assert!(entry["path"].is_null(), "{entry}");
        let error = entry["error"].as_str().unwrap_or_default();
        assert!(error.contains("injected"), "{entry}");
    }
    // Each strict archive made MAX_ATTEMPTS reads of the first log and failed; then one archive
    // read every log MAX_ATTEMPTS times and wrote the errors.
    let reads = log_reads_answered_500(&h);
    let strict = u64::from(STRICT_ARCHIVE_ATTEMPTS * MAX_ATTEMPTS);
    let last = u64::from(MAX_ATTEMPTS) * logs.len() as u64;
    assert_eq!(reads, strict + last, "log reads answered 500");
}

/// Failed archive attempts are counted on the job's record: a reconciler that restarts halfway
/// goes on from the count, so the job still ends after [`STRICT_ARCHIVE_ATTEMPTS`] failed strict
/// archives in all (a count kept in memory only would start over after the restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_archive_attempts_are_counted_on_the_record_across_a_restart() {
    use tuneplane_reconciler::kube_io::MAX_ATTEMPTS;
    use tuneplane_reconciler::logs::STRICT_ARCHIVE_ATTEMPTS;
    let h = start(running_for(Duration::from_millis(600))).await;
    h.sim().set_fault_plan(Some(FaultPlan {
        path_contains: Some("/log".into()),
        ..FaultPlan::outage(500, FaultScope::All)
    }));
    let (first, _ctx) = reconciler(&h, test_config("logs")).await;
    h.submit(&cpu_job("r1")).await;
    let counted = h
        .wait_job(60, "r1", "3 failed archives counted", |j| {
            j.archive_failures >= 3
        })
        .await;
    assert!(counted.archive_failures < STRICT_ARCHIVE_ATTEMPTS);
    // A crash: the process's memory (its own count among it) is gone.
    first.abort();
    let _ = first.await;
    let (_second, ctx) = reconciler(&h, test_config("logs")).await;
    let job = h.wait_state(90, "r1", JobState::Succeeded).await;
    assert_eq!(
        job.archive_failures, STRICT_ARCHIVE_ATTEMPTS,
        "the restarted reconciler started counting over"
    );
    assert!(ctx.archive_failures.lock().unwrap().is_empty());
    let entries = assert_logs_archived(&h, &job).await;
    let index: serde_json::Value = serde_json::from_str(&entries[0].1).expect("index.json");
    let logs = index["entries"].as_array().cloned().unwrap_or_default();
    assert!(!logs.is_empty());
    assert!(
        logs.iter()
            .all(|e| e["error"].as_str().unwrap_or_default().contains("injected")),
        "{logs:?}"
    );
    // Reads: the strict archives' (an attempt cut short by the crash may add its own), then the
    // last archive's.
    let reads = log_reads_answered_500(&h);
    let strict = u64::from(STRICT_ARCHIVE_ATTEMPTS * MAX_ATTEMPTS);
    let last = u64::from(MAX_ATTEMPTS) * logs.len() as u64;
    assert!(
        (strict + last..=strict + last + u64::from(MAX_ATTEMPTS)).contains(&reads),
        "{reads} log reads answered 500"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_write_that_meets_a_server_error_is_retried_within_the_round() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let sim = h.sim();
    // Every write to a Lease answers 503 until the outage is lifted.
    sim.set_fault_plan(Some(FaultPlan {
        path_contains: Some("/leases".into()),
        ..FaultPlan::outage(503, FaultScope::Mutating)
    }));
    let url = sim.url().parse().expect("url");
    let client = kube::Client::try_from(client_config(kube::Config::new(url))).expect("client");
    let metrics = Arc::new(Metrics::default());
    let kube = Kube::new(client, 100, 100, metrics.clone());
    let elector = Elector::new(
        kube,
        "default",
        "retried",
        "replica-a",
        Duration::from_secs(15),
    );
    let round = tokio::spawn(async move {
        let led = elector.try_lead().await;
        (led, elector)
    });

    // The create met the outage; lift it while the call backs off before its next attempt.
    wait_for(10, "a lease write answered 503", || async {
        (sim.fault_counts().error_total() >= 1).then_some(())
    })
    .await;
    sim.set_fault_plan(None);
    let (led, elector) = round.await.unwrap();

    assert!(
        led.unwrap(),
        "the round did not lead after its create was retried"
    );
    assert!(elector.state.is_leader());
    assert!(metrics.api_retries() >= 1, "{:?}", sim.fault_counts());
}

/// How many requests the simulator answered with an injected 500 (log reads, in these tests).
fn log_reads_answered_500(h: &Harness) -> u64 {
    h.sim()
        .fault_counts()
        .errors
        .get(&500)
        .copied()
        .unwrap_or(0)
}
