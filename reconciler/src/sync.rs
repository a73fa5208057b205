//! Syncing active jobs with their workloads, ending jobs in the safe order, and orphan cleanup.
//!
//! Ending a job is always: archive logs → write the terminal record (with the archive's key) →
//! delete the workload. A crash after any step leaves a state the next pass finishes: before the
//! record write the job is still active and is ended again; after it, the workload is an orphan of
//! a terminal job and is deleted by [`sweep_orphans`]. The archive is written beside the passes
//! ([`crate::archives`]): the pass that finds a job ended starts it, and a later one (woken when
//! it ends) writes the record and deletes the workload; passes admit meanwhile.
//!
//! A state's platform event (`state-ADMITTED`, `state-RUNNING`, `state-SUCCEEDED`, ...) is written
//! in the same atomic store write as the record (`JobStore::update_job_with_events`), so a crash
//! cannot leave one without the other. It is dated by the record's own timestamp for the state.

use std::collections::HashMap;
use std::time::Duration;

use kube::ResourceExt;
use tuneplane_core::constants::JOB_ID_LABEL;
use tuneplane_core::ids::JobId;
use tuneplane_core::job::{
    EventSource, Failure, FailureCause, FailureReason, JobEvent, JobRecord, JobState, Pending,
    PendingReason,
};
use tuneplane_core::render::{attempt_of_workload, job_workload_name};
use tuneplane_core::spec::WorkloadKind;

use crate::archives::Progress;
use crate::attempt_loss::{LossRules, infrastructure_loss, ray_nodes_replaced};
use crate::cluster::{Cluster, managed};
use crate::decide::{Step, decide};
use crate::error::{Error, Result};
use crate::status::{Observed, assess_pod, assess_rayjob};
use crate::{Ctx, logs, ray_stop, workload};

/// An event of source `Platform`: [`JobEvent::platform`].
pub fn platform_event(
    at_ms: i64,
    key: String,
    kind: &str,
    reason: &str,
    message: String,
) -> JobEvent {
    JobEvent::platform(at_ms, key, kind, reason, message)
}

fn workload_of(job: &JobRecord) -> String {
    job.workload_name
        .clone()
        .unwrap_or_else(|| job_workload_name(job))
}

/// The key of the event of `job` entering `state` in its current attempt: `state-ADMITTED` for
/// the first attempt, `a2-state-ADMITTED` for the second, so each attempt has its own.
pub fn state_key(job: &JobRecord, state: JobState) -> String {
    if job.attempt <= 1 {
        format!("state-{state}")
    } else {
        format!("a{}-state-{state}", job.attempt)
    }
}

/// The event of a state `job` entered, dated by the record: `admitted_at_ms`, `running_at_ms` or
/// `finished_at_ms`. `None` for a queued job (or a record that lacks the time).
pub fn state_event(job: &JobRecord) -> Option<JobEvent> {
    let key = state_key(job, job.state);
    Some(match job.state {
        JobState::Queued => return None,
        JobState::Admitted => platform_event(
            job.admitted_at_ms?,
            key,
            "Normal",
            "Admitted",
            "admitted".into(),
        ),
        JobState::Running => platform_event(
            job.running_at_ms?,
            key,
            "Normal",
            "Running",
            "every pod of the workload runs".into(),
        ),
        JobState::Succeeded | JobState::Failed | JobState::Stopped => {
            let message = match &job.failure {
                Some(f) => format!("{:?}: {}", f.reason, f.message),
                None => "the entrypoint exited 0".to_owned(),
            };
            // A failure is a warning; success and a requested stop are not.
            let kind = if job.state == JobState::Failed {
                "Warning"
            } else {
                "Normal"
            };
            platform_event(job.finished_at_ms?, key, kind, job.state.as_str(), message)
        }
    })
}

/// The platform event of a new pending reason of an admitted job. Reasons that need the user's
/// action (an image that cannot be pulled, a workload Kubernetes refused) are warnings; an
/// image-pull event names the pod and the kubelet's reason and leaves the registry's words to the
/// copied Kubernetes warning, so they are not shown twice.
fn pending_event(job: &JobRecord, pending: &Pending, now: i64) -> JobEvent {
    let warning = matches!(
        pending.reason,
        PendingReason::ImagePull | PendingReason::InvalidWorkload
    );
    let message = if pending.reason == PendingReason::ImagePull {
        // "pod P: ErrImagePull: Failed to pull image ..." -> "pod P: ErrImagePull"
        let mut parts = pending.message.splitn(3, ": ");
        match (parts.next(), parts.next(), parts.next()) {
            (Some(pod), Some(why), Some(_)) => format!(
                "{pod}: {why}: image {} cannot be pulled (the Kubernetes warning has the registry's answer)",
                job.spec.image
            ),
            _ => pending.message.clone(),
        }
    } else {
        pending.message.clone()
    };
    platform_event(
        now,
        format!("pending-{:?}-{}", pending.reason, pending.since_ms),
        if warning { "Warning" } else { "Normal" },
        &format!("{:?}", pending.reason),
        message,
    )
}

/// What the job's workload shows in `cluster` at `now`, with the infrastructure's losses
/// ([`crate::loss`]) taking precedence over everything but success.
pub fn observe(cluster: &Cluster, job: &JobRecord, now: i64, rules: &LossRules<'_>) -> Observed {
    let observed = observe_workload(cluster, job);
    if observed == Observed::Succeeded {
        return observed;
    }
    let ended = matches!(observed, Observed::Failed { .. } | Observed::Invalid { .. });
    if let Some(lost) = infrastructure_loss(cluster, job, now, rules, ended) {
        return Observed::Lost(lost);
    }
    match observed {
        // A Ray job whose driver failed after one of its Ray nodes was replaced lost that node
        // first: the infrastructure's doing, not the user's.
        Observed::Failed {
            reason: FailureReason::EntrypointFailed,
            message,
        } if job.spec.kind() == WorkloadKind::RayJob => {
            let replaced = ray_nodes_replaced(cluster, job);
            if replaced.is_empty() {
                Observed::Failed {
                    reason: FailureReason::EntrypointFailed,
                    message,
                }
            } else {
                let mut f = Failure::new(
                    FailureReason::RayNodeLost,
                    format!(
                        "{message} (after a Ray node was lost: {})",
                        replaced.join("; ")
                    ),
                );
                f.evidence = replaced;
                Observed::Lost(f)
            }
        }
        Observed::Pending { reason, message } => match lost_planned_node(cluster, job) {
            Some(message) => Observed::Pending {
                reason: PendingReason::NoMatchingNode,
                message,
            },
            None => Observed::Pending { reason, message },
        },
        other => other,
    }
}

/// A planned node that an unbound pod of the job waits for but that cannot take it any more.
/// The job is not re-planned: its pods are pinned, the pre-running deadline bounds the wait, and
/// the node may come back (a cordon lifted, a kubelet restarted); see the reconciler's README.
fn lost_planned_node(cluster: &Cluster, job: &JobRecord) -> Option<String> {
    if job.placements.is_empty() {
        return None;
    }
    let pods = cluster.pods_of(job);
    let bound: Vec<&str> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
        .collect();
    job.placements.iter().find_map(|placement| {
        placement
            .nodes
            .iter()
            .filter(|n| !bound.contains(&n.as_str()))
            .find_map(|n| {
                cluster.node_unusable(n).map(|why| {
                    format!(
                        "pool {}: planned node {n} is {why}; the job waits for it until the pre-running deadline",
                        placement.pool
                    )
                })
            })
    })
}

fn observe_workload(cluster: &Cluster, job: &JobRecord) -> Observed {
    let ns = job.spec.namespace.as_str();
    let name = workload_of(job);
    match job.spec.kind() {
        WorkloadKind::RayJob => match cluster.rayjob(ns, &name) {
            Some(rj) => {
                let pods = cluster.pods_of(job);
                assess_rayjob(rj, &pods, &cluster.warnings_for(ns, &name))
            }
            None => Observed::Missing,
        },
        WorkloadKind::Pod => cluster.pod(ns, &name).map_or(Observed::Missing, assess_pod),
    }
}

async fn copy_warnings(ctx: &Ctx, cluster: &Cluster, job: &JobRecord) -> Result<()> {
    let name = workload_of(job);
    let warnings = cluster.warnings_for(&job.spec.namespace, &name);
    if warnings.is_empty() {
        // The common case: nothing to copy, and no per-job entry to allocate.
        return Ok(());
    }
    let mut fresh = Vec::new();
    {
        let mut seen = ctx.seen_events.lock().unwrap_or_else(|p| p.into_inner());
        let set = seen.entry(String::from(&job.id)).or_default();
        for e in warnings {
            let uid = e.uid().unwrap_or_else(|| e.name_any());
            if !set.insert(uid.clone()) {
                continue;
            }
            // `eventTime` has microseconds; the older timestamps whole seconds only.
            let at_ms = e
                .event_time
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .or_else(|| {
                    e.last_timestamp
                        .as_ref()
                        .or(e.first_timestamp.as_ref())
                        .map(|t| t.0.as_millisecond())
                })
                .or_else(|| e.creation_timestamp().map(|t| t.0.as_millisecond()))
                .unwrap_or_else(tuneplane_core::clock::now_ms);
            // A warning about the workload cannot precede its admission: a whole-second time
            // must not sort it before the platform's own events of that second.
            let at_ms = at_ms.max(job.admitted_at_ms.map_or(i64::MIN, |a| a + 1));
            let order = e
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            let kind = e
                .involved_object
                .kind
                .clone()
                .unwrap_or_default()
                .to_lowercase();
            fresh.push((
                order,
                JobEvent {
                    at_ms,
                    key: format!("k8s-{}", uid.replace('#', "-")),
                    source: EventSource::Kubernetes,
                    kind: "Warning".into(),
                    reason: e.reason.clone().unwrap_or_default(),
                    message: e.message.clone().unwrap_or_default(),
                    object: e
                        .involved_object
                        .name
                        .clone()
                        .map(|n| format!("{kind}/{n}")),
                },
            ));
        }
    }
    // Events copied together keep the order they happened in (time, then the API server's
    // resourceVersion): each is at least a millisecond after the one before.
    fresh.sort_by_key(|(order, e)| (e.at_ms, *order));
    let mut fresh: Vec<JobEvent> = fresh.into_iter().map(|(_, e)| e).collect();
    for i in 1..fresh.len() {
        fresh[i].at_ms = fresh[i].at_ms.max(fresh[i - 1].at_ms + 1);
    }
    if !fresh.is_empty() {
        ctx.jobs.append_events(&job.id, &fresh).await?;
    }
    Ok(())
}

/// What syncing a job left to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Synced {
    /// Nothing: the job took its step (or had none).
    Done,
    /// The job is admitted and its workload does not exist: the pass's create phase makes it,
    /// within the pass's request budget ([`crate::pass`]).
    NeedsCreate,
    /// The job's record changes (RUNNING, or a new pending reason) with these events: the pass
    /// writes all such changes of its sync in one store batch.
    Write(Box<(JobRecord, Vec<JobEvent>)>),
}

/// Syncs one active job (any non-terminal job that is not simply waiting in the queue). A
/// missing workload of an admitted job is not created here but reported
/// ([`Synced::NeedsCreate`]): creates are spent in one place, fairly between tenants.
pub async fn sync_job(ctx: &Ctx, cluster: &Cluster, job: &JobRecord, now: i64) -> Result<Synced> {
    if job.state == JobState::Queued && !job.stop_requested {
        return Ok(Synced::Done);
    }
    let observed = if job.state == JobState::Queued {
        Observed::Missing
    } else {
        let rules = LossRules {
            not_ready_grace_ms: i64::try_from(ctx.config.node_lost_grace.as_millis())
                .unwrap_or(i64::MAX),
            interruption_taints: &ctx.config.interruption_taints,
        };
        observe(cluster, job, now, &rules)
    };
    if job.state != JobState::Queued {
        copy_warnings(ctx, cluster, job).await?;
    }
    let cap_ms = ctx
        .config
        .pre_running_cap
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut step = decide(job, &observed, now, cap_ms);
    if matches!(step, Step::Wait | Step::SetPending(_))
        && job.preempting.is_some()
        && let Some((reason, message)) = crate::preempting::follow(ctx, cluster, job, now).await?
    {
        // What the job waits for is the preempted jobs' pods stopping, whatever the scheduler
        // says of its own pods meanwhile.
        step = preempting_pending(ctx, job, reason, message, now);
    }
    match step {
        Step::Wait => {}
        // Created by this process moments ago, not yet in the watch's cache: not lost.
        Step::Create
            if workload::recently_created(ctx, &tuneplane_core::render::job_workload_name(job)) => {
        }
        // Its create is in flight beside the passes.
        Step::Create if ctx.creates.is_running(&job.id) => {}
        Step::Create => return Ok(Synced::NeedsCreate),
        Step::MarkRunning => {
            let mut next = job.clone();
            next.transition(JobState::Running, now)?;
            // The record and its event in one write: a crash cannot separate them. The pass
            // writes every job's such change in one batch.
            let events: Vec<JobEvent> = state_event(&next).into_iter().collect();
            return Ok(Synced::Write(Box::new((next, events))));
        }
        Step::SetPending(mut pending) => {
            let mut next = job.clone();
            // One event per reason: a new message of the same reason (ErrImagePull, then
            // ImagePullBackOff) updates the record only, and keeps when the reason began.
            let same_reason = job.pending.as_ref().filter(|p| p.reason == pending.reason);
            let events: Vec<JobEvent> = match same_reason {
                Some(p) => {
                    pending.since_ms = p.since_ms;
                    Vec::new()
                }
                None => vec![pending_event(job, &pending, now)],
            };
            next.pending = Some(pending);
            return Ok(Synced::Write(Box::new((next, events))));
        }
        Step::Finish { state, failure } => {
            let mut failure = failure.map(|mut f| {
                f.exit_code = exit_code(cluster, job, Some(f.reason));
                f
            });
            if let Some(f) = failure.as_mut() {
                add_refusal_line(ctx, job, f).await;
            }
            finish(ctx, cluster, job, state, failure, now).await?;
        }
    }
    Ok(Synced::Done)
}

/// The step recording `reason` and `message` on an admitted job that waits for preempted jobs:
/// a new reason at once, a new message (the count, the time left) at most every
/// [`crate::decide::MESSAGE_REFRESH_MS`].
fn preempting_pending(
    ctx: &Ctx,
    job: &JobRecord,
    reason: PendingReason,
    message: String,
    now: i64,
) -> Step {
    let last = ctx.pending_written_at(&job.id);
    match crate::decide::next_pending(job.pending.as_ref(), reason, &message, now, last) {
        Some((pending, _)) => {
            ctx.note_pending_written(&job.id, now);
            Step::SetPending(pending)
        }
        None => Step::Wait,
    }
}

/// The job's log archive: `Some(key)` once written; `None` while it is being written beside the
/// passes ([`crate::archives`]), started by the first call: the caller waits for a later pass.
///
/// Archives are strict (API server errors fail them) for the first
/// [`logs::STRICT_ARCHIVE_ATTEMPTS`] failed attempts, then written with errors in the index.
/// Failed attempts are counted on the job's record (`archive_failures`), so a restarted
/// reconciler goes on from there instead of starting over; `job` is `None` for a workload whose
/// record is terminal or gone (an orphan), counted by this process only. A count that cannot be
/// written (another writer moved the record) is kept in memory meanwhile.
///
/// `ends`: the attempt is stopped while its pods run; the archive deletes the workload (of that
/// kind) itself once their logs are followed, and reads them through their grace, at most the
/// given time ([`logs::Ending`]); a Ray attempt's job is stopped through its head first
/// ([`crate::ray_stop`]).
async fn archive_logs(
    ctx: &Ctx,
    job: Option<&JobRecord>,
    job_id: &JobId,
    namespace: &str,
    workload: &str,
    lenient: bool,
    ends: Option<Ends>,
) -> Result<Option<String>> {
    let remembered = ctx
        .archive_failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(job_id.as_str())
        .copied()
        .unwrap_or(0);
    let failed = remembered.max(job.map_or(0, |j| j.archive_failures));
    let outcome = match ctx.archives.take(job_id) {
        Progress::Running => return Ok(None),
        Progress::Done(outcome) => outcome,
        Progress::None => {
            // An attempt lost with its node keeps what the API server can still serve: the
            // dead node's kubelet will not answer however often the archive is tried.
            let strict = !lenient && failed < logs::STRICT_ARCHIVE_ATTEMPTS;
            let (kube, blobs) = (ctx.kube.clone(), ctx.blobs.clone());
            let (id, ns, name) = (job_id.clone(), namespace.to_owned(), workload.to_owned());
            let max_bytes = ctx.config.log_archive_max_bytes;
            let ending = ends.map(|ends| {
                let (kube, ns, name, id) = (kube.clone(), ns.clone(), name.clone(), id.clone());
                logs::Ending {
                    delete: Box::pin(async move {
                        if let Some(head) = ends.ray_head {
                            let outcome =
                                ray_stop::stop(&kube, &ns, &head.pod, &name, head.wait).await;
                            tracing::info!(job_id = %id, head = %head.pod, ?outcome, "Ray job stopped through its head before its RayJob is deleted");
                        }
                        workload::delete_object(&kube, ends.kind, &ns, &name).await
                    }),
                    within: ends.within,
                }
            });
            let following = ending.is_some();
            ctx.archives.start(job_id, following, async move {
                logs::archive(
                    &kube,
                    blobs.as_ref(),
                    &id,
                    &ns,
                    &name,
                    strict,
                    max_bytes,
                    ending,
                )
                .await
            });
            return Ok(None);
        }
    };
    if outcome.is_ok() {
        ctx.archive_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(job_id.as_str());
        return outcome.map(Some);
    }
    let failed = failed.saturating_add(1);
    ctx.archive_failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(job_id.to_string(), failed);
    if let Some(job) = job {
        let mut next = job.clone();
        next.archive_failures = failed;
        if let Err(e) = ctx.jobs.update_job(&next).await {
            // Not the step's own outcome (the archive's error is), but a failed write all the
            // same: counted like one.
            let e = Error::from(e);
            ctx.metrics.inc_step_error(&e);
            tracing::warn!(job_id = %job_id, failed, error = %e, "failed archive attempt not counted on the record; counted in memory");
        }
    }
    outcome.map(Some)
}

/// For a CPU job's capsule refusal or failed download, the runner's or the fetch's own line
/// (which file and both digests; the endpoint and its answer) from the end of the pod's log, added to the failure's message and evidence; left as it is when the log
/// cannot be read (the archive keeps the whole log).
async fn add_refusal_line(ctx: &Ctx, job: &JobRecord, failure: &mut Failure) {
    let marker = match failure.reason {
        FailureReason::CapsuleMismatch => tuneplane_core::render::bootstrap::MISMATCH_TEXT,
        FailureReason::CapsuleUnavailable => tuneplane_core::render::bootstrap::FETCH_FAILED_TEXT,
        _ => return,
    };
    if !job.spec.is_cpu_only() {
        return;
    }
    let name = workload_of(job);
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(ctx.kube.client.clone(), &job.spec.namespace);
    let params = kube::api::LogParams {
        tail_lines: Some(20),
        ..kube::api::LogParams::default()
    };
    let object = format!("{}/{name}", job.spec.namespace);
    let Ok(text) = ctx
        .kube
        .call("logs", &object, || api.logs(&name, &params))
        .await
    else {
        return;
    };
    if let Some(line) = text.lines().rev().find(|l| l.contains(marker)) {
        let line = line.trim();
        failure.message = format!("{} ({line})", failure.message);
        failure.evidence.push(format!("pod/{name}: {line}"));
    }
}

/// The exit status of a CPU job's container whose entrypoint failed (the pod's terminated state).
fn exit_code(cluster: &Cluster, job: &JobRecord, reason: Option<FailureReason>) -> Option<i32> {
    if !matches!(
        reason,
        Some(FailureReason::EntrypointFailed | FailureReason::CapsuleMismatch)
    ) || !job.spec.is_cpu_only()
    {
        return None;
    }
    let pod = cluster.pod(&job.spec.namespace, job.workload_name.as_deref()?)?;
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
}

/// Ends `job`'s attempt: archive its logs, then write the terminal record (with the failure's
/// cause, evidence and the entrypoint's exit code) or, when the spec's retries allow another
/// attempt, the record of the job queued again as attempt N+1 at its old place; then delete the
/// attempt's workload.
///
/// A crash after the archive leaves the job as it was (the next pass ends it again, finding
/// the archive); after the record, the old attempt's workload is deleted by [`sweep_orphans`]
/// (it is not the current attempt's); the requeue and the next attempt's admission are separate
/// conditional writes, so no second attempt is ever made from one failure.
pub async fn finish(
    ctx: &Ctx,
    cluster: &Cluster,
    job: &JobRecord,
    state: JobState,
    failure: Option<Failure>,
    now: i64,
) -> Result<()> {
    let ns = job.spec.namespace.as_str();
    let name = workload_of(job);
    let lost = failure
        .as_ref()
        .is_some_and(|f| f.cause == FailureCause::Infrastructure);
    // An attempt stopped while it runs (decided before what the workload shows, so the decision
    // holds while it goes) ends within the archive, which reads what the entrypoint prints in its
    // grace; a Ray attempt's job is stopped through its head first (its driver's grace is Ray's).
    let stopped = failure.as_ref().is_some_and(|f| {
        matches!(
            f.reason,
            FailureReason::StopRequested | FailureReason::Preempted
        )
    });
    let ends = stopped.then(|| {
        let grace = tuneplane_core::render::termination_grace_seconds(job);
        Ends {
            kind: job.spec.kind(),
            within: Duration::from_secs(grace.saturating_add(ENDING_MARGIN_SECONDS)),
            ray_head: running_head(cluster, job).map(|pod| RayHead {
                pod,
                wait: Duration::from_secs(
                    job.spec
                        .deadlines
                        .grace_seconds
                        .saturating_add(RAY_STOP_MARGIN_SECONDS),
                ),
            }),
        }
    });
    let Some(key) = archive_logs(ctx, Some(job), &job.id, ns, &name, lost, ends).await? else {
        // Being archived: a later pass ends the job.
        return Ok(());
    };
    let mut next = job.clone();
    let retry = failure.as_ref().filter(|f| job.retry_allowed(f)).cloned();
    let events: Vec<JobEvent> = if let Some(f) = retry {
        let event = requeue_event(job, &f, now);
        next.requeue(f, Some(key), now)?;
        ctx.metrics.inc_requeued();
        vec![event]
    } else {
        match failure {
            Some(f) => {
                next.finish_with_failure(f.reason, f.message.clone(), now)?;
                next.failure = Some(f);
            }
            None => next.transition(state, now)?,
        }
        next.logs_key = Some(key);
        state_event(&next).into_iter().collect()
    };
    // The record and its event land together, also for a job that never had a workload
    // (nothing would be left for the orphan sweep to find and finish).
    ctx.jobs.update_job_with_events(&next, &events).await?;
    if next.is_terminal() {
        if matches!(
            next.failure.as_ref().map(|f| f.reason),
            Some(FailureReason::PreRunningDeadlineExceeded | FailureReason::RunDeadlineExceeded)
        ) {
            ctx.metrics.inc_deadline_failures();
        }
        ctx.metrics.inc_terminal(next.state);
        tracing::info!(job_id = %job.id, state = %next.state, attempt = job.attempt, "job ended");
    } else {
        tracing::info!(job_id = %job.id, attempt = next.attempt, "attempt lost to the infrastructure; job queued again");
    }
    let kind = job.spec.kind();
    let leftovers = workload::Leftovers::of(ctx, cluster, kind, ns, &name, &job.id);
    workload::delete(ctx, kind, ns, &name, leftovers).await?;
    // The archive now holds everything the live segments did.
    crate::live_logs::discard(ctx, &job.id).await;
    ctx.seen_events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(job.id.as_str());
    ctx.pending_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(job.id.as_str());
    Ok(())
}

/// What a stopped attempt's archive waits past its pods' termination grace for their logs to
/// end: the operator deleting a RayJob's pods, the kubelet confirming.
pub const ENDING_MARGIN_SECONDS: u64 = 30;

/// What the stop of a Ray attempt waits past the job's grace for Ray to report the job ended
/// (Ray kills the driver at the grace).
pub const RAY_STOP_MARGIN_SECONDS: u64 = 15;

/// How a stopped attempt's workload ends within its archive.
struct Ends {
    kind: WorkloadKind,
    /// Longest the followed logs are read after the deletion.
    within: Duration,
    /// A Ray attempt's running head, whose job is stopped before the RayJob is deleted.
    ray_head: Option<RayHead>,
}

/// The head pod a Ray attempt's job is stopped through, and how long its stop is waited for.
struct RayHead {
    pod: String,
    wait: Duration,
}

/// The running head pod of `job`'s Ray attempt, if it has one.
fn running_head(cluster: &Cluster, job: &JobRecord) -> Option<String> {
    if job.spec.kind() != WorkloadKind::RayJob {
        return None;
    }
    cluster
        .pods_of(job)
        .into_iter()
        .find(|p| {
            let head = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ray_stop::NODE_TYPE_LABEL))
                .is_some_and(|t| t == "head");
            let running = p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Running");
            head && running && p.metadata.deletion_timestamp.is_none()
        })
        .and_then(|p| p.metadata.name.clone())
}

/// The platform event of an attempt that ended in a failure the job is run again after: a
/// warning naming the attempt, the cause, the evidence and what happens next.
fn requeue_event(job: &JobRecord, failure: &Failure, now: i64) -> JobEvent {
    let evidence = if failure.evidence.is_empty() {
        String::new()
    } else {
        format!(" [{}]", failure.evidence.join("; "))
    };
    platform_event(
        now,
        format!("attempt-{}-requeued", job.attempt),
        "Warning",
        "Requeued",
        format!(
            "attempt {} ended by an {} failure, {:?}: {}{evidence}; attempt {} is queued at the job's original place and resumes from its newest complete checkpoint",
            job.attempt,
            failure.cause.as_str(),
            failure.reason,
            failure.message,
            job.attempt + 1
        ),
    )
}

/// Archives and deletes workloads whose job is terminal or unknown, and deletes the workloads
/// of an active job's earlier attempts (their archives are in the job's `attempts`).
/// `active` maps each active job to its current attempt.
pub async fn sweep_orphans(
    ctx: &Ctx,
    cluster: &Cluster,
    active: &HashMap<String, u32>,
) -> Result<()> {
    // A workload of an active job is skipped unless it is an earlier attempt's.
    let stale = |id: &str, name: &str| match active.get(id) {
        None => Some(false),
        Some(&current) => attempt_of_workload(id, name)
            .is_some_and(|a| a < current)
            .then_some(true),
    };
    // A job-id label that breaks the id rule names no job of ours (TunePlane writes it from a
    // checked id): that workload is left alone.
    let mut candidates: Vec<(WorkloadKind, String, String, JobId, bool)> = Vec::new();
    for rj in cluster
        .rayjobs
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        if let Some(id) = rj.labels().get(JOB_ID_LABEL)
            && let Ok(id) = JobId::parse(id.as_str())
            && let Some(earlier) = stale(&id, &rj.name_any())
        {
            candidates.push((
                WorkloadKind::RayJob,
                rj.namespace().unwrap_or_default(),
                rj.name_any(),
                id,
                earlier,
            ));
        }
    }
    for pod in cluster
        .pods
        .iter()
        .filter(|p| managed(&p.metadata) && p.metadata.deletion_timestamp.is_none())
    {
        // Only the CPU job's own Pod is a workload; Ray pods belong to their RayJob.
        if let Some(id) = pod.labels().get(JOB_ID_LABEL)
            && let Ok(id) = JobId::parse(id.as_str())
            && attempt_of_workload(&id, &pod.name_any()).is_some()
            && let Some(earlier) = stale(&id, &pod.name_any())
        {
            candidates.push((
                WorkloadKind::Pod,
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                id,
                earlier,
            ));
        }
    }
    for (kind, ns, name, id, earlier) in candidates {
        if earlier {
            // The requeue wrote the record (with this attempt's archive) and crashed, or its
            // delete lost a race with the reflector: finish the delete.
            let leftovers = workload::Leftovers::of(ctx, cluster, kind, &ns, &name, &id);
            workload::delete(ctx, kind, &ns, &name, leftovers).await?;
            tracing::info!(job_id = %id, workload = %name, "earlier attempt's workload deleted");
            continue;
        }
        let job = ctx.jobs.get_job(&id).await?;
        if job.as_ref().is_some_and(|j| !j.is_terminal()) {
            continue;
        }
        // A terminal job with its logs only lost the race with its own deletion (or a crash
        // between record and delete): delete again. Anything else is a true orphan.
        let finished = job.as_ref().is_some_and(|j| j.logs_key.is_some());
        // An archive already there was written by an earlier pass just before it deleted this
        // workload (the reflector can lag one pass): archiving again would overwrite it with the
        // logs of pods that are already gone. Unless it is this sweep's own, being written or
        // written since the last pass.
        let ours = ctx.archives.has(&id);
        let key = logs::attempt_logs_key(&id, &name);
        let archived = !ours && ctx.blobs.head(&key).await?.is_some();
        if !finished
            && !archived
            && archive_logs(ctx, None, &id, &ns, &name, false, None)
                .await?
                .is_none()
        {
            // Being archived: a later pass deletes it.
            continue;
        }
        let leftovers = workload::Leftovers::of(ctx, cluster, kind, &ns, &name, &id);
        workload::delete(ctx, kind, &ns, &name, leftovers).await?;
        // Counted once the workload is gone, before the live segments are tidied away.
        if !finished && !archived {
            ctx.metrics.inc_orphans();
            tracing::info!(job_id = %id, workload = %name, "orphan workload archived and deleted");
        }
        crate::live_logs::discard(ctx, &id).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuneplane_testkit::records;

    fn queued() -> JobRecord {
        records::queued("j").build()
    }

    #[test]
    fn state_events_are_dated_by_the_record_so_a_rewrite_is_the_same_event() {
        let mut job = queued();
        assert_eq!(state_event(&job), None);
        job.transition(JobState::Admitted, 1_000).unwrap();
        let admitted = state_event(&job).expect("no event");
        assert_eq!(
            (admitted.at_ms, admitted.key.as_str()),
            (1_000, "state-ADMITTED")
        );
        job.transition(JobState::Running, 2_000).unwrap();
        let running = state_event(&job).expect("no event");
        assert_eq!(
            (running.at_ms, running.key.as_str()),
            (2_000, "state-RUNNING")
        );
        let mut stopped = job.clone();
        stopped
            .finish_with_failure(FailureReason::StopRequested, "asked", 3_000)
            .unwrap();
        let ev = state_event(&stopped).expect("no event");
        assert_eq!((ev.at_ms, ev.key.as_str()), (3_000, "state-STOPPED"));
        assert_eq!(ev.message, "StopRequested: asked");
        job.transition(JobState::Succeeded, 4_000).unwrap();
        let ev = state_event(&job).expect("no event");
        assert_eq!((ev.at_ms, ev.key.as_str()), (4_000, "state-SUCCEEDED"));
        assert_eq!(ev.message, "the entrypoint exited 0");
        assert_eq!(state_event(&job), state_event(&job.clone()));
    }
}
