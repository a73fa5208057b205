//! The job record, its states and the rules for moving between them (docs/design.md §6).
//!
//! ```text
//! QUEUED ──admit──▶ ADMITTED ──pods running──▶ RUNNING ──▶ SUCCEEDED | FAILED | STOPPED
//!    │                  │                                   ▲
//!    └── stop / fail ───┴───────────────────────────────────┘
//! ```
//!
//! Everything here is pure: the stores persist a [`JobRecord`] and guard each write with its
//! `version`; the reconciler and the functions decide *what* to write with [`JobRecord::transition`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::claimant::Claimant;
use crate::spec::JobSpec;

/// Lifecycle state of a job. Terminal states are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Accepted and waiting for capacity.
    Queued,
    /// Capacity reserved and workload created; not every pod runs yet (pre-running clock).
    Admitted,
    /// Every pod runs (run clock).
    Running,
    /// The entrypoint exited 0.
    Succeeded,
    /// The job failed (entrypoint, deadline, image pull, invalid workload, ...).
    Failed,
    /// Stopped at a user's request.
    Stopped,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Admitted,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Stopped,
    ];

    /// True for `SUCCEEDED`, `FAILED` and `STOPPED`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Stopped
        )
    }

    /// The upper-case wire name (`QUEUED`, ...), as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "QUEUED",
            JobState::Admitted => "ADMITTED",
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Stopped => "STOPPED",
        }
    }

    /// Parses a wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// True if the lifecycle allows moving from `self` to `next` (staying put is not a transition).
    pub fn can_transition_to(self, next: JobState) -> bool {
        use JobState::*;
        match (self, next) {
            (Queued, Admitted) | (Admitted, Running) => true,
            // A queued or admitted job can be stopped or fail (deadline, invalid workload).
            (Queued | Admitted, Failed | Stopped) => true,
            (Running, Succeeded | Failed | Stopped) => true,
            // An admitted job whose pods finish between two passes may be seen finished directly.
            (Admitted, Succeeded) => true,
            _ => false,
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a job is not (yet) running: structured, so clients can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingReason {
    /// Not enough free GPUs of the series on distinct nodes right now.
    InsufficientGpu,
    /// Not enough free CPU on the nodes the job may use right now (for a GPU pool: on the nodes
    /// that have the free GPUs).
    InsufficientCpu,
    /// Not enough free memory on the nodes the job may use right now.
    InsufficientMemory,
    /// No node carries the requested series (or all are cordoned / not Ready).
    NoMatchingNode,
    /// Waiting behind jobs of higher priority or earlier submission.
    QueuedBehindOthers,
    /// The tenant's quota for the series (or for CPU-only jobs) is in use; the job is admitted
    /// when the tenant's own jobs finish (or, with borrowing, when idle capacity appears).
    QuotaExceeded,
    /// Pods are scheduled but the image cannot be pulled.
    ImagePull,
    /// Pods are created and starting (pulling, initialising, waiting for Ray).
    Starting,
    /// Kubernetes rejected or never acted on the workload.
    InvalidWorkload,
    /// Queued again after an attempt was stopped (an interruption, a lost pod): that attempt's
    /// pods still save a checkpoint within their grace, and the next attempt starts after them.
    PreviousAttemptStopping,
    /// Admitted onto nodes whose jobs were preempted for it: they save a checkpoint and stop
    /// within their grace, and this job's pods start once they are gone.
    Preempting,
    /// An array child waiting while its array runs as many children as `array.parallelism`
    /// allows.
    ArrayParallelism,
    /// Waiting for the jobs of its `depends_on` to end (it holds nothing and is not in the queue
    /// yet).
    WaitingForDependencies,
}

/// The current pending reason with its human message and when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// Machine-readable reason.
    pub reason: PendingReason,
    /// What a person should know (`pool main: needs 2 nodes with 8 free h200 GPUs, 1 available`).
    pub message: String,
    /// When this reason was first observed, Unix milliseconds.
    pub since_ms: i64,
}

/// Why a job (or one attempt of it) ended in `FAILED` or `STOPPED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureReason {
    /// The entrypoint exited non-zero.
    EntrypointFailed,
    /// The user's container was killed for using more memory than its limit (`OOMKilled`).
    OutOfMemory,
    /// Not RUNNING before the pre-running deadline.
    PreRunningDeadlineExceeded,
    /// Still running at the run deadline.
    RunDeadlineExceeded,
    /// The image could not be pulled.
    ImagePull,
    /// Kubernetes rejected the workload.
    InvalidWorkload,
    /// The workload disappeared without a terminal status.
    WorkloadLost,
    /// Stopped at a user's request.
    StopRequested,
    /// The capsule a pod received did not match its SHA-256 (or a file its manifest): nothing of
    /// the user's ran.
    CapsuleMismatch,
    /// A pod could not download the capsule (the endpoint refused the connection or answered an
    /// error): nothing of the user's ran, and the attempt runs again.
    CapsuleUnavailable,
    /// A node the job ran on was deleted or stayed NotReady past the grace period.
    NodeLost,
    /// A pod of the job was evicted, preempted or deleted by Kubernetes (a `DisruptionTarget`
    /// condition, a kubelet eviction, a node shutdown).
    Evicted,
    /// A node the job ran on got an interruption notice (a spot interruption or a scale-down
    /// taint): the attempt was stopped before the node goes.
    Interrupted,
    /// A Ray head or worker pod was lost and replaced while the job ran.
    RayNodeLost,
    /// The platform stopped the attempt to give its GPUs to another job (quota reclaim, or a
    /// higher-priority job of its own tenant): it had its grace to save, and runs again.
    Preempted,
    /// An array parent whose children all ended, some of them failed.
    ArrayChildFailed,
    /// A job it depended on ended otherwise than it had to (or is gone): it never ran.
    DependencyFailed,
}

impl FailureReason {
    /// Who is to blame: the job itself, the platform's infrastructure, or a person who stopped
    /// it. Infrastructure failures are retried (`retries.infrastructure`), application failures
    /// only when the spec opts in (`retries.application`), a stop never.
    pub fn cause(self) -> FailureCause {
        use FailureReason::*;
        match self {
            NodeLost | Evicted | Interrupted | RayNodeLost | WorkloadLost | CapsuleUnavailable => {
                FailureCause::Infrastructure
            }
            StopRequested => FailureCause::User,
            Preempted => FailureCause::Preempted,
            EntrypointFailed
            | OutOfMemory
            | PreRunningDeadlineExceeded
            | RunDeadlineExceeded
            | ImagePull
            | InvalidWorkload
            | CapsuleMismatch
            | ArrayChildFailed
            | DependencyFailed => FailureCause::Application,
        }
    }
}

/// The class of a failure's cause (see [`FailureReason::cause`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The job's own doing: its code, image, spec, capsule or deadlines.
    Application,
    /// The platform lost the attempt: nodes, evictions, interruptions, lost Ray nodes.
    Infrastructure,
    /// A person stopped the job.
    User,
    /// The platform took the job's GPUs back for another job (never counted against the
    /// spec's `retries`: the job always runs again).
    Preempted,
}

impl FailureCause {
    /// The wire name (`application`, `infrastructure`, `user`, `preempted`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCause::Application => "application",
            FailureCause::Infrastructure => "infrastructure",
            FailureCause::User => "user",
            FailureCause::Preempted => "preempted",
        }
    }
}

/// Terminal outcome details of a failed or stopped job (or attempt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Machine-readable reason.
    pub reason: FailureReason,
    /// What happened, for people.
    pub message: String,
    /// The entrypoint's exit status, when it ended with one (a CPU job's container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Application, infrastructure or user (derived from `reason`; stored so readers need no
    /// table).
    #[serde(default = "unknown_cause")]
    pub cause: FailureCause,
    /// The Kubernetes evidence, one line each (`node/n1: deleted`, `pod/p: DisruptionTarget
    /// DeletionByTaintManager: ...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// For a preempted attempt: the seconds of its work since its newest complete checkpoint
    /// when it was told to stop (what it lost at most, unless it saved within its grace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_seconds: Option<u64>,
}

/// Records written before causes were stored: treated as the job's own failure (never retried).
fn unknown_cause() -> FailureCause {
    FailureCause::Application
}

impl Failure {
    /// A failure for `reason` with its cause filled in and no evidence.
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
            exit_code: None,
            cause: reason.cause(),
            evidence: Vec::new(),
            lost_seconds: None,
        }
    }
}

/// One earlier attempt of a job that was run again (`JobRecord::attempts`): its own workload,
/// clocks, log archive and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first run.
    pub number: u32,
    /// When it was admitted.
    pub admitted_at_ms: Option<i64>,
    /// When every pod ran, if they did.
    pub running_at_ms: Option<i64>,
    /// When it ended.
    pub finished_at_ms: i64,
    /// Its RayJob or Pod.
    pub workload_name: Option<String>,
    /// Its log archive.
    pub logs_key: Option<String>,
    /// The nodes it was planned on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<PoolPlacement>,
    /// Why it ended.
    pub failure: Failure,
}

// Array jobs' parts of a record (`crate::array` has their rules; the types live here so that
// the record does not import the module that reads it).

/// What a record is in an array: the parent that summarises, or one of its children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrayRole {
    /// The submitted job: never admitted itself; its state and counts summarise its children.
    Parent(ArrayParent),
    /// Child `index` of `parent`.
    Child(ArrayChild),
}

/// The parent's book of its children.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayParent {
    /// Children created so far: indices `0..created` exist.
    pub created: u32,
    /// Children never created because the array was stopped first (counted as stopped).
    #[serde(default)]
    pub skipped: u32,
    /// Children by state (those never created because the array was stopped count as stopped).
    pub counts: ArrayCounts,
}

/// One child's place in its array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayChild {
    /// The parent's job id.
    pub parent: crate::ids::JobId,
    /// 0-based index (`TUNEPLANE_ARRAY_INDEX`).
    pub index: u32,
}

/// Children of an array by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayCounts {
    /// Waiting in the queue (or not yet created).
    pub queued: u32,
    /// Admitted, not running yet.
    pub admitted: u32,
    /// Running.
    pub running: u32,
    /// Ended `SUCCEEDED`.
    pub succeeded: u32,
    /// Ended `FAILED`.
    pub failed: u32,
    /// Ended `STOPPED` (or never created because the array was stopped).
    pub stopped: u32,
}

impl ArrayCounts {
    /// Adds one child in `state`.
    pub fn add(&mut self, state: JobState) {
        let slot = match state {
            JobState::Queued => &mut self.queued,
            JobState::Admitted => &mut self.admitted,
            JobState::Running => &mut self.running,
            JobState::Succeeded => &mut self.succeeded,
            JobState::Failed => &mut self.failed,
            JobState::Stopped => &mut self.stopped,
        };
        *slot = slot.saturating_add(1);
    }

    /// Children that ended.
    pub fn ended(&self) -> u32 {
        self.succeeded + self.failed + self.stopped
    }

    /// Children admitted or running.
    pub fn holding(&self) -> u32 {
        self.admitted + self.running
    }

    /// The ended part of `self` with the live part of `live` (counts of children that have not
    /// ended; children not created yet count as queued up to `size`).
    pub fn with_live(&self, live: &ArrayCounts, size: u32) -> ArrayCounts {
        let mut out = ArrayCounts {
            queued: live.queued,
            admitted: live.admitted,
            running: live.running,
            succeeded: self.succeeded,
            failed: self.failed,
            stopped: self.stopped,
        };
        let known = out.ended() + out.queued + out.holding();
        out.queued += size.saturating_sub(known);
        out
    }

    /// One line for people: `6/6 succeeded`, `2/6 succeeded, 2 running, 2 queued`.
    pub fn summary(&self, size: u32) -> String {
        let mut parts = vec![format!("{}/{size} succeeded", self.succeeded)];
        for (n, what) in [
            (self.failed, "failed"),
            (self.stopped, "stopped"),
            (self.running, "running"),
            (self.admitted, "admitted"),
            (self.queued, "queued"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        parts.join(", ")
    }
}

/// One job: the authoritative spec plus everything the platform learned about it.
///
/// `version` is owned by the stores: it is 0 before the record is created and each successful
/// write increments it; a write carrying a stale version fails with a conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Unique, URL-safe job id (checked: a stored record with an id that breaks
    /// [`crate::ids::ID_RULE`] does not decode).
    pub id: crate::ids::JobId,
    /// Tenant that owns the job.
    pub tenant: crate::ids::TenantId,
    /// The authoritative JobSpec.
    pub spec: JobSpec,
    /// SHA-256 (hex) of the capsule zip.
    pub capsule_sha256: String,
    /// Current state.
    pub state: JobState,
    /// Optimistic-concurrency version (see the type docs).
    pub version: u64,
    /// Queue clock start: submission time, Unix milliseconds.
    pub submitted_at_ms: i64,
    /// Pre-running clock start: admission time.
    pub admitted_at_ms: Option<i64>,
    /// Run clock start: when every pod ran.
    pub running_at_ms: Option<i64>,
    /// When the job reached a terminal state.
    pub finished_at_ms: Option<i64>,
    /// Why the job is not running yet, if it is not.
    pub pending: Option<Pending>,
    /// Set by `stop`; the reconciler acts on it.
    pub stop_requested: bool,
    /// Why the job failed or stopped.
    pub failure: Option<Failure>,
    /// Name of the RayJob/Pod once created.
    pub workload_name: Option<String>,
    /// Blob key of the archived logs once written.
    pub logs_key: Option<String>,
    /// The nodes admission planned for each pool; the workload is pinned to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<PoolPlacement>,
    /// Someone follows the job's output until then (Unix ms): `logs -f`, `submit --wait` or the
    /// console's job page mark it, and the reconciler ships live log segments often until it
    /// passes (rarely otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_followed_until_ms: Option<i64>,
    /// A one-off reader (a plain `tuneplane logs` or `status`) waits for the job's output as it
    /// was then (Unix ms, the API's clock): the reconciler reads the job at its next pass and
    /// notes the want it answered in the segment list (`tuneplane_core::live::readers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_wanted_at_ms: Option<i64>,
    /// Attempts to archive the job's logs that failed so far (the API server failing to serve a
    /// log). Kept on the record, so a restarted reconciler goes on counting toward the attempts
    /// after which an archive is written with the errors in its index instead of failing again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub archive_failures: u32,
    /// The attempt the record's clocks, workload and archive belong to: 1 for the first run,
    /// N+1 after N attempts ended in a failure the spec's `retries` allow again.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// Earlier attempts, oldest first (the current one is the record itself).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Set on a running job the platform preempts: the reconciler ends the attempt with
    /// [`FailureReason::Preempted`] and requeues it (see [`crate::preemption`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt: Option<crate::preemption::PreemptNotice>,
    /// Set on a job admitted onto the nodes of jobs preempted for it, until it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempting: Option<crate::preemption::Preempting>,
    /// Its part in an array job: the parent that summarises, or a child (see [`crate::array`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayRole>,
}

fn first_attempt() -> u32 {
    1
}

/// What an attempt's grant outlives the attempt's end by, beyond the save grace: the runner's
/// uploads after the entrypoint stopped.
pub const GRANT_UPLOAD_SLACK_MS: i64 = 60_000;

/// `serde`'s test for a count left out while it is 0.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A transition the lifecycle does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job_id}: cannot move from {from} to {to}")]
pub struct TransitionError {
    /// Job whose record refused the transition.
    pub job_id: crate::ids::JobId,
    /// Its current state.
    pub from: JobState,
    /// The refused target state.
    pub to: JobState,
}

/// Where one pool of an admitted job goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPlacement {
    /// The pool of the job's spec (`pools[].name`) these nodes are for.
    pub pool: String,
    /// One distinct node per machine.
    pub nodes: Vec<String>,
}

impl JobRecord {
    /// What kind of claimant this record is in an admission plan: a job, or a playground's
    /// stand-in.
    pub fn claimant(&self) -> Claimant {
        Claimant::of_plugin(&self.spec.plugin)
    }

    /// A fresh `QUEUED` record (version 0, not yet stored).
    pub fn new_queued(
        id: crate::ids::JobId,
        tenant: crate::ids::TenantId,
        spec: JobSpec,
        capsule_sha256: impl Into<String>,
        submitted_at_ms: i64,
    ) -> JobRecord {
        JobRecord {
            id,
            tenant,
            spec,
            capsule_sha256: capsule_sha256.into(),
            state: JobState::Queued,
            version: 0,
            submitted_at_ms,
            admitted_at_ms: None,
            running_at_ms: None,
            finished_at_ms: None,
            pending: None,
            stop_requested: false,
            failure: None,
            workload_name: None,
            logs_key: None,
            placements: Vec::new(),
            logs_followed_until_ms: None,
            logs_wanted_at_ms: None,
            archive_failures: 0,
            attempt: 1,
            attempts: Vec::new(),
            preempt: None,
            preempting: None,
            array: None,
        }
    }

    /// True once the job is `SUCCEEDED`, `FAILED` or `STOPPED`.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    /// Moves to `to` at `now_ms`, starting the matching clock and clearing the pending reason
    /// when the job runs or ends. Refuses what the lifecycle does not allow.
    pub fn transition(&mut self, to: JobState, now_ms: i64) -> Result<(), TransitionError> {
        if !self.state.can_transition_to(to) {
            return Err(TransitionError {
                job_id: self.id.clone(),
                from: self.state,
                to,
            });
        }
        match to {
            JobState::Admitted => self.admitted_at_ms = Some(now_ms),
            JobState::Running => {
                self.running_at_ms = Some(now_ms);
                self.pending = None;
                self.preempting = None;
            }
            JobState::Succeeded | JobState::Failed | JobState::Stopped => {
                self.finished_at_ms = Some(now_ms);
                self.pending = None;
            }
            JobState::Queued => {}
        }
        self.state = to;
        Ok(())
    }

    /// Ends the job as `FAILED` (or `STOPPED` for [`FailureReason::StopRequested`]) with a reason.
    pub fn finish_with_failure(
        &mut self,
        reason: FailureReason,
        message: impl Into<String>,
        now_ms: i64,
    ) -> Result<(), TransitionError> {
        let to = if reason == FailureReason::StopRequested {
            JobState::Stopped
        } else {
            JobState::Failed
        };
        self.transition(to, now_ms)?;
        self.failure = Some(Failure::new(reason, message));
        Ok(())
    }

    /// How many of the earlier attempts were preempted.
    pub fn preempted_attempts(&self) -> u32 {
        let n = self
            .attempts
            .iter()
            .filter(|a| a.failure.cause == FailureCause::Preempted)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The most attempts the job may get as of now: its first, one per retry its spec allows
    /// for either cause, and one per preemption so far (a preempted attempt uses no retry).
    pub fn max_attempts(&self) -> u32 {
        1u32.saturating_add(self.spec.retries.infrastructure)
            .saturating_add(self.spec.retries.application)
            .saturating_add(self.preempted_attempts())
    }

    /// `2 of up to 3` (`2` when the spec allows no more), or `None` for a job on its first
    /// attempt with nothing earlier (the common case says nothing).
    pub fn attempt_label(&self) -> Option<String> {
        if self.attempt <= 1 && self.attempts.is_empty() {
            return None;
        }
        let max = self.max_attempts();
        Some(if max >= self.attempt && max > 1 {
            format!("{} of up to {max}", self.attempt)
        } else {
            self.attempt.to_string()
        })
    }

    /// Whether an attempt that failed with `failure` is run again: never after a stop (or with
    /// a stop requested), otherwise while the earlier attempts that failed for the same cause
    /// leave some of the spec's `retries` for it.
    pub fn retry_allowed(&self, failure: &Failure) -> bool {
        if self.stop_requested {
            return false;
        }
        let allowed = match failure.cause {
            FailureCause::Infrastructure => self.spec.retries.infrastructure,
            FailureCause::Application => self.spec.retries.application,
            FailureCause::User => return false,
            // Not the job's doing nor a loss: it always runs again.
            FailureCause::Preempted => return true,
        };
        let used = self
            .attempts
            .iter()
            .filter(|a| a.failure.cause == failure.cause)
            .count();
        u32::try_from(used).unwrap_or(u32::MAX) < allowed
    }

    /// Ends the current attempt with `failure` at `now_ms` and queues the next one: the attempt
    /// moves to [`JobRecord::attempts`] with its clocks, workload, placements and archive
    /// (`logs_key`), and the job is `QUEUED` again as attempt N+1 with its submission time (so
    /// it keeps its place in its tenant's queue) and nothing of the old attempt's run. Refused
    /// for a job that is not admitted or running.
    pub fn requeue(
        &mut self,
        failure: Failure,
        logs_key: Option<String>,
        now_ms: i64,
    ) -> Result<(), TransitionError> {
        if !matches!(self.state, JobState::Admitted | JobState::Running) {
            return Err(TransitionError {
                job_id: self.id.clone(),
                from: self.state,
                to: JobState::Queued,
            });
        }
        self.attempts.push(Attempt {
            number: self.attempt,
            admitted_at_ms: self.admitted_at_ms.take(),
            running_at_ms: self.running_at_ms.take(),
            finished_at_ms: now_ms,
            workload_name: self.workload_name.take(),
            logs_key: logs_key.or(self.logs_key.take()),
            placements: std::mem::take(&mut self.placements),
            failure,
        });
        self.attempt = self.attempt.saturating_add(1);
        self.state = JobState::Queued;
        self.pending = None;
        self.failure = None;
        self.logs_key = None;
        self.archive_failures = 0;
        self.logs_wanted_at_ms = None;
        self.preempt = None;
        self.preempting = None;
        Ok(())
    }

    /// When the current attempt's grant to write outputs and checkpoints ends (Unix ms): while
    /// the attempt is not over, never; after it, its end plus the grace its entrypoint gets to
    /// save and [`GRANT_UPLOAD_SLACK_MS`]. `None` for an attempt this record does not know.
    pub fn grant_valid_until_ms(&self, attempt: u32) -> Option<i64> {
        let grace = i64::try_from(self.spec.deadlines.grace_seconds.saturating_mul(1000))
            .unwrap_or(i64::MAX);
        let ended = if attempt == self.attempt {
            if !self.is_terminal() {
                return Some(i64::MAX);
            }
            self.finished_at_ms?
        } else {
            self.attempts
                .iter()
                .find(|a| a.number == attempt)?
                .finished_at_ms
        };
        Some(
            ended
                .saturating_add(grace)
                .saturating_add(GRANT_UPLOAD_SLACK_MS),
        )
    }

    /// Milliseconds spent in the current clock at `now_ms`: queue wait while queued, pre-running
    /// while admitted, run time while running, total time once terminal.
    pub fn clock_ms(&self, now_ms: i64) -> i64 {
        let start = match self.state {
            JobState::Queued => self.submitted_at_ms,
            JobState::Admitted => self.admitted_at_ms.unwrap_or(self.submitted_at_ms),
            JobState::Running => self.running_at_ms.unwrap_or(self.submitted_at_ms),
            _ => self.submitted_at_ms,
        };
        let end = if self.is_terminal() {
            self.finished_at_ms.unwrap_or(now_ms)
        } else {
            now_ms
        };
        (end - start).max(0)
    }
}

/// Who produced an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventSource {
    /// TunePlane itself (submission, admission, deadlines, stop).
    Platform,
    /// A Kubernetes event copied from the workload or its pods.
    Kubernetes,
}

/// One entry of a job's event log.
///
/// `key` identifies the event within its job (a Kubernetes event uid, or e.g. `state-ADMITTED`):
/// appending the same `(at_ms, key)` twice stores it once, so passes can copy events repeatedly.
/// Events list in `(at_ms, key)` order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    /// When it happened, Unix milliseconds.
    pub at_ms: i64,
    /// Identity within the job (see the type docs); no `#` characters.
    pub key: String,
    /// Who produced it.
    pub source: EventSource,
    /// `Normal` or `Warning` for Kubernetes events; `Normal` or `Warning` for the platform too.
    pub kind: String,
    /// Short CamelCase reason (`Admitted`, `FailedScheduling`, `BackOff`).
    pub reason: String,
    /// Human message.
    pub message: String,
    /// The object it concerns (`pod/tp-abc-head-x`), if any.
    pub object: Option<String>,
}

impl JobEvent {
    /// An event of source `Platform` (TunePlane's own, beside the copied Kubernetes ones) about
    /// no particular object; the same `(at_ms, key)` appended twice is stored once, so a pass
    /// may write it again.
    pub fn platform(at_ms: i64, key: String, kind: &str, reason: &str, message: String) -> Self {
        JobEvent {
            at_ms,
            key,
            source: EventSource::Platform,
            kind: kind.to_owned(),
            reason: reason.to_owned(),
            message,
            object: None,
        }
    }
}

#[cfg(test)]
mod tests;
