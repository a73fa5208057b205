//! Preemption in a pass (docs/design.md §8, step 3b "Preemption").
//!
//! [`phase`] asks [`plan_preemptions`] which running jobs stop for which waiting job, then, for
//! each decision, in this order: a notice on every victim (with its `Preempted` warning event and
//! an audit entry), the waiting job admitted onto the nodes the victims free (its record says what
//! it waits for: [`Preempting`]), and each victim synced at once, which ends its attempt as
//! `Preempted` (logs archived, requeued in place, workload deleted with the spec's grace: the
//! runner forwards SIGTERM and uploads the checkpoint the entrypoint saves). A crash between the
//! steps leaves notices whose victims the next pass stops all the same, and a waiting job the next
//! pass plans again on what is then free.
//!
//! What the preempting job shows while the victims stop is [`crate::preempting`]'s.

use std::collections::HashMap;

use futures_util::StreamExt;
use tuneplane_core::admission::{
    AdmissionPlan, CheckpointSeen, Preemption, PreemptionRules, Reservation, Victim,
    plan_preemptions, preemption_candidates,
};
use tuneplane_core::audit::{Actor, AuditAction, AuditEntry, AuditSource};
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::job::JobRecord;
use tuneplane_core::outputs::latest_checkpoint;
use tuneplane_core::preemption::{Preempting, PreemptionRule, VictimRef};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::render::termination_grace_seconds;

use crate::Ctx;
use crate::checkpoint_cache::{LOOKUP_CONCURRENCY, LOOKUPS_PER_PASS};
use crate::cluster::Cluster;
use crate::ctx::PassReport;
use crate::error::{Error, Result};
use crate::sync::{platform_event, sync_job};

async fn lookup(ctx: &Ctx, job: &JobRecord) -> Result<Option<CheckpointSeen>> {
    let found = latest_checkpoint(ctx.blobs.as_ref(), &job.tenant, &job.id)
        .await
        .map_err(Error::from)?;
    Ok(found.map(|c| CheckpointSeen {
        name: c.name,
        completed_at_ms: c.completed_at_ms,
    }))
}

async fn looked_up<'j>(
    ctx: &Ctx,
    job: &'j JobRecord,
) -> (&'j JobRecord, Result<Option<CheckpointSeen>>) {
    (job, lookup(ctx, job).await)
}

/// The newest complete checkpoint of each of `jobs`, from the cache or looked up (at most
/// [`LOOKUPS_PER_PASS`] lookups); a job whose lookup failed or was not made is left out.
async fn checkpoints(
    ctx: &Ctx,
    jobs: &[&JobRecord],
    now: i64,
) -> HashMap<String, Option<CheckpointSeen>> {
    let mut known = HashMap::new();
    let mut missing = Vec::new();
    for &job in jobs {
        match ctx.checkpoints.fresh(&job.id, now) {
            Some(c) => {
                known.insert(String::from(&job.id), c);
            }
            None if missing.len() < LOOKUPS_PER_PASS => missing.push(job),
            None => {}
        }
    }
    // Futures are collected first: a stream over a borrowing closure would not be `Send`.
    let lookups: Vec<_> = missing.into_iter().map(|job| looked_up(ctx, job)).collect();
    let looked: Vec<_> = futures_util::stream::iter(lookups)
        .buffer_unordered(LOOKUP_CONCURRENCY)
        .collect()
        .await;
    for (job, outcome) in looked {
        match outcome {
            Ok(c) => {
                ctx.checkpoints.put(&job.id, now, c.clone());
                known.insert(String::from(&job.id), c);
            }
            Err(e) => {
                ctx.metrics.inc_step_error(&e);
                tracing::warn!(job_id = %job.id, error = %e, "checkpoint lookup failed; the job counts as having none this pass");
            }
        }
    }
    known
}

/// The rules preemption runs with at `now`, from the configuration.
pub fn rules(ctx: &Ctx, now: i64) -> PreemptionRules {
    PreemptionRules {
        min_run_ms: i64::try_from(ctx.config.preemption_min_run.as_millis()).unwrap_or(i64::MAX),
        ..PreemptionRules::at(now)
    }
}

/// The preemption phase: decides on the pass's snapshot after `plan` (made from the same
/// `active`, `capacity`, `held` and `quotas`), carries each decision out and takes the jobs it
/// admitted out of `plan.waiting`.
#[allow(clippy::too_many_arguments)]
pub async fn phase(
    ctx: &Ctx,
    cluster: &Cluster,
    active: &[JobRecord],
    capacity: &CapacitySnapshot,
    held: &[Reservation],
    quotas: &[TenantQuota],
    plan: &mut AdmissionPlan<'_>,
    now: i64,
    report: &mut PassReport,
) {
    if !ctx.config.preemption {
        return;
    }
    let rules = rules(ctx, now);
    let candidates = preemption_candidates(active, plan, quotas, &rules);
    if candidates.is_empty() {
        return;
    }
    let seen = checkpoints(ctx, &candidates, now).await;
    let found = |j: &JobRecord| seen.get(j.id.as_str()).cloned().flatten();
    let decisions = plan_preemptions(active, capacity, held, quotas, plan, &found, &rules);
    if decisions.is_empty() {
        return;
    }
    let by_id: HashMap<&str, &JobRecord> = active.iter().map(|j| (j.id.as_str(), j)).collect();
    for decision in decisions {
        let id = decision.job_id.clone();
        let outcome = carry_out(ctx, cluster, &by_id, decision, now).await;
        if outcome.is_ok() {
            report.admitted += 1;
            plan.waiting.retain(|w| w.job_id != id);
        }
        crate::admit::note(ctx, report, "preempt", &id, outcome);
    }
}

/// One decision carried out: notices, the waiting job's admission, the victims stopped.
async fn carry_out(
    ctx: &Ctx,
    cluster: &Cluster,
    by_id: &HashMap<&str, &JobRecord>,
    decision: Preemption,
    now: i64,
) -> Result<()> {
    let Some(&job) = by_id.get(decision.job_id.as_str()) else {
        return Ok(());
    };
    // Every victim first: a waiting job admitted onto nodes whose jobs were never told to stop
    // would wait for nothing. A victim that cannot be told fails the decision; those already
    // told stop anyway, and the waiting job is planned again next pass. Victims are told a few
    // at a time (each is a record write, an audit entry and its stop).
    let tells: Vec<_> = decision
        .victims
        .iter()
        // The plan chose victims among `active`: always found.
        .filter_map(|v| {
            Some(tell(
                ctx,
                cluster,
                by_id.get(v.job_id.as_str())?,
                v,
                decision.rule,
                now,
            ))
        })
        .collect();
    let told = crate::admit::a_few_at_a_time(tells).await;
    let mut stopping = Vec::with_capacity(told.len());
    let mut until_ms = now;
    for outcome in told {
        let (victim, grace_ends) = outcome?;
        until_ms = until_ms.max(grace_ends);
        stopping.push(victim);
    }
    let preempting = Preempting {
        rule: decision.rule,
        victims: stopping,
        at_ms: now,
        until_ms,
    };
    let placement = decision
        .placements
        .iter()
        .map(|p| format!("{}: {}", p.pool, p.nodes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let message = format!(
        "admitted; {}; planned nodes {placement}",
        preempting.message(preempting.victims.len(), now)
    );
    crate::admit::admit(
        ctx,
        job,
        decision.placements,
        message,
        Some(preempting),
        now,
    )
    .await
}

/// Tells `record` it is preempted (its notice and `Preempted` event in one write, the audit
/// entry, the metrics) and stops it at once; returns how the preempting job finds it and when its
/// pods' grace ends at the latest.
async fn tell(
    ctx: &Ctx,
    cluster: &Cluster,
    record: &JobRecord,
    victim: &Victim,
    rule: PreemptionRule,
    now: i64,
) -> Result<(VictimRef, i64)> {
    let grace = record.spec.deadlines.grace_seconds;
    let mut next = record.clone();
    next.preempt = Some(victim.notice.clone());
    let event = platform_event(
        now,
        format!("attempt-{}-preempted", record.attempt),
        "Warning",
        "Preempted",
        victim.notice.message(grace),
    );
    let stored = ctx.jobs.update_job_with_events(&next, &[event]).await?;
    ctx.metrics.inc_preemption(
        rule,
        victim
            .notice
            .lost_seconds
            .saturating_mul(u64::from(victim.notice.gpus)),
    );
    audit(ctx, record, &victim.notice, now).await;
    tracing::info!(
        job_id = %record.id,
        attempt = record.attempt,
        rule = %rule,
        lost_seconds = victim.notice.lost_seconds,
        "preempted"
    );
    // Stopped now rather than at the next pass: the grace runs from the notice.
    if let Err(e) = Box::pin(sync_job(ctx, cluster, &stored, now)).await {
        crate::admit::note(
            ctx,
            &mut PassReport::default(),
            "stop victim",
            &record.id,
            Err(e),
        );
    }
    let grace_ms =
        i64::try_from(termination_grace_seconds(record).saturating_mul(1000)).unwrap_or(i64::MAX);
    let found = VictimRef {
        job_id: record.id.clone(),
        tenant: record.tenant.clone(),
        namespace: record.spec.namespace.clone(),
        attempt: record.attempt,
    };
    Ok((found, now.saturating_add(grace_ms)))
}

/// The audit entry of a preemption, in the victim's tenant's trail (its job changed); the rule,
/// never the job it was preempted for.
async fn audit(
    ctx: &Ctx,
    victim: &JobRecord,
    notice: &tuneplane_core::preemption::PreemptNotice,
    now: i64,
) {
    let actor = Actor {
        key_id: "reconciler".into(),
        source: AuditSource::Reconciler,
        request_id: format!("preempt-{}-a{}", victim.id, victim.attempt),
    };
    let change = serde_json::json!({
        "rule": notice.rule.as_str(),
        "attempt": notice.attempt,
        "gpus": notice.gpus,
        "series": notice.series,
        "lost_seconds": notice.lost_seconds,
        "checkpoint": notice.checkpoint,
    });
    let entry = AuditEntry::new(
        &actor,
        &victim.tenant,
        AuditAction::JobPreempt,
        &victim.id,
        change,
        now,
    );
    if let Err(e) = ctx.jobs.append_audit(&entry).await {
        let e = Error::from(e);
        ctx.metrics.inc_step_error(&e);
        tracing::warn!(job_id = %victim.id, error = %e, "preemption audit entry not written");
    }
}
