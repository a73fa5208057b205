//! Admitting a job (its record, then its workload) and the small tools every step of a pass
//! uses: outcomes noted a few at a time. Below [`crate::pass`] and [`crate::preempt`], which both
//! admit.

use futures_util::StreamExt;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::preemption::Preempting;
use tuneplane_core::render::job_workload_name;

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
    let mut next = job.clone();
    next.transition(JobState::Admitted, now)?;
    next.workload_name = Some(job_workload_name(job));
    next.pending = None;
    next.preempting = preempting;
    // The plan is part of the record: the workload is rendered pinned to it, also when a later
    // pass (after a crash) creates it.
    next.placements = placements;
    // The record (with its event, atomically) first: a crash before the create leaves an
    // ADMITTED job whose sync creates it.
    let ev = platform_event(
        now,
        state_key(job, JobState::Admitted),
        "Normal",
        "Admitted",
        placement,
    );
    let stored = ctx.jobs.update_job_with_events(&next, &[ev]).await?;
    ctx.metrics.inc_admissions();
    ctx.pending_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(job.id.as_str());
    tracing::info!(job_id = %job.id, capsule = %job.capsule_sha256, "admitted");
    workload::create(ctx, &stored).await?;
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
