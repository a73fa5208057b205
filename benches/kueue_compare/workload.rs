//! The four workloads and how each is submitted to either system.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::observe::Observer;
use crate::{Controller, NODE_GPUS, NODES_PER_SERIES, Options, SERIES, SUBMITTERS, System};

/// The series the reclaim workload runs on.
pub const RECLAIM_SERIES: &str = "h200";
/// The reclaim workload's stop grace on both sides: Kubernetes' default pod grace (30 s), which
/// Kueue's pods keep, and TunePlane's `deadlines.grace_seconds` set to the same.
pub const RECLAIM_GRACE_SECONDS: u64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Single-pod CPU jobs (1 CPU, 1 GiB): a Pod in TunePlane, a batch/v1 Job in Kueue.
    Small,
    /// Gang jobs of 2-8 machines x 8 GPUs on one series: a RayJob in both.
    Gang,
    /// Tenant `team-a` floods with small jobs; `team-b` submits one a fixed time after the flood
    /// began (`--team-b-after`), while it goes on.
    Fair,
    /// Quota reclaim by preemption: `team-b` (limit a third of the h200 series, borrowing
    /// allowed) fills the whole series with 1-machine 8-GPU RayJobs; once they all run (and have
    /// run the minimum time), `team-a` (limit the other two thirds) submits 8-GPU RayJobs up to
    /// its limit, which only fit once the system preempts team-b's borrowed jobs.
    Reclaim,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Small => "small",
            Shape::Gang => "gang",
            Shape::Fair => "fair",
            Shape::Reclaim => "reclaim",
        }
    }
}

/// One job of a workload.
#[derive(Debug, Clone)]
pub struct Job {
    /// The harness's key (`benchkey` label), also the job's name.
    pub key: String,
    /// `team-a` or `team-b`.
    pub tenant: &'static str,
    /// GPU series, or `None` for a CPU job.
    pub series: Option<&'static str>,
    /// Machines (pods of the gang; 1 for a CPU job).
    pub nodes: u32,
    /// The stop grace, when the workload sets one (reclaim: TunePlane's `deadlines.grace_seconds`,
    /// Kueue's pods' `terminationGracePeriodSeconds`); `None` leaves each system's default.
    pub grace_seconds: Option<u64>,
}

impl Job {
    /// Pods the job runs once admitted: its machines, and the submitter of a RayJob.
    pub fn pods(&self) -> usize {
        self.nodes as usize + usize::from(self.series.is_some())
    }
}

pub struct Workload {
    pub shape: Shape,
    pub jobs: Vec<Job>,
}

/// What a run saw of its submissions.
pub struct Outcome {
    /// Per job (same order as `Workload::jobs`): when its submission started, relative to the run.
    pub submitted: Vec<Option<Duration>>,
    /// When the last submission returned.
    pub submit_done: Duration,
    /// When the run stopped watching.
    pub ended: Duration,
    /// Why it stopped: `complete`, `stalled` (no progress for the quiet time) or `timeout`.
    pub end_reason: &'static str,
    /// Submissions the system refused, with the first error.
    pub refused: usize,
    pub first_error: Option<String>,
    /// The reclaim workload: what was read when team-a began to submit.
    pub reclaim: Option<ReclaimPhase>,
}

/// The reclaim workload's second phase: when team-a's submission began, and the counters then,
/// so that the requests of the reclaim (preemptions and team-a's admissions) are counted apart
/// from team-b's fill.
pub struct ReclaimPhase {
    /// team-b's fill: when its last job was seen running (RayJob `Running`), from the run's start.
    pub filled: Duration,
    /// team-a's first submission, from the run's start.
    pub at: Duration,
    /// The audit log's size then.
    pub audit_from: u64,
    /// `apiserver_request_total` then.
    pub requests: crate::report::Requests,
}

impl Workload {
    pub fn new(shape: Shape, o: &Options) -> Workload {
        let small = |i: usize, tenant| Job {
            key: format!("{}-{i:05}", if tenant == "team-b" { "b" } else { "s" }),
            tenant,
            series: None,
            nodes: 1,
            grace_seconds: None,
        };
        let jobs = match shape {
            Shape::Small => (0..o.small).map(|i| small(i, "team-a")).collect(),
            Shape::Gang => (0..o.gang)
                .map(|i| Job {
                    key: format!("g-{i:05}"),
                    tenant: "team-a",
                    series: Some(SERIES[i % SERIES.len()]),
                    // 2..=8 machines, spread evenly over the series.
                    nodes: 2 + ((i / SERIES.len()) * 3 % 7) as u32,
                    grace_seconds: None,
                })
                .collect(),
            Shape::Fair => {
                let mut v: Vec<Job> = (0..o.flood).map(|i| small(i, "team-a")).collect();
                v.push(small(0, "team-b"));
                v
            }
            // team-b's fill of the whole series first, then team-a's jobs up to its limit.
            Shape::Reclaim => {
                let one = |key: String, tenant| Job {
                    key,
                    tenant,
                    series: Some(RECLAIM_SERIES),
                    nodes: 1,
                    grace_seconds: Some(RECLAIM_GRACE_SECONDS),
                };
                // One job per node of the series.
                let mut v: Vec<Job> = (0..NODES_PER_SERIES as usize)
                    .map(|i| one(format!("rb-{i:05}"), "team-b"))
                    .collect();
                v.extend(
                    (0..(o.reclaim_a_gpus / NODE_GPUS) as usize)
                        .map(|i| one(format!("ra-{i:05}"), "team-a")),
                );
                v
            }
        };
        Workload { shape, jobs }
    }

    /// Submits every job (the fair workload's last one at its fixed offset) and watches until
    /// done.
    pub async fn run(
        &self,
        controller: &Controller,
        client: &kube::Client,
        observer: &Observer,
        o: &Options,
        started: Instant,
    ) -> anyhow::Result<Outcome> {
        if self.shape == Shape::Reclaim {
            return self
                .run_reclaim(controller, client, observer, o, started)
                .await;
        }
        let submitter = Arc::new(Submitter::new(controller, client, observer.system)?);
        let (flood, last): (&[Job], &[Job]) = match self.shape {
            Shape::Fair => self.jobs.split_at(self.jobs.len() - 1),
            _ => (&self.jobs[..], &[]),
        };
        let mut submitted = vec![None; self.jobs.len()];
        let mut refused = 0;
        let mut first_error = None;
        let mut record = |i: usize, at: Duration, r: anyhow::Result<()>| {
            submitted[i] = Some(at);
            if let Err(e) = r {
                refused += 1;
                first_error.get_or_insert_with(|| format!("{}: {e:#}", self.jobs[i].key));
            }
        };
        let flooding = futures_util::stream::iter(flood.iter().enumerate())
            .map(|(i, job)| {
                let s = submitter.clone();
                async move {
                    let at = started.elapsed();
                    (i, at, s.submit(job).await)
                }
            })
            .buffer_unordered(SUBMITTERS)
            .collect::<Vec<(usize, Duration, anyhow::Result<()>)>>();
        // The late tenant: at a fixed offset from the flood's start, whatever the flood's pace
        // (one rule for both systems).
        let late = async {
            let mut out = Vec::new();
            for job in last {
                tokio::time::sleep_until((started + o.team_b_after).into()).await;
                let at = started.elapsed();
                out.push((self.jobs.len() - 1, at, submitter.submit(job).await));
            }
            out
        };
        let (results, late) = tokio::join!(flooding, late);
        for (i, at, r) in results.into_iter().chain(late) {
            record(i, at, r);
        }
        let submit_done = started.elapsed();
        eprintln!(
            "[kueue-compare] submitted {} job(s) in {:.1} s ({refused} refused)",
            self.jobs.len(),
            submit_done.as_secs_f64()
        );

        // Watch until every job is admitted with all its pods bound, nothing changes, or time runs out.
        let end_reason = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let snap = observer.snapshot();
            let bound = snap.bound_by_job();
            let admitted_all_bound = self
                .jobs
                .iter()
                .filter(|j| snap.admitted_at(&j.key).is_some())
                .all(|j| snap.all_bound_at(&bound, j).is_some());
            let last_admission = snap.admitted.values().max().copied();
            let complete = match self.shape {
                // The fairness figure is the second tenant's wait: the run ends once it is admitted.
                Shape::Fair => snap
                    .admitted_at(&self.jobs[self.jobs.len() - 1].key)
                    .is_some(),
                // Every job admitted and bound; or (the fleet full) every admitted job bound and
                // no admission for the quiet time.
                _ => {
                    admitted_all_bound
                        && (snap.admitted.len() == self.jobs.len()
                            || last_admission.is_some_and(|t| t.elapsed() > o.quiet)
                                && started.elapsed() > submit_done + o.quiet)
                }
            };
            if complete {
                break "complete";
            }
            if started.elapsed() > o.timeout {
                break "timeout";
            }
            // Nothing admitted, created or bound for the quiet time: the run is stuck.
            if snap.last_change.is_some_and(|t| t.elapsed() > o.quiet)
                && started.elapsed() > submit_done + o.quiet
            {
                break "stalled";
            }
        };
        let ended = started.elapsed();
        eprintln!(
            "[kueue-compare] run ended ({end_reason}) after {:.1} s",
            ended.as_secs_f64()
        );
        Ok(Outcome {
            submitted,
            submit_done,
            ended,
            end_reason,
            refused,
            first_error,
            reclaim: None,
        })
    }
}

impl Workload {
    /// The reclaim workload: team-b's fill, the wait until every one of its jobs runs (the
    /// RayJob `Running`, which is also when TunePlane's record turns RUNNING; TunePlane's own
    /// records are asked too) and has run the minimum time (`--min-run`, both systems alike),
    /// then team-a's submissions; the run ends once every team-a job is admitted with its pods
    /// bound (or stalls, or times out `--timeout` after team-a's first submission).
    async fn run_reclaim(
        &self,
        controller: &Controller,
        client: &kube::Client,
        observer: &Observer,
        o: &Options,
        started: Instant,
    ) -> anyhow::Result<Outcome> {
        let submitter = Arc::new(Submitter::new(controller, client, observer.system)?);
        let split = self
            .jobs
            .iter()
            .position(|j| j.tenant == "team-a")
            .unwrap_or(self.jobs.len());
        let mut submitted = vec![None; self.jobs.len()];
        let mut refused = 0;
        let mut first_error = None;
        let submit_all = |range: std::ops::Range<usize>| {
            let submitter = submitter.clone();
            futures_util::stream::iter(range)
                .map(move |i| {
                    let s = submitter.clone();
                    let job = &self.jobs[i];
                    async move {
                        let at = started.elapsed();
                        (i, at, s.submit(job).await)
                    }
                })
                .buffer_unordered(SUBMITTERS)
                .collect::<Vec<(usize, Duration, anyhow::Result<()>)>>()
        };
        let mut record = |results: Vec<(usize, Duration, anyhow::Result<()>)>| {
            for (i, at, r) in results {
                submitted[i] = Some(at);
                if let Err(e) = r {
                    refused += 1;
                    first_error.get_or_insert_with(|| format!("{}: {e:#}", self.jobs[i].key));
                }
            }
        };
        record(submit_all(0..split).await);
        eprintln!(
            "[kueue-compare] reclaim: team-b submitted {split} job(s) in {:.1} s; waiting until all run",
            started.elapsed().as_secs_f64()
        );

        // Every team-b job running.
        let fill_deadline = started + o.timeout;
        let filled = loop {
            let snap = observer.snapshot();
            let running = self.jobs[..split]
                .iter()
                .filter(|j| snap.ray_running.contains_key(&j.key))
                .count();
            if running == split {
                break snap
                    .ray_running
                    .values()
                    .max()
                    .map_or(Duration::ZERO, |t| t.saturating_duration_since(started));
            }
            if Instant::now() > fill_deadline {
                anyhow::bail!(
                    "reclaim: only {running} of team-b's {split} jobs running after {} s",
                    o.timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if let Some(api) = &controller.api {
            // TunePlane preempts RUNNING jobs only: its records must say so too.
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let n = crate::tuneplane_side::running(api).await?;
                if n >= split {
                    break;
                }
                if Instant::now() > deadline {
                    anyhow::bail!(
                        "reclaim: TunePlane records {n} of team-b's {split} jobs RUNNING 120 s after their RayJobs ran"
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        eprintln!(
            "[kueue-compare] reclaim: team-b's {split} jobs running after {:.1} s; waiting the minimum run time ({} s) and 2 s",
            filled.as_secs_f64(),
            o.min_run.as_secs()
        );
        tokio::time::sleep(o.min_run + Duration::from_secs(2)).await;

        let audit_log = o.out.join("cluster/logs/audit.log");
        let phase = ReclaimPhase {
            filled,
            at: started.elapsed(),
            audit_from: std::fs::metadata(&audit_log).map_or(0, |m| m.len()),
            requests: crate::report::apiserver_requests(client).await?,
        };
        let phase_start = Instant::now();
        record(submit_all(split..self.jobs.len()).await);
        let submit_done = started.elapsed();
        eprintln!(
            "[kueue-compare] reclaim: team-a submitted {} job(s) in {:.1} s ({refused} refused in all)",
            self.jobs.len() - split,
            (submit_done - phase.at).as_secs_f64()
        );
        // Preemption goes in steps (a victim's pods stop before its room is taken): the stall
        // rule waits four quiet times, not one.
        let stall = o.quiet * 4;
        let end_reason = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let snap = observer.snapshot();
            let bound = snap.bound_by_job();
            let done = self.jobs[split..]
                .iter()
                .all(|j| snap.all_bound_at(&bound, j).is_some());
            if done {
                break "complete";
            }
            if phase_start.elapsed() > o.timeout {
                break "timeout";
            }
            if snap.last_change.is_some_and(|t| t.elapsed() > stall)
                && phase_start.elapsed() > stall
            {
                break "stalled";
            }
        };
        let ended = started.elapsed();
        eprintln!(
            "[kueue-compare] run ended ({end_reason}) after {:.1} s",
            ended.as_secs_f64()
        );
        Ok(Outcome {
            submitted,
            submit_done,
            ended,
            end_reason,
            refused,
            first_error,
            reclaim: Some(phase),
        })
    }
}

/// Submits jobs to one system: TunePlane through its HTTP API, Kueue as suspended objects.
enum Submitter {
    TunePlane {
        http: reqwest::Client,
        api: crate::tuneplane_side::ApiAccess,
        code: String,
    },
    Kueue {
        client: kube::Client,
        pods: bool,
    },
}

impl Submitter {
    fn new(c: &Controller, client: &kube::Client, system: System) -> anyhow::Result<Submitter> {
        Ok(match system {
            System::TunePlane => Submitter::TunePlane {
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(120))
                    .build()?,
                api: c.api.clone().expect("TunePlane's API"),
                code: crate::tuneplane_side::code_b64()?,
            },
            System::Kueue => Submitter::Kueue {
                client: client.clone(),
                pods: c.kueue_pods,
            },
        })
    }

    async fn submit(&self, job: &Job) -> anyhow::Result<()> {
        match self {
            Submitter::TunePlane { http, api, code } => {
                crate::tuneplane_side::submit(http, api, code, job).await
            }
            Submitter::Kueue { client, pods } => crate::kueue::submit(client, job, *pods).await,
        }
    }
}
