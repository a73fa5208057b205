//! Admitting a job (its record, then its workload) and the small tools every step of a pass
//! uses: outcomes noted a few at a time. Below [`crate::pass`] and [`crate::preempt`], which both
//! admit.

use futures_util::StreamExt;
use tuneplane_core::job::{JobEvent, JobRecord, JobState};
use tuneplane_core::preemption::Preempting;
use tuneplane_core::render::job_workload_name;
use tuneplane_core::store::JobUpdate;

use crate::config::PASS_CONCURRENCY;
use crate::ctx::PassReport;
use crate::error::Result;
use crate::sync::{platform_event, state_key};
use crate::{Ctx, workload};
use tuneplane_core::admission::PoolPlacement;

/// Admits `job` onto `placements` (the record with its `Admitted` event saying `placement`, then
/// the workload); `preempting` when it was admitted onto nodes of jobs preempted for it.
pub(crate) async fn admit(
    ctx: &Ctx,
    job: &JobRecord,
    placements: Vec<PoolPlacement>,
    placement: String,
    preempting: Option<Preempting>,
    now: i64,
) -> Result<()> {
    let stored = record_admission(ctx, job, placements, placement, preempting, now).await?;
    create_workload(ctx, &stored).await
}

/// The decision: `job`'s record ADMITTED onto `placements`, with its `Admitted` event saying
/// `placement`, in one write; returns the stored record. Its workload is made by
/// [`create_workload`], in this pass or (past the pass's request budget, or after a crash) a
/// later one: an ADMITTED record without a workload is what a pass's sync reports as
/// [`crate::sync::Synced::NeedsCreate`], and its planned nodes stay reserved meanwhile.
pub(crate) async fn record_admission(
    ctx: &Ctx,
    job: &JobRecord,
    placements: Vec<PoolPlacement>,
    placement: String,
    preempting: Option<Preempting>,
    now: i64,
) -> Result<JobRecord> {
    let (next, ev) = admission(job, placements, placement, preempting, now)?;
    let stored = ctx.jobs.update_job_with_events(&next, &[ev]).await?;
    admitted(ctx, &stored);
    Ok(stored)
}

/// Records with their events written in one store batch (`JobRecords::update_jobs_with_events`:
/// one commit in the embedded store); each change's outcome, in order (a conflict fails its own
/// change only).
pub(crate) async fn write_batch<'a>(
    ctx: &Ctx,
    changes: impl IntoIterator<Item = (&'a JobRecord, &'a [JobEvent])>,
) -> Vec<Result<JobRecord>> {
    let updates: Vec<JobUpdate<'_>> = changes
        .into_iter()
        .map(|(job, events)| JobUpdate { job, events })
        .collect();
    let outcomes = ctx.jobs.update_jobs_with_events(&updates).await;
    outcomes
        .into_iter()
        .map(|o| o.map_err(crate::error::Error::from))
        .collect()
}

/// [`record_admission`] for many jobs (a pass's decisions): `decisions` are the records and
/// events [`admission`] made, written in one store batch (one commit in the embedded store);
/// returns each job's id with its stored record or why it was not written, in order.
pub(crate) async fn record_admissions(
    ctx: &Ctx,
    decisions: &[(JobRecord, JobEvent)],
) -> Vec<(String, Result<JobRecord>)> {
    let changes = decisions
        .iter()
        .map(|(job, ev)| (job, std::slice::from_ref(ev)));
    let outcomes = write_batch(ctx, changes).await;
    decisions
        .iter()
        .zip(outcomes)
        .map(|((job, _), outcome)| {
            if let Ok(stored) = &outcome {
                admitted(ctx, stored);
            }
            (String::from(&job.id), outcome)
        })
        .collect()
}

/// `job`'s record as admitted onto `placements` (its workload named, its pending reason
/// cleared, `preempting` when it takes preempted jobs' nodes) and the `Admitted` event saying
/// `placement`: what [`record_admission`] writes.
pub(crate) fn admission(
    job: &JobRecord,
    placements: Vec<PoolPlacement>,
    placement: String,
    preempting: Option<Preempting>,
    now: i64,
) -> Result<(JobRecord, JobEvent)> {
    let mut next = job.clone();
    next.transition(JobState::Admitted, now)?;
    next.workload_name = Some(job_workload_name(job));
    next.pending = None;
    next.preempting = preempting;
    // The plan is part of the record: the workload is rendered pinned to it, also when a later
    // pass creates it.
    next.placements = placements;
    let ev = platform_event(
        now,
        state_key(job, JobState::Admitted),
        "Normal",
        "Admitted",
        placement,
    );
    Ok((next, ev))
}

/// What follows a stored admission in this process: the metric, the pending-write memo
/// dropped, the log line.
fn admitted(ctx: &Ctx, stored: &JobRecord) {
    ctx.metrics.inc_admissions();
    ctx.pending_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(stored.id.as_str());
    tracing::info!(job_id = %stored.id, capsule = %stored.capsule_sha256, "admitted");
}

/// Creates the workload of admitted `job` (and names it on a record that has no name yet, one
/// written before names were recorded at admission).
pub(crate) async fn create_workload(ctx: &Ctx, job: &JobRecord) -> Result<()> {
    let name = workload::create(ctx, job).await?;
    if job.workload_name.is_none() {
        let mut next = job.clone();
        next.workload_name = Some(name);
        ctx.jobs.update_job(&next).await?;
    }
    Ok(())
}

/// Runs `futures` [`PASS_CONCURRENCY`] at a time; outcomes in completion order.
pub(crate) async fn a_few_at_a_time<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    futures_util::stream::iter(futures)
        .buffer_unordered(PASS_CONCURRENCY)
        .collect()
        .await
}

pub(crate) fn note(
    ctx: &Ctx,
    report: &mut PassReport,
    what: &str,
    job_id: &str,
    outcome: Result<()>,
) {
    if let Err(e) = outcome {
        report.errors += 1;
        ctx.metrics.inc_step_error(&e);
        tracing::warn!(job_id, error = %e, "{what} failed; retrying next pass");
    }
}
