//! [`Ctx`]: what every step of a pass reads and writes through (settings, clients, stores,
//! metrics, leadership) and the little memory a replica keeps between passes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::job::JobState;
use tuneplane_core::store::{BlobStore, JobStore};

use crate::{Config, Result, kube_io, leader, metrics};

/// Counts of one pass, for tests and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Jobs admitted this pass (an admission that failed is not counted).
    pub admitted: usize,
    /// Jobs that stayed queued.
    pub waiting: usize,
    /// Per-job steps that failed (retried next pass).
    pub errors: usize,
    /// Work left for the next pass, which follows at once: admissions planned beyond what this
    /// pass decides (left QUEUED) and admitted jobs whose workload it had no budget to create.
    pub deferred: usize,
    /// How long each phase took, in order (the pass loop logs them when a pass is slow).
    pub phases: Vec<(&'static str, std::time::Duration)>,
}

impl PassReport {
    /// Phases in one line: `read 3ms, sync 120ms, ...`.
    pub fn phase_summary(&self) -> String {
        self.phases
            .iter()
            .map(|(name, d)| format!("{name} {}ms", d.as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Times a pass's phases into its report ([`PassReport::phases`]).
#[derive(Debug)]
pub(crate) struct PhaseClock(std::time::Instant);

impl PhaseClock {
    pub(crate) fn start() -> PhaseClock {
        PhaseClock(std::time::Instant::now())
    }

    /// Ends the phase `name` (begun at the last call) and starts the next.
    pub(crate) fn lap(&mut self, report: &mut PassReport, name: &'static str) {
        let now = std::time::Instant::now();
        report.phases.push((name, now - self.0));
        self.0 = now;
    }
}

/// Everything a pass needs.
pub struct Ctx {
    /// Settings, parsed once at startup; a pass never reads the environment.
    pub config: Config,
    /// The API client with rate limit and retries.
    pub kube: kube_io::Kube,
    /// Job records.
    pub jobs: Arc<dyn JobStore>,
    /// Capsules and log archives.
    pub blobs: Arc<dyn BlobStore>,
    /// Counters and gauges served on `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
    /// Whether this replica leads.
    pub leadership: Arc<leader::Leadership>,
    /// Kubernetes event uids already copied, per job (the store dedupes too; this saves writes).
    pub seen_events: Mutex<HashMap<String, HashSet<String>>>,
    /// When this process last wrote each queued job's pending reason.
    pub pending_written: Mutex<HashMap<String, i64>>,
    /// When this process last made sure of each shared object CPU-only job Pods need (its
    /// namespace's NetworkPolicy, its tenant's grant seal Secret), by kind, namespace and name
    /// (`workload::ensure_shared`).
    pub shared_objects: Mutex<HashMap<String, std::time::Instant>>,
    /// Held while a shared object is made sure of, so admissions running side by side in one
    /// pass make it once, not once each.
    pub shared_create: tokio::sync::Mutex<()>,
    /// Workloads this process created, and when: until the watch shows one (or
    /// `cluster::TRUST_OWN_CREATE` passes), a pass does not take its absence from the cluster
    /// cache for a lost workload and create it again.
    pub created_workloads: Mutex<HashMap<String, std::time::Instant>>,
    /// NetworkPolicies kept after their workload until its last pod is gone (`policies`).
    pub lingering: Mutex<crate::policies::Lingering>,
    /// Log archives of a job that failed on API server errors so far, as this process counted
    /// them (jobs with an active record also count them on it: `JobRecord::archive_failures`).
    pub archive_failures: Mutex<HashMap<String, u32>>,
    /// Live log shipping (its state, budget and counters).
    pub live: crate::live_logs::LiveLogs,
    /// Log archives being written beside the passes, and their outcomes.
    pub archives: crate::archives::Archives,
    /// Workload creates running beside the passes, and the ones waiting for a slot.
    pub creates: crate::creates::Creates,
    /// Running jobs' newest complete checkpoints, as preemption last looked them up.
    pub checkpoints: crate::checkpoint_cache::CheckpointCache,
    /// Array children that ended, by parent, as this process read them (`arrays`): each is read
    /// once, and a parent's counts are rebuilt from them.
    pub array_ended: Mutex<HashMap<String, HashMap<String, JobState>>>,
    /// Ended jobs that other jobs depend on, with how they ended (`dependencies`): read once.
    pub dependency_ends: Mutex<HashMap<String, JobState>>,
    /// Wakes the pass loop (watch events; an archive that ended).
    pub wake: Arc<tokio::sync::Notify>,
    /// The last published capacity (without its timestamp) and when it was published.
    published: Mutex<Option<(CapacitySnapshot, i64)>>,
}

/// Republish an unchanged snapshot at least this often, so readers see a fresh `taken_at_ms`.
const CAPACITY_REFRESH_MS: i64 = 30_000;

impl Ctx {
    /// A context over the given parts.
    pub fn new(
        config: Config,
        kube: kube_io::Kube,
        jobs: Arc<dyn JobStore>,
        blobs: Arc<dyn BlobStore>,
        metrics: Arc<metrics::Metrics>,
        leadership: Arc<leader::Leadership>,
    ) -> Ctx {
        let live = crate::live_logs::LiveLogs::new(
            tuneplane_core::live::LiveSettings::default(),
            kube.client.clone(),
            metrics.clone(),
        );
        let wake = Arc::new(tokio::sync::Notify::new());
        Ctx {
            live,
            archives: crate::archives::Archives::new(wake.clone()),
            creates: crate::creates::Creates::new(
                crate::creates::in_flight_limit(config.kube_qps),
                metrics.clone(),
            ),
            wake,
            config,
            kube,
            jobs,
            blobs,
            metrics,
            leadership,
            seen_events: Mutex::new(HashMap::new()),
            pending_written: Mutex::new(HashMap::new()),
            array_ended: Mutex::new(HashMap::new()),
            dependency_ends: Mutex::new(HashMap::new()),
            checkpoints: crate::checkpoint_cache::CheckpointCache::default(),
            shared_objects: Mutex::new(HashMap::new()),
            shared_create: tokio::sync::Mutex::new(()),
            created_workloads: Mutex::new(HashMap::new()),
            archive_failures: Mutex::new(HashMap::new()),
            lingering: Mutex::new(crate::policies::Lingering::default()),
            published: Mutex::new(None),
        }
    }

    /// When this process last wrote job `id`'s pending reason, if it did.
    pub fn pending_written_at(&self, id: &str) -> Option<i64> {
        self.pending_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()
    }

    /// Notes that job `id`'s pending reason was written at `now`.
    pub fn note_pending_written(&self, id: &str, now: i64) {
        self.pending_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), now);
    }

    /// Publishes the capacity snapshot when it changed (or every 30 s).
    pub async fn publish_capacity(&self, snapshot: &CapacitySnapshot) -> Result<()> {
        let mut bare = snapshot.clone();
        bare.taken_at_ms = 0;
        let now = i64::try_from(snapshot.taken_at_ms).unwrap_or(0);
        let due = {
            let last = self.published.lock().unwrap_or_else(|p| p.into_inner());
            last.as_ref()
                .is_none_or(|(prev, at)| *prev != bare || now - at > CAPACITY_REFRESH_MS)
        };
        if due {
            let json = serde_json::to_value(snapshot).unwrap_or_default();
            self.jobs.put_capacity(&json).await?;
            *self.published.lock().unwrap_or_else(|p| p.into_inner()) = Some((bare, now));
        }
        Ok(())
    }
}
