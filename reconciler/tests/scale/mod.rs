//! Shared by the tests that run many jobs through reconcilers that get killed (`crash_scale.rs`,
//! `failover_load.rs`): a seeded PRNG, the job mix with the final state each job must reach, a
//! "user" that sets stop flags, watchers that record every uid each workload name had, and the
//! final invariant check.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::watcher;
use serde_json::json;
use tuneplane_core::job::{FailureReason, JobRecord, JobState};
use tuneplane_core::render::workload_name;
use tuneplane_core::store::EventQuery;
use tuneplane_kubesim::SimConfig;

use crate::common::{Harness, job, pool, sim_config, start, wait_for};

/// Image that runs and exits 0.
pub const TRAIN: &str = "ghcr.io/acme/train:1";
/// Image whose containers exit 1 right after starting.
pub const CRASH: &str = "ghcr.io/acme/crash:1";
/// Image that cannot be pulled.
pub const MISSING: &str = "ghcr.io/acme/missing:1";

/// Small enough that 200 jobs cycle through it: three h200 nodes (8 GPUs), two l40s nodes
/// (4 GPUs), one CPU node with room for eight CPU jobs.
pub const FLEET: &str = "\
node_groups:
  - {name: h200, series: h200, count: 3, gpus: 8, cpus: 96, memory_gb: 1024, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: l40s, series: l40s, count: 2, gpus: 4, cpus: 48, memory_gb: 256, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";

/// The simulator of these tests: short runs, the crash and pull-failure images.
pub fn config() -> SimConfig {
    let mut config = sim_config(
        FLEET,
        Duration::from_millis(300),
        Some(Duration::from_millis(300)),
    );
    config.scenario.crash_images = vec![CRASH.into()];
    config.scenario.image_pull_failures = vec![MISSING.into()];
    config
}

/// The kill schedule's generator (kubesim's SplitMix64).
pub use tuneplane_kubesim::SplitMix64 as Rng;

/// The seed from `TUNEPLANE_CRASH_SEED` (decimal or 0x-hex), else `default`.
pub fn seed(default: u64) -> u64 {
    match std::env::var("TUNEPLANE_CRASH_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.expect("TUNEPLANE_CRASH_SEED: a number (decimal or 0x hex)")
        }
        Err(_) => default,
    }
}

/// What a job of the mix is, and so how it must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// CPU Pod that exits 0.
    Cpu,
    /// CPU Pod whose container exits 1: FAILED (entrypoint).
    CpuCrash,
    /// RayJob on a whole h200 node.
    H200Full,
    /// RayJob on half an h200 node.
    H200Half,
    /// RayJob on a whole l40s node.
    L40s,
    /// RayJob with an h200 pool and an l40s pool.
    TwoSeries,
    /// RayJob on two whole h200 nodes: waits until both are free, and everything behind waits too.
    Gang,
    /// RayJob whose image cannot be pulled, 1 s pre-running deadline: FAILED (deadline).
    PullFails,
    /// RayJob whose image cannot be pulled, stopped by its user once admitted: STOPPED.
    StoppedAdmitted,
    /// RayJob that can never fit the fleet, stopped by its user while queued: STOPPED, never
    /// admitted, never a workload.
    StoppedQueued,
}

impl Kind {
    /// The kind of job number `i`: per 20 jobs 7 CPU, 1 crashing CPU, 2 whole h200, 3 half
    /// h200, 2 l40s, 1 two-series, 1 gang, 1 pull failure, 1 stopped admitted, 1 stopped queued.
    pub fn of(i: usize) -> Kind {
        match i % 20 {
            0..=4 | 17 | 18 => Kind::Cpu,
            5 => Kind::CpuCrash,
            6 | 7 => Kind::H200Full,
            8 | 9 | 19 => Kind::H200Half,
            10 | 11 => Kind::L40s,
            12 => Kind::TwoSeries,
            13 => Kind::Gang,
            14 => Kind::PullFails,
            15 => Kind::StoppedAdmitted,
            _ => Kind::StoppedQueued,
        }
    }

    /// The final state and, for failures, the reason.
    pub fn expected(self) -> (JobState, Option<FailureReason>) {
        match self {
            Kind::CpuCrash => (JobState::Failed, Some(FailureReason::EntrypointFailed)),
            Kind::PullFails => (
                JobState::Failed,
                Some(FailureReason::PreRunningDeadlineExceeded),
            ),
            Kind::StoppedAdmitted | Kind::StoppedQueued => {
                (JobState::Stopped, Some(FailureReason::StopRequested))
            }
            _ => (JobState::Succeeded, None),
        }
    }

    /// Whether the job is ever admitted (and so gets a workload).
    pub fn admitted(self) -> bool {
        self != Kind::StoppedQueued
    }

    /// Whether the workload is a plain Pod (else a RayJob).
    pub fn is_pod(self) -> bool {
        matches!(self, Kind::Cpu | Kind::CpuCrash)
    }
}

fn cpu_pool(image: &str, id: &str) -> JobRecord {
    let mut p = pool("main", None, 1, 0);
    p["cpus"] = json!(2.0);
    p["memory_gb"] = json!(4.0);
    job(id, vec![p], image, 600)
}

/// Job `id` of `kind`.
pub fn record(id: &str, kind: Kind) -> JobRecord {
    let h200 = |nodes, gpus| pool("main", Some("h200"), nodes, gpus);
    match kind {
        Kind::Cpu => cpu_pool(TRAIN, id),
        Kind::CpuCrash => cpu_pool(CRASH, id),
        Kind::H200Full => job(id, vec![h200(1, 8)], TRAIN, 600),
        Kind::H200Half => job(id, vec![h200(1, 4)], TRAIN, 600),
        Kind::L40s => job(id, vec![pool("main", Some("l40s"), 1, 4)], TRAIN, 600),
        Kind::TwoSeries => job(
            id,
            vec![h200(1, 4), pool("eval", Some("l40s"), 1, 2)],
            TRAIN,
            600,
        ),
        Kind::Gang => job(id, vec![h200(2, 8)], TRAIN, 600),
        Kind::PullFails => job(id, vec![pool("main", Some("l40s"), 1, 2)], MISSING, 1),
        Kind::StoppedAdmitted => job(id, vec![h200(1, 8)], MISSING, 600),
        Kind::StoppedQueued => job(id, vec![h200(5, 8)], TRAIN, 600),
    }
}

/// The ids and kinds of `n` jobs with ids `<prefix>000`, `<prefix>001`, ...
pub fn mix(prefix: &str, n: usize) -> Vec<(String, Kind)> {
    (0..n)
        .map(|i| (format!("{prefix}{i:03}"), Kind::of(i)))
        .collect()
}

pub use crate::common::Uids;
use crate::common::track_uids;

/// Watches the RayJobs and the CPU jobs' Pods of `jobs` from now on.
pub struct Tracker {
    /// Every uid per workload name.
    pub uids: Uids,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Tracker {
    /// Starts the watchers.
    pub fn start(h: &Harness, jobs: &[(String, Kind)]) -> Tracker {
        let uids: Uids = Arc::default();
        let names = |pods: bool| {
            jobs.iter()
                .filter(|(_, k)| k.is_pod() == pods)
                .map(|(id, _)| workload_name(id))
                .collect::<BTreeSet<_>>()
        };
        let (rayjobs, pods) = (h.rayjobs(), h.pods());
        let (rayjob_names, pod_names) = (names(false), names(true));
        let tasks = vec![
            track_uids(
                rayjobs,
                watcher::Config::default(),
                move |n| rayjob_names.contains(n),
                uids.clone(),
            ),
            track_uids(
                pods,
                watcher::Config::default(),
                move |n| pod_names.contains(n),
                uids.clone(),
            ),
        ];
        Tracker { uids, tasks }
    }

    /// Workload creations seen so far (uids over all names).
    pub fn created(&self) -> usize {
        self.uids
            .lock()
            .map(|m| m.values().map(BTreeSet::len).sum())
            .unwrap_or(0)
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A user who asks to stop the jobs meant to be stopped: a queued one once the reconciler has
/// given it a pending reason, an admitted one once it is admitted. Runs until aborted.
pub fn stopper(h: &Harness, jobs: &[(String, Kind)]) -> tokio::task::JoinHandle<()> {
    let store = h.jobs.clone();
    let mut left: Vec<(String, Kind)> = jobs
        .iter()
        .filter(|(_, k)| matches!(k, Kind::StoppedAdmitted | Kind::StoppedQueued))
        .cloned()
        .collect();
    tokio::spawn(async move {
        while !left.is_empty() {
            let mut still = Vec::new();
            for (id, kind) in left {
                let Ok(Some(mut j)) = store.get_job(&id).await else {
                    still.push((id, kind));
                    continue;
                };
                if j.stop_requested || j.is_terminal() {
                    continue;
                }
                let due = match kind {
                    Kind::StoppedQueued => j.state == JobState::Queued && j.pending.is_some(),
                    _ => j.state == JobState::Admitted,
                };
                if due {
                    j.stop_requested = true;
                    // A conflict (the reconciler wrote first) is retried on the next round.
                    let _ = store.update_job(&j).await;
                }
                still.push((id, kind));
            }
            left = still;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// A scale run under way: kubesim with [`config`], the job mix, its [`Tracker`] and [`stopper`],
/// and the submissions, in waves due one `gap` apart from the start.
pub struct Run {
    /// The cluster and stores.
    pub h: Harness,
    /// The job mix.
    pub jobs: Vec<(String, Kind)>,
    /// The workloads' uids.
    pub tracker: Tracker,
    /// When the run started (wave 0 is due then).
    pub started: tokio::time::Instant,
    stopper: tokio::task::JoinHandle<()>,
    /// Callbacks every submitted job names; when set, each submission is stored with its
    /// `submitted` event, as the submit service stores it (the `queued` callback).
    pub notify: Vec<tuneplane_core::callback::Notify>,
    per_wave: usize,
    gap: Duration,
    submitted: usize,
}

impl Run {
    /// Starts the cluster, the mix of `n` jobs named `prefix-…` in `waves` waves `gap` apart, the
    /// tracker and the stopper; submits nothing yet.
    pub async fn start(prefix: &str, n: usize, waves: usize, gap: Duration) -> Run {
        let h = start(config()).await;
        let jobs = mix(prefix, n);
        let tracker = Tracker::start(&h, &jobs);
        let stopper = stopper(&h, &jobs);
        Run {
            h,
            per_wave: n.div_ceil(waves),
            jobs,
            tracker,
            started: tokio::time::Instant::now(),
            stopper,
            notify: Vec::new(),
            gap,
            submitted: 0,
        }
    }

    /// Submits every wave that is due.
    pub async fn submit_due_waves(&mut self) {
        loop {
            let from = self.submitted * self.per_wave;
            let due = self.gap * u32::try_from(self.submitted).unwrap_or(u32::MAX);
            if from >= self.jobs.len() || self.started.elapsed() < due {
                return;
            }
            let to = (from + self.per_wave).min(self.jobs.len());
            for (id, kind) in &self.jobs[from..to] {
                let mut job = record(id, *kind);
                if self.notify.is_empty() {
                    self.h.submit(&job).await;
                    continue;
                }
                job.spec.notify = self.notify.clone();
                let submitted = tuneplane_core::job::JobEvent {
                    at_ms: job.submitted_at_ms,
                    key: "submitted".into(),
                    source: tuneplane_core::job::EventSource::Platform,
                    kind: "Normal".into(),
                    reason: "Submitted".into(),
                    message: "submitted (test)".into(),
                    object: None,
                };
                let new = tuneplane_core::store::NewJob {
                    job: &job,
                    idem: None,
                    events: &[submitted],
                    audit: None,
                };
                self.h.jobs.create(new).await.expect("create job");
            }
            self.submitted += 1;
        }
    }

    /// Whether every wave was submitted.
    pub fn all_submitted(&self) -> bool {
        self.submitted * self.per_wave >= self.jobs.len()
    }

    /// Jobs not terminal yet.
    pub async fn active(&self) -> usize {
        active(&self.h).await
    }

    /// Waits for the end and asserts the invariants (see [`check`]).
    pub async fn check(&self) -> Outcome {
        check(&self.h, &self.jobs, &self.tracker).await
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.stopper.abort();
    }
}

/// Jobs not terminal yet.
pub async fn active(h: &Harness) -> usize {
    h.jobs.list_active().await.map_or(usize::MAX, |a| a.len())
}

/// A counter from the metrics text (`tuneplane_orphans_deleted_total`, ...), 0 when absent.
pub fn metric(text: &str, name: &str) -> u64 {
    tuneplane_testkit::metric(text, name).map_or(0, |v| v as u64)
}

/// Figures of the final check.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Jobs per final state.
    pub by_state: BTreeMap<String, usize>,
    /// Workloads created (uids seen).
    pub workloads: usize,
}

/// The times of a job's events, by key.
async fn events_by_key(h: &Harness, id: &str) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut query = EventQuery::first(500);
    loop {
        let page = h
            .jobs
            .list_events(id, &query)
            .await
            .expect("events of a job");
        for e in page.items {
            out.entry(e.key).or_default().push(e.at_ms);
        }
        query.cursor = page.next;
        if query.cursor.is_none() {
            return out;
        }
    }
}

/// Waits (bounded) for every job to be terminal and every workload gone, then asserts the
/// invariants: no RayJob or CPU Pod left, no workload name ever had two uids, every job that ran
/// had its workload, each job in its expected state with its logs archive, and each state it
/// went through recorded by exactly one event dated as the record dates that state
/// (`state-ADMITTED` exactly once for admitted jobs, never for the others) — record and event are
/// written atomically, so no crash can separate them.
pub async fn check(h: &Harness, jobs: &[(String, Kind)], tracker: &Tracker) -> Outcome {
    wait_for(90, "every job terminal", || async {
        (active(h).await == 0).then_some(())
    })
    .await;
    let (rayjobs, pods) = (h.rayjobs(), h.pods());
    let cpu_workloads: BTreeSet<String> = jobs
        .iter()
        .filter(|(_, k)| k.is_pod())
        .map(|(id, _)| workload_name(id))
        .collect();
    wait_for(30, "every workload deleted", || async {
        let rj = rayjobs.list(&Default::default()).await.ok()?.items;
        let cpu = pods
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| cpu_workloads.contains(&p.name_any()))
            .count();
        (rj.is_empty() && cpu == 0).then_some(())
    })
    .await;

    let mut outcome = Outcome::default();
    // Every broken promise, so one run shows them all.
    let mut broken: Vec<String> = Vec::new();
    let map = tracker.uids.lock().map(|m| m.clone()).unwrap_or_default();
    for (name, set) in &map {
        if set.len() != 1 {
            broken.push(format!("{name} was created {} times", set.len()));
        }
    }
    for (id, kind) in jobs {
        let name = workload_name(id);
        let had_workload = map.contains_key(&name);
        match kind {
            // Never admitted: never a workload.
            Kind::StoppedQueued if had_workload => broken.push(format!("{name} exists")),
            // A 1 s pre-running deadline can pass, or the stop come, before a crashed
            // reconciler's successor creates the workload.
            Kind::StoppedQueued | Kind::PullFails | Kind::StoppedAdmitted => {}
            _ if !had_workload => broken.push(format!("{name} was never seen")),
            _ => {}
        }

        let j = h.job(id).await;
        let (state, reason) = kind.expected();
        if (j.state, j.failure.as_ref().map(|f| f.reason)) != (state, reason) {
            broken.push(format!(
                "job {id} ({kind:?}) ended {} {:?}, expected {state} {reason:?}",
                j.state, j.failure
            ));
        }
        *outcome.by_state.entry(j.state.to_string()).or_insert(0) += 1;
        crate::common::assert_logs_archived(h, &j).await;
        if j.admitted_at_ms.is_some() != kind.admitted() {
            broken.push(format!(
                "job {id} ({kind:?}) admitted at {:?}",
                j.admitted_at_ms
            ));
        }

        let events = events_by_key(h, id).await;
        let at = |key: &str| events.get(key).cloned().unwrap_or_default();
        let terminal = format!("state-{}", j.state);
        let ok = at("state-ADMITTED") == j.admitted_at_ms.into_iter().collect::<Vec<_>>()
            && at("state-RUNNING") == j.running_at_ms.into_iter().collect::<Vec<_>>()
            && at(&terminal) == j.finished_at_ms.into_iter().collect::<Vec<_>>();
        if !ok {
            broken.push(format!(
                "job {id} ({kind:?}, {}, admitted {:?}, running {:?}, finished {:?}, version {}) \
                 events {events:?}",
                j.state, j.admitted_at_ms, j.running_at_ms, j.finished_at_ms, j.version
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    outcome.workloads = map.values().map(BTreeSet::len).sum();
    outcome
}
