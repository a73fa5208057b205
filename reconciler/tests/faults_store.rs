//! Store faults between the reconciler and its stores: calls that fail before reaching the store,
//! writes that happened but whose response was lost, a full store outage, and (through a loopback
//! HTTP fault proxy in front of moto) throttling, server errors, dropped connections and delays on
//! the DynamoDB + S3 path. Every job still ends once, with its logs, its workload created exactly
//! once and deleted; failed passes back off instead of looping; the metrics show the errors.
//!
//! Fault draws are seeded: the k-th draw is fixed, so the number of faults of each kind among the
//! first N calls is too (every kind appears within the first 49 proxied requests, both decorator
//! kinds within the first 10 store calls; each run makes well over a hundred). Which call gets
//! which draw depends on scheduling.
//!
//! The AWS test fails, rather than skips, without `AWS_ENDPOINT_URL` (as `aws_stores.rs` does):
//! run under `scripts/with-moto.sh`.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;
#[path = "common/faulty.rs"]
mod faulty;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fault_proxy::{FaultProxy, ProxyFault, ProxyPlan};
use faulty::{FaultKind, Faults, FaultyBlobStore, FaultyJobStore, Rule};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::render::workload_name;
use tuneplane_core::store::prelude::*;
use tuneplane_core::store::{
    BlobStore, CreateOutcome, EventQuery, JobStore, PlaygroundRecord, StoreError,
};
use tuneplane_reconciler::Ctx;
use tuneplane_reconciler::cluster::Cluster;
use tuneplane_reconciler::kube_io::Kube;
use tuneplane_reconciler::leader::Leadership;
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::pass::pass;
use tuneplane_reconciler::rayjob::RayJob;
use tuneplane_stores::aws::{dynamodb_client, retry_config, s3_client};
use tuneplane_stores::{DynamoJobStore, S3BlobStore};

/// Workload watches of the job namespace.
struct Workloads {
    rayjobs: Api<RayJob>,
    pods: Api<Pod>,
    uids: Uids,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workloads {
    fn watch(h: &Harness) -> Workloads {
        let uids: Uids = Arc::default();
        let rayjobs = h.rayjobs();
        let pods = h.pods();
        let tasks = vec![
            track_uids(
                rayjobs.clone(),
                watcher::Config::default(),
                |_| true,
                uids.clone(),
            ),
            track_uids(
                pods.clone(),
                watcher::Config::default(),
                |_| true,
                uids.clone(),
            ),
        ];
        Workloads {
            rayjobs,
            pods,
            uids,
            _tasks: tasks,
        }
    }

    /// Asserts each job's workload was created exactly once and none is left.
    async fn assert_once_and_gone(&self, jobs: &[JobRecord]) {
        let names: BTreeSet<String> = jobs.iter().map(|j| workload_name(&j.id)).collect();
        wait_for(30, "every workload deleted", || async {
            let rayjobs = self.rayjobs.list(&Default::default()).await.ok()?.items;
            let pods = self.pods.list(&Default::default()).await.ok()?.items;
            let left = rayjobs.len()
                + pods
                    .iter()
                    .filter(|p| names.contains(&p.name_any()))
                    .count();
            (left == 0).then_some(())
        })
        .await;
        let map = self.uids.lock().map(|m| m.clone()).unwrap_or_default();
        for name in &names {
            let n = map.get(name).map_or(0, BTreeSet::len);
            assert_eq!(n, 1, "workload {name} was created {n} times");
        }
    }
}

/// Starts a reconciler over the given (faulty) stores; the harness keeps the real ones.
async fn reconciler_over(
    h: &Harness,
    jobs: Arc<dyn JobStore>,
    blobs: Arc<dyn BlobStore>,
) -> (tokio::task::JoinHandle<()>, Arc<Ctx>) {
    spawn_reconciler(test_config("faulty"), h.client.clone(), jobs, blobs).await
}

/// Starts a reconciler over the harness's stores behind `faults`.
async fn faulty_reconciler(
    h: &Harness,
    faults: &Arc<Faults>,
) -> (tokio::task::JoinHandle<()>, Arc<Ctx>) {
    reconciler_over(
        h,
        FaultyJobStore::new(h.jobs.clone(), faults.clone()),
        FaultyBlobStore::new(h.blobs.clone(), faults.clone()),
    )
    .await
}

/// A mix of `gpu` h200 jobs, `small` l40s jobs and `cpu` CPU jobs.
fn mix(gpu: usize, small: usize, cpu: usize) -> Vec<JobRecord> {
    let mut out = Vec::new();
    for i in 0..gpu {
        out.push(pre_running(gpu_job(&format!("g{i:02}"), "h200", 1, 4), 120));
    }
    for i in 0..small {
        out.push(pre_running(gpu_job(&format!("s{i:02}"), "l40s", 1, 2), 120));
    }
    for i in 0..cpu {
        out.push(cpu_job(&format!("c{i:02}")));
    }
    out
}

/// Waits (polling gently) until no job is active, then returns every job, all of which succeeded.
async fn wait_all_succeeded(h: &Harness, jobs: &[JobRecord], secs: u64) -> Vec<JobRecord> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if h.jobs.list_active().await.is_ok_and(|a| a.is_empty()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs}s; still active: {:?}",
            h.jobs.list_active().await.map(|a| a
                .iter()
                .map(|j| format!("{}:{}", j.id, j.state))
                .collect::<Vec<_>>())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut done = Vec::new();
    for j in jobs {
        let stored = h.job(&j.id).await;
        assert_eq!(stored.state, JobState::Succeeded, "job {}", j.id);
        assert_logs_archived(h, &stored).await;
        done.push(stored);
    }
    done
}

/// Asserts each job has exactly one admission and one terminal event, and at most one running
/// event (a short job can end between two passes without being seen running).
async fn assert_state_events(h: &Harness, jobs: &[JobRecord]) {
    for j in jobs {
        let events = h
            .jobs
            .list_events(&j.id, &EventQuery::first(1000))
            .await
            .expect("events of a job")
            .items;
        let count = |key: &str| events.iter().filter(|e| e.key == key).count();
        let keys: Vec<&str> = events.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(count("state-ADMITTED"), 1, "job {}: {keys:?}", j.id);
        assert_eq!(count("state-SUCCEEDED"), 1, "job {}: {keys:?}", j.id);
        assert!(count("state-RUNNING") <= 1, "job {}: {keys:?}", j.id);
    }
}

/// A metric's value from the reconciler's exposition.
fn metric(ctx: &Ctx, name: &str) -> f64 {
    tuneplane_testkit::metric(&ctx.metrics.render(), name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

fn fast_sim() -> tuneplane_kubesim::SimConfig {
    running_for(Duration::from_millis(300))
}

/// Seed of the embedded fault draws.
const EMBEDDED_SEED: u64 = 0x7e57_0008;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_end_once_with_their_logs_when_store_calls_fail_before_or_after_writing() {
    let started = std::time::Instant::now();
    let h = start(fast_sim()).await;
    let watch = Workloads::watch(&h);
    // 8% of calls fail before the store sees them, 8% after the store applied them.
    let faults = Faults::new(EMBEDDED_SEED, 0.08, 0.08);
    let (_task, ctx) = faulty_reconciler(&h, &faults).await;
    let all = mix(10, 6, 14);
    for j in &all {
        h.submit(j).await;
    }

    let done = wait_all_succeeded(&h, &all, 50).await;
    watch.assert_once_and_gone(&done).await;
    assert_state_events(&h, &done).await;

    let (_, store_errors, _) = ctx.metrics.step_errors();
    let before = faults.injected_of(FaultKind::Before);
    let after = faults.injected_of(FaultKind::After);
    println!(
        "embedded faults: seed {EMBEDDED_SEED:#x}, {} jobs, {} store calls, injected before {before} after {after} ({:?}), store errors seen {store_errors}, pass errors {}, run {:.1} s",
        all.len(),
        faults.total_calls(),
        faults.injected(),
        ctx.metrics.pass_errors(),
        started.elapsed().as_secs_f64()
    );
    assert!(before > 0 && after > 0, "{:?}", faults.injected());
    assert!(store_errors > 0, "no store error reached the metrics");
    assert_eq!(
        metric(&ctx, "tuneplane_step_errors_total{cause=\"store\"}"),
        store_errors as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_whose_record_write_fails_counts_as_an_error_not_an_admission() {
    let h = start(fast_sim()).await;
    let queued = pre_running(gpu_job("adm01", "h200", 1, 4), 120);
    h.submit(&queued).await;
    let faults = Faults::scripted(vec![Rule {
        method: "update_job",
        key: queued.id.to_string(),
        nth: 1,
        kind: FaultKind::Before,
    }]);
    let config = test_config("admit-by-hand");
    let metrics = Arc::new(Metrics::default());
    let kube = Kube::new(
        h.client.clone(),
        config.kube_qps,
        config.kube_burst,
        metrics.clone(),
    );
    let leadership = Arc::new(Leadership::default());
    let ctx = Arc::new(Ctx::new(
        config,
        kube,
        FaultyJobStore::new(h.jobs.clone(), faults.clone()),
        FaultyBlobStore::new(h.blobs.clone(), faults.clone()),
        metrics,
        leadership.clone(),
    ));
    let nodes = Api::<Node>::all(h.client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    let cluster = Cluster::new(
        nodes.items.into_iter().map(Arc::new).collect(),
        vec![],
        vec![],
        vec![],
    );

    let now = tuneplane_core::clock::now_ms();
    leadership.hold_until(now + 60_000);
    let failed = pass(&ctx, &cluster, now).await.unwrap();
    let admitted = pass(&ctx, &cluster, now + 1).await.unwrap();

    assert_eq!((failed.admitted, failed.errors), (0, 1), "{failed:?}");
    assert_eq!((admitted.admitted, admitted.errors), (1, 0), "{admitted:?}");
    let stored = h.jobs.get_job(&queued.id).await.unwrap().unwrap();
    assert_eq!(stored.state, JobState::Admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_applied_but_answered_an_error_are_picked_up_without_a_second_workload() {
    let h = start(fast_sim()).await;
    let watch = Workloads::watch(&h);
    let all = vec![pre_running(gpu_job("lg", "h200", 1, 8), 120), cpu_job("lc")];
    let mut rules = Vec::new();
    for j in &all {
        let rule = |method, key: String, nth, kind| Rule {
            method,
            key,
            nth,
            kind,
        };
        // The first admission write (record and event, one atomic call) fails outright; the
        // retried one lands but its answer is lost; so does the next record write (running or
        // terminal, whichever the job reaches first).
        rules.push(rule("update_job", j.id.to_string(), 1, FaultKind::Before));
        rules.push(rule("update_job", j.id.to_string(), 2, FaultKind::After));
        rules.push(rule("update_job", j.id.to_string(), 3, FaultKind::After));
        // The log archive is stored but the put answers an error.
        rules.push(rule(
            "blob put_file",
            format!("logs/{}/logs.tar.gz", j.id),
            1,
            FaultKind::After,
        ));
    }
    let expected = rules.len() as u64;
    let faults = Faults::scripted(rules);
    let (_task, ctx) = faulty_reconciler(&h, &faults).await;
    for j in &all {
        h.submit(j).await;
    }

    let done = wait_all_succeeded(&h, &all, 40).await;
    watch.assert_once_and_gone(&done).await;
    assert_state_events(&h, &done).await;
    assert!(faults.unfired().is_empty(), "{:?}", faults.unfired());
    let injected = faults.injected();
    assert_eq!(
        injected.values().sum::<u64>(),
        expected,
        "every scripted fault struck a call that succeeded: {injected:?}"
    );
    assert!(ctx.metrics.step_errors().1 >= expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_fails_passes_that_back_off_and_every_job_finishes_after_it() {
    let started = std::time::Instant::now();
    let h = start(running_for(Duration::from_millis(1500))).await;
    let watch = Workloads::watch(&h);
    let faults = Faults::new(1, 0.0, 0.0);
    let (_task, ctx) = faulty_reconciler(&h, &faults).await;
    let all = mix(3, 1, 3);
    for j in &all {
        h.submit(j).await;
    }
    // The outage starts once every job has been admitted (their workloads run through it).
    wait_for(20, "every job admitted", || async {
        let active = h.jobs.list_active().await.ok()?;
        active
            .iter()
            .all(|j| j.state != JobState::Queued)
            .then_some(())
    })
    .await;

    let calls_before = faults.total_calls();
    let pass_errors_before = ctx.metrics.pass_errors();
    faults.set_outage(true);
    // The pass under way when the outage starts fails its in-flight steps; count after it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls_settled = faults.total_calls();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    faults.set_outage(false);
    let outage_calls = faults.total_calls() - calls_before;
    let late_calls = faults.total_calls() - calls_settled;
    let failed_passes = ctx.metrics.pass_errors() - pass_errors_before;

    let done = wait_all_succeeded(&h, &all, 40).await;
    watch.assert_once_and_gone(&done).await;
    assert_state_events(&h, &done).await;
    let backoff = metric(&ctx, "tuneplane_pass_backoff_seconds_total");
    println!(
        "outage: 4 s, {failed_passes} failed passes, {outage_calls} store calls during it ({late_calls} after its first 0.5 s), backoff {backoff:.1} s, step errors (kube, store, other) {:?}, run {:.1} s",
        ctx.metrics.step_errors(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed_passes >= 3, "only {failed_passes} passes failed");
    // A pass every 100 ms would make 35 calls or more in 3.5 s; backing off makes about 4.
    assert!(
        late_calls <= 10,
        "{late_calls} store calls in 3.5 s of outage: the loop does not back off"
    );
    assert!(backoff > 0.0);
    assert_eq!(faults.injected_of(FaultKind::Outage), outage_calls);
    assert!(ctx.metrics.step_errors().1 >= failed_passes);
}

/// The moto endpoint from `AWS_ENDPOINT_URL` and its socket address (loopback only).
fn moto_endpoint() -> (String, SocketAddr) {
    let url = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| {
        panic!("AWS_ENDPOINT_URL is not set: run `scripts/with-moto.sh cargo test -p tuneplane-reconciler` (scripts/test.sh does)")
    });
    let host = url.split("://").nth(1).unwrap_or_default();
    assert!(
        host.starts_with("127.0.0.1:"),
        "refusing non-local AWS_ENDPOINT_URL={url}"
    );
    let addr = host
        .trim_end_matches('/')
        .parse()
        .expect("AWS_ENDPOINT_URL: http://host:port");
    (url, addr)
}

async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    moto_sdk(endpoint)
        // The production retry policy (bounded attempts, standard mode).
        .retry_config(retry_config())
        .load()
        .await
}

/// Seed of the proxy's draws.
const PROXY_SEED: u64 = 0x7e57_0a05;

/// A fresh table and bucket (one name) on moto, with clients that talk to moto directly.
async fn moto_table_and_bucket() -> (
    SocketAddr,
    String,
    aws_sdk_dynamodb::Client,
    aws_sdk_s3::Client,
) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let (url, upstream) = moto_endpoint();
    let direct = sdk_config(&url).await;
    let name = format!(
        "tp-faults-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        tuneplane_core::clock::now_ms()
    );
    let dynamo = dynamodb_client(&direct, None);
    tuneplane_stores::dynamo::table::create_table(&dynamo, &name)
        .await
        .expect("table");
    let s3 = s3_client(&direct, true);
    s3.create_bucket()
        .bucket(&name)
        .send()
        .await
        .expect("bucket");
    (upstream, name, dynamo, s3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamodb_write_whose_answer_was_lost_is_not_a_conflict_when_the_sdk_retries_it() {
    let (upstream, table, dynamo, _s3) = moto_table_and_bucket().await;
    let direct = DynamoJobStore::new(dynamo, table.clone());
    let proxy = FaultProxy::start(upstream, ProxyPlan::none()).await;
    let via = sdk_config(&proxy.url()).await;
    let proxied = DynamoJobStore::new(dynamodb_client(&via, None), table);

    // A create: the item is written, the answer lost; the SDK's retry finds it there.
    proxy.fail_next(ProxyFault::DropAfter, 1);
    let created = proxied
        .create_job(&cpu_job("lost-1"), None)
        .await
        .expect("create after a lost answer");
    assert!(matches!(created, CreateOutcome::Created(ref j) if j.version == 1));

    // A conditional update: written, answer lost, retried against the new version.
    let mut next = created.record().clone();
    next.stop_requested = true;
    proxy.fail_next(ProxyFault::DropAfter, 1);
    let stored = proxied
        .update_job(&next)
        .await
        .expect("update after a lost answer");
    assert_eq!(stored.version, 2);
    let read = direct.get_job("lost-1").await.ok().flatten();
    assert_eq!(read.as_ref(), Some(&stored));
    assert_eq!(proxy.stats.faults_of(ProxyFault::DropAfter), 2);
    // Each call went out twice: the answered-lost attempt and the retry.
    assert!(proxy.stats.requests().get("dynamodb").copied().unwrap_or(0) >= 4);

    // A real conflict is still one: the stored record moved on without this writer.
    let stale = created.record().clone();
    assert!(matches!(
        proxied.update_job(&stale).await,
        Err(StoreError::Conflict { .. })
    ));

    // Versioned documents (the reconciler records a playground's pod) behave the same.
    let pg = PlaygroundRecord {
        id: "pg-lost".into(),
        tenant: "acme".parse().unwrap(),
        model: "m".into(),
        series: "h200".into(),
        gpus: 1,
        pod_name: None,
        created_at_ms: 1,
        expires_at_ms: i64::MAX,
        version: 0,
        pod_namespace: None,
        status: None,
        node: None,
        pod_ip: None,
        server_key: None,
        admitted_at_ms: None,
        ended_at_ms: None,
    };
    proxy.fail_next(ProxyFault::DropAfter, 1);
    let pg = proxied
        .put_playground(&pg)
        .await
        .expect("playground create after a lost answer");
    let mut next = pg.clone();
    next.pod_name = Some("tp-pg-lost".into());
    proxy.fail_next(ProxyFault::DropAfter, 1);
    let stored = proxied
        .put_playground(&next)
        .await
        .expect("playground update after a lost answer");
    assert_eq!(stored.version, 2);
    let read = direct.get_playground("pg-lost").await.ok().flatten();
    assert_eq!(read.as_ref(), Some(&stored));
    assert!(matches!(
        proxied.put_playground(&pg).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(proxy.stats.faults_of(ProxyFault::DropAfter), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_end_once_on_dynamodb_and_s3_behind_a_proxy_that_throttles_drops_and_delays() {
    let started = std::time::Instant::now();
    let (upstream, name, dynamo, s3) = moto_table_and_bucket().await;
    // The test reads and submits directly; only the reconciler goes through the proxy.
    let h = with_stores(
        fast_sim(),
        Arc::new(DynamoJobStore::new(dynamo, name.clone())),
        Arc::new(S3BlobStore::new(s3, name.clone())),
        tempfile::tempdir().unwrap(),
    )
    .await;
    let watch = Workloads::watch(&h);
    let plan = ProxyPlan {
        seed: PROXY_SEED,
        throttle: 0.06,
        server_error: 0.04,
        drop_before: 0.04,
        drop_after: 0.04,
        delay: 0.04,
        max_delay: Duration::from_millis(300),
    };
    let proxy = FaultProxy::start(upstream, plan).await;
    let via = sdk_config(&proxy.url()).await;
    let (_task, ctx) = reconciler_over(
        &h,
        Arc::new(DynamoJobStore::new(
            dynamodb_client(&via, None),
            name.clone(),
        )),
        Arc::new(S3BlobStore::new(s3_client(&via, true), name.clone())),
    )
    .await;
    let all = mix(5, 3, 4);
    for j in &all {
        h.submit(j).await;
    }
    // A short burst where every request is throttled: the SDK's bounded retries give up, so the
    // reconciler itself sees store errors and backs off.
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_outage(true);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    proxy.set_outage(false);

    let done = wait_all_succeeded(&h, &all, 50).await;
    watch.assert_once_and_gone(&done).await;
    assert_state_events(&h, &done).await;

    let stats = &proxy.stats;
    let (_, store_errors, _) = ctx.metrics.step_errors();
    println!(
        "proxy faults: seed {PROXY_SEED:#x}, plan {plan:?}, {} jobs, requests {:?}, injected {:?}, store errors seen {store_errors}, pass errors {}, run {:.1} s",
        all.len(),
        stats.requests(),
        stats.faults(),
        ctx.metrics.pass_errors(),
        started.elapsed().as_secs_f64()
    );
    assert!(stats.broken().is_empty(), "proxy: {:?}", stats.broken());
    for kind in [
        ProxyFault::Throttle,
        ProxyFault::ServerError,
        ProxyFault::DropBefore,
        ProxyFault::DropAfter,
        ProxyFault::Delay,
    ] {
        assert!(
            stats.faults_of(kind) > 0,
            "no {kind:?}: {:?}",
            stats.faults()
        );
    }
    assert!(store_errors > 0, "no store error reached the metrics");
    assert!(metric(&ctx, "tuneplane_pass_backoff_seconds_total") > 0.0);
}
