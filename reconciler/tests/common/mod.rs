//! Shared harness of the reconciler's integration tests: kubesim on 127.0.0.1:0 with a small fleet,
//! the embedded job store and filesystem blobs in a temporary directory, job builders, a reconciler
//! that runs as a task (dropping the task is a crash), and a bounded wait helper.
//!
//! The scenario suite (lifecycle, pending, cleanup, leader, crash) runs on either backend, chosen by
//! one setting: `TUNEPLANE_TEST_K8S=real` runs it against a real control plane ([`real`]) instead of
//! kubesim. Waits are three times longer there (the real KubeRay operator and scheduler requeue on
//! their own clocks).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;
use tokio::task::JoinHandle;
use tuneplane_core::fleet::Fleet;
use tuneplane_core::job::{JobRecord, JobState, PendingReason};
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_kubesim::{KubeSim, SimConfig};
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::rayjob::{self, RayJob};
use tuneplane_reconciler::{Config, Ctx, Reconciler};
use tuneplane_stores::{EmbeddedJobStore, FsBlobStore};

pub mod real;

/// A capsule hash (the capsule is never downloaded in simulation mode).
pub const SHA: &str = "5f0c6a1b2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccdd0";

/// Two h200 nodes (8 GPUs), one l40s node (4 GPUs), one CPU node; GPU nodes carry the GPU taint.
pub const FLEET: &str = "\
node_groups:
  - {name: h200, series: h200, count: 2, gpus: 8, cpus: 96, memory_gb: 1024, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: l40s, series: l40s, count: 1, gpus: 4, cpus: 48, memory_gb: 256, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";

/// Three h200 nodes of 8 GPUs and a CPU node.
pub const H200_X3: &str = "\
node_groups:
  - {name: h200, series: h200, count: 3, gpus: 8, cpus: 96, memory_gb: 1024, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";

/// One h200 node that also carries a `maintenance` taint TunePlane's pods do not tolerate, and one
/// CPU node.
pub const TAINTED_H200: &str = "\
node_groups:
  - {name: h200, series: h200, count: 1, gpus: 8, cpus: 96, memory_gb: 1024, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}, {key: maintenance, value: 'true', effect: NoSchedule}]}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";

/// A fast simulator over `fleet` (RayJobs run `rayjob_run`, CPU pods `pod_run`).
pub fn sim_config(fleet: &str, rayjob_run: Duration, pod_run: Option<Duration>) -> SimConfig {
    let mut config = SimConfig {
        fleet: Some(Fleet::from_yaml(fleet).expect("fleet")),
        tick: Duration::from_millis(20),
        ..SimConfig::default()
    };
    config.scenario.start_delay = Duration::from_millis(50);
    config.scenario.rayjob_run = rayjob_run;
    config.scenario.pod_run = pod_run;
    config
}

/// A fast simulator over [`FLEET`] where RayJobs and CPU pods both run for `run`.
pub fn running_for(run: Duration) -> SimConfig {
    sim_config(FLEET, run, Some(run))
}

/// The cluster of a scenario.
pub enum Cluster {
    /// kubesim in this process.
    Sim(KubeSim),
    /// The real control plane.
    Real(Box<real::Real>),
}

/// Ends the calling test early, saying why, when it runs on the real control plane: for the
/// scenarios that cannot run there (each names its reason; the README lists them).
#[macro_export]
macro_rules! kubesim_only {
    ($why:expr) => {
        if $crate::common::real::is_real() {
            eprintln!("skipped on the real control plane: {}", $why);
            return;
        }
    };
}

/// A cluster, clients for it and the stores.
pub struct Harness {
    /// The cluster.
    pub cluster: Cluster,
    /// An admin client for the test's own reads and writes.
    pub client: kube::Client,
    /// The reconciler's client (on the real cluster: its ServiceAccount, with infra's RBAC).
    pub reconciler_client: kube::Client,
    /// Job store.
    pub jobs: Arc<dyn JobStore>,
    /// Blob store.
    pub blobs: Arc<dyn BlobStore>,
    _dir: tempfile::TempDir,
}

/// Starts kubesim with `config` and embedded stores.
pub async fn start(config: SimConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, blobs) = embedded_stores(dir.path());
    with_stores(config, jobs, blobs, dir).await
}

/// The embedded job store and a filesystem blob store in `dir`.
fn embedded_stores(dir: &std::path::Path) -> (Arc<dyn JobStore>, Arc<dyn BlobStore>) {
    let jobs = EmbeddedJobStore::open(dir.join("jobs")).unwrap();
    let blobs = FsBlobStore::open(
        dir.join("blobs"),
        b"test-secret".to_vec(),
        "http://127.0.0.1:9/blobs",
    )
    .unwrap();
    (Arc::new(jobs), Arc::new(blobs))
}

/// [`start`], with pods run for real on the real control plane (real Ray through the real
/// operator); kubesim keeps its model.
pub async fn start_executing(config: SimConfig) -> Harness {
    if !real::is_real() {
        return start(config).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let (jobs, blobs) = embedded_stores(dir.path());
    let execution = real::execution(&dir.path().join("agent"));
    let (client, reconciler_client, cluster) =
        real::start_with(&config, dir.path(), Some(execution)).await;
    Harness {
        cluster: Cluster::Real(Box::new(cluster)),
        client,
        reconciler_client,
        jobs,
        blobs,
        _dir: dir,
    }
}

/// Starts kubesim with `config` and the given stores.
pub async fn with_stores(
    config: SimConfig,
    jobs: Arc<dyn JobStore>,
    blobs: Arc<dyn BlobStore>,
    dir: tempfile::TempDir,
) -> Harness {
    if real::is_real() {
        let (client, reconciler_client, cluster) = real::start(&config, dir.path()).await;
        return Harness {
            cluster: Cluster::Real(Box::new(cluster)),
            client,
            reconciler_client,
            jobs,
            blobs,
            _dir: dir,
        };
    }
    let mut config = config;
    config
        .namespaces
        .push(tuneplane_reconciler::access::SYSTEM_NAMESPACE.into());
    let sim = KubeSim::start(config).await.expect("kubesim");
    let url = sim.url().parse().expect("url");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    Harness {
        cluster: Cluster::Sim(sim),
        reconciler_client: client.clone(),
        client,
        jobs,
        blobs,
        _dir: dir,
    }
}

/// Reconciler settings for tests: fast passes, a short lease in the reconciler's own namespace.
pub fn test_config(identity: &str) -> Config {
    Config {
        namespace: tuneplane_reconciler::access::SYSTEM_NAMESPACE.into(),
        identity: identity.into(),
        pass_interval: Duration::from_millis(100),
        lease_duration: Duration::from_secs(1),
        kube_qps: 500,
        kube_burst: 500,
        ..Config::default()
    }
}

/// Starts a reconciler over `client` and the given stores as a task; abort the handle to crash it.
pub async fn spawn_reconciler(
    config: Config,
    client: kube::Client,
    jobs: Arc<dyn JobStore>,
    blobs: Arc<dyn BlobStore>,
) -> (JoinHandle<()>, Arc<Ctx>) {
    let r = Reconciler::new(config, client, jobs, blobs, Arc::new(Metrics::default()))
        .await
        .expect("reconciler");
    let ctx = r.ctx();
    let task = tokio::spawn(async move {
        if let Err(e) = r.run_until(std::future::pending()).await {
            panic!("reconciler stopped: {e}");
        }
    });
    (task, ctx)
}

impl Harness {
    /// The simulator; panics on the real backend (callers are kubesim-only tests).
    pub fn sim(&self) -> &KubeSim {
        match &self.cluster {
            Cluster::Sim(sim) => sim,
            Cluster::Real(_) => panic!("this test needs kubesim (it steers the simulator)"),
        }
    }

    /// Whether the scenario runs on the real control plane.
    pub fn is_real(&self) -> bool {
        matches!(self.cluster, Cluster::Real(_))
    }

    /// Marks a node Ready or NotReady (kubesim directly; on the real cluster through the agent).
    pub async fn set_node_ready(&self, node: &str, ready: bool) {
        match &self.cluster {
            Cluster::Sim(sim) => sim.set_node_ready(node, ready).unwrap(),
            Cluster::Real(r) => r.testbed.agent.set_node_ready(node, ready).await.unwrap(),
        }
    }

    /// Starts a reconciler as a task; abort the handle to crash it.
    pub async fn reconciler(&self, config: Config) -> (JoinHandle<()>, Arc<Ctx>) {
        spawn_reconciler(
            config,
            self.reconciler_client.clone(),
            self.jobs.clone(),
            self.blobs.clone(),
        )
        .await
    }

    /// Stores a queued job.
    pub async fn submit(&self, job: &JobRecord) {
        self.jobs.create_job(job, None).await.expect("create job");
    }

    /// Reads a job.
    pub async fn job(&self, id: &str) -> JobRecord {
        self.jobs
            .get_job(id)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("job {id} missing"))
    }

    /// Waits until job `id` satisfies `check`.
    pub async fn wait_job(
        &self,
        secs: u64,
        id: &str,
        what: &str,
        check: impl Fn(&JobRecord) -> bool,
    ) -> JobRecord {
        wait_for(secs, &format!("job {id} {what}"), || async {
            self.jobs
                .get_job(id)
                .await
                .ok()
                .flatten()
                .filter(|j| check(j))
        })
        .await
    }

    /// Waits until job `id` is in `state`.
    pub async fn wait_state(&self, secs: u64, id: &str, state: JobState) -> JobRecord {
        self.wait_job(secs, id, state.as_str(), |j| j.state == state)
            .await
    }

    /// Waits until job `id` is pending for `reason`.
    pub async fn wait_pending(&self, secs: u64, id: &str, reason: PendingReason) -> JobRecord {
        self.wait_job(secs, id, &format!("pending {reason:?}"), |j| {
            j.pending.as_ref().is_some_and(|p| p.reason == reason)
        })
        .await
    }

    /// Requests that job `id` stop, as the API does (re-reading the record when a concurrent
    /// reconciler write moved its version).
    pub async fn request_stop(&self, id: &str) {
        for _ in 0..5 {
            let mut job = self.job(id).await;
            job.stop_requested = true;
            if self.jobs.update_job(&job).await.is_ok() {
                return;
            }
        }
        panic!("the stop request of job {id} kept meeting version conflicts");
    }

    /// The capacity snapshot the reconciler publishes (`null` before the first).
    pub async fn capacity(&self) -> serde_json::Value {
        self.jobs
            .get_capacity()
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// The RayJobs of the jobs' namespace.
    pub fn rayjobs(&self) -> Api<RayJob> {
        Api::namespaced_with(self.client.clone(), "tuneplane-jobs", &rayjob::resource())
    }

    /// The pods of the jobs' namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "tuneplane-jobs")
    }

    /// The pods labelled with job `id`.
    pub async fn job_pods(&self, id: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(&format!("tuneplane.io/job-id={id}")))
            .await
            .expect("list pods")
            .items
    }

    /// Waits until the RayJob `name` is gone.
    pub async fn wait_rayjob_gone(&self, secs: u64, name: &str) {
        let api = self.rayjobs();
        wait_for(secs, &format!("{name} deleted"), || async {
            api.get_opt(name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
    }
}

/// The AWS SDK settings of the tests against the local moto `endpoint`: explicit test credentials
/// and region, so the SDK never probes the instance metadata service.
pub fn moto_sdk(endpoint: &str) -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "tuneplane-tests",
        ))
}

/// A pool as JSON.
pub fn pool(name: &str, series: Option<&str>, nodes: u32, gpus: u32) -> serde_json::Value {
    json!({"name": name, "series": series, "nodes": nodes, "gpus_per_node": gpus, "cpus": 8.0, "memory_gb": 32.0})
}

/// A queued job with `pools`, `image` and a pre-running deadline.
pub fn job(
    id: &str,
    pools: Vec<serde_json::Value>,
    image: &str,
    pre_running_seconds: u64,
) -> JobRecord {
    tuneplane_testkit::records::queued(id)
        .tenant("acme")
        .capsule(SHA)
        .submitted_at(tuneplane_core::clock::now_ms())
        .pools(pools)
        .image(image)
        .deadlines(pre_running_seconds, 3600)
        .spec_field("entrypoint", json!("python train.py"))
        .spec_field("env", json!({"EPOCHS": "1"}))
        .spec_field("labels", json!({"team": "nlp"}))
        .spec_field("namespace", json!("tuneplane-jobs"))
        .spec_field("platform_version", json!("0.1.0"))
        .build()
}

/// A queued job on one pool `main` of `nodes` × `gpus` of `series`, with the train image and a
/// 60 s pre-running deadline.
pub fn gpu_job(id: &str, series: &str, nodes: u32, gpus: u32) -> JobRecord {
    job(
        id,
        vec![pool("main", Some(series), nodes, gpus)],
        "ghcr.io/acme/train:1",
        60,
    )
}

/// `job` with a pre-running deadline of `secs`.
pub fn pre_running(mut job: JobRecord, secs: u64) -> JobRecord {
    job.spec.deadlines.pre_running_seconds = secs;
    job
}

/// The state a GPU job that runs to its end reaches: SUCCEEDED on kubesim; on the real control
/// plane FAILED, at the short run deadline [`finishing`] gives it (KubeRay reads a job's own end
/// from the Ray head's dashboard, which fake nodes do not run, but enforces
/// `activeDeadlineSeconds` itself).
pub fn ray_end() -> JobState {
    if real::is_real() {
        JobState::Failed
    } else {
        JobState::Succeeded
    }
}

/// `job` made to end on either backend: on the real control plane a GPU job gets a 5 s run
/// deadline (see [`ray_end`]); CPU jobs and kubesim runs are unchanged.
pub fn finishing(mut job: JobRecord) -> JobRecord {
    let gpu = job.spec.pools.iter().any(|p| p.gpus_per_node > 0);
    if real::is_real() && gpu {
        job.spec.deadlines.run_seconds = 5;
    }
    job
}

/// A CPU-only job.
pub fn cpu_job(id: &str) -> JobRecord {
    let mut p = pool("main", None, 1, 0);
    p["cpus"] = json!(2.0);
    p["memory_gb"] = json!(4.0);
    job(id, vec![p], "python:3.12-slim", 60)
}

/// Polls `check` every 25 ms until it returns `Some`, failing after `secs` seconds.
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    // The real control plane is slower than kubesim: the same wait, three times as long.
    let secs = if real::is_real() { secs * 3 } else { secs };
    tuneplane_testkit::poll_every(Duration::from_millis(25), secs, what, check).await
}

/// The entries of a `.tar.gz` as (path, text).
pub fn untar(bytes: &[u8]) -> Vec<(String, String)> {
    use std::io::Read;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        out.push((
            entry
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            text,
        ));
    }
    out
}

/// Asserts the job is terminal, holds its logs key and the archive exists with an index.
pub async fn assert_logs_archived(h: &Harness, job: &JobRecord) -> Vec<(String, String)> {
    assert!(job.is_terminal(), "{} is {}", job.id, job.state);
    let key = job
        .logs_key
        .clone()
        .unwrap_or_else(|| panic!("job {} has no logs key", job.id));
    assert_eq!(key, format!("logs/{}/logs.tar.gz", job.id));
    let bytes = h
        .blobs
        .get(&key)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no archive at {key}"));
    let entries = untar(&bytes);
    assert_eq!(entries.first().map(|e| e.0.as_str()), Some("index.json"));
    entries
}

/// Every uid each object name ever had (a name with two uids was created twice).
pub type Uids = std::sync::Arc<
    std::sync::Mutex<std::collections::BTreeMap<String, std::collections::BTreeSet<String>>>,
>;

/// What the tests' watchers can watch: the reconciler's own bound.
pub use tuneplane_reconciler::kube_io::Watched;

/// Watches `api` with `config` and hands every applied object to `seen`. The task runs until
/// aborted or dropped with the runtime.
pub fn watch_applied<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    mut seen: impl FnMut(K) + Send + 'static,
) -> JoinHandle<()> {
    use futures_util::StreamExt;
    use kube::runtime::WatchStreamExt;
    tokio::spawn(async move {
        let mut stream = kube::runtime::watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(item) = stream.next().await {
            if let Ok(obj) = item {
                seen(obj);
            }
        }
    })
}

/// Watches `api` with `config` and records into `uids` every uid each object name accepted by
/// `keep` ever had. The task runs until aborted or dropped with the runtime.
pub fn track_uids<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    keep: impl Fn(&str) -> bool + Send + 'static,
    uids: Uids,
) -> JoinHandle<()> {
    use kube::ResourceExt;
    watch_applied(api, config, move |obj| {
        if keep(&obj.name_any()) {
            let mut map = uids.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(obj.name_any())
                .or_default()
                .insert(obj.uid().unwrap_or_default());
        }
    })
}
