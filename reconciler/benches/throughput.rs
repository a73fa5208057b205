//! Admission throughput of the real reconciler against kubesim and the embedded store: how fast a
//! burst of queued jobs becomes ADMITTED and RUNNING, and what a pass costs meanwhile (compare:
//! Kueue's scale tests admit ~42 workloads/s). `cargo bench -p tuneplane-reconciler --bench
//! throughput` prints the figures and asserts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location

use std::sync::Arc;
use std::time::{Duration, Instant};

use tuneplane_core::fleet::Fleet;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_kubesim::{KubeSim, SimConfig};
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::{Config, Reconciler};
use tuneplane_testkit::records;

const JOBS: usize = 400;
const NODES: u32 = 200;

fn job(i: usize) -> JobRecord {
    records::queued(&format!("b{i:04}"))
        .spec_field("name", serde_json::json!("b"))
        .image("img:1")
        .pools(vec![records::pool_of(
            "main",
            Some("l40s"),
            1,
            2,
            4.0,
            16.0,
        )])
        .deadlines(600, 3600)
        .spec_field("namespace", serde_json::json!("tuneplane-jobs"))
        .capsule(&"ab".repeat(32))
        .submitted_at(i as i64)
        .build()
}

async fn count(jobs: &dyn JobStore, state: JobState) -> usize {
    jobs.list_active()
        .await
        .map(|a| a.iter().filter(|j| j.state == state).count())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let fleet = format!(
        "node_groups:\n  - {{name: l40s, series: l40s, count: {NODES}, gpus: 4, cpus: 48, memory_gb: 256}}\n"
    );
    let mut config = SimConfig {
        fleet: Some(Fleet::from_yaml(&fleet).expect("fleet")),
        tick: Duration::from_millis(50),
        ..SimConfig::default()
    };
    config.scenario.start_delay = Duration::from_millis(100);
    config.scenario.rayjob_run = Duration::from_secs(3600);
    let sim = KubeSim::start(config).await.expect("kubesim");
    let url = sim.url().parse().expect("kubesim URL");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    let dir = tempfile::tempdir().unwrap();
    let jobs: Arc<dyn JobStore> = Arc::new(
        tuneplane_stores::EmbeddedJobStore::open(dir.path().join("jobs")).expect("job store"),
    );
    let blobs: Arc<dyn BlobStore> = Arc::new(
        tuneplane_stores::FsBlobStore::open(
            dir.path().join("blobs"),
            b"s".to_vec(),
            "http://127.0.0.1:9/b",
        )
        .expect("blob store"),
    );
    for i in 0..JOBS {
        jobs.create_job(&job(i), None).await.expect("create job");
    }
    let settings = Config {
        namespace: "default".into(),
        pass_interval: Duration::from_millis(500),
        kube_qps: 200,
        kube_burst: 400,
        ..Config::default()
    };
    let metrics = Arc::new(Metrics::default());
    let r = Reconciler::new(settings, client, jobs.clone(), blobs, metrics.clone())
        .await
        .expect("reconciler");
    let started = Instant::now();
    let task = tokio::spawn(r.run_until(std::future::pending()));
    let (mut admitted_at, mut running_at) = (None, None);
    while started.elapsed() < Duration::from_secs(300) && running_at.is_none() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if admitted_at.is_none() && metrics.admissions() as usize >= JOBS {
            admitted_at = Some(started.elapsed());
        }
        if count(jobs.as_ref(), JobState::Running).await >= JOBS {
            running_at = Some(started.elapsed());
        }
    }
    task.abort();
    let text = metrics.render();
    let figure = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or("?")
            .to_owned()
    };
    let per_s = |d: Option<Duration>| {
        d.map_or("n/a".into(), |d| {
            format!(
                "{:.0} jobs/s ({:.1} s)",
                JOBS as f64 / d.as_secs_f64(),
                d.as_secs_f64()
            )
        })
    };
    println!(
        "{JOBS} jobs on {NODES} nodes: admitted {}, running {}",
        per_s(admitted_at),
        per_s(running_at)
    );
    println!(
        "passes: {} totalling {} s, last {} s; API throttling {} s",
        figure("tuneplane_pass_duration_seconds_count"),
        figure("tuneplane_pass_duration_seconds_sum"),
        figure("tuneplane_last_pass_duration_seconds"),
        figure("tuneplane_kube_throttled_seconds_total"),
    );
}
