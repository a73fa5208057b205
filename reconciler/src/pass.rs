//! One reconcile pass (docs/design.md §8), a function per phase that [`pass`] calls in turn:
//! [`read_queue`] → [`publish_capacity`] → [`sync_jobs`] → (leader) [`sweep`] →
//! [`crate::arrays::phase`] → [`crate::dependencies::phase`] → [`hold_back`] → quotas →
//! [`plan`] → [`crate::preempt::phase`] → [`within_budget`] → [`admit_planned`] → [`record_waiting`] → playgrounds → live logs.
//!
//! The pass reads the reflector stores once (a [`Cluster`]) and the active index once, then acts.
//! It is a periodic pass over all jobs rather than a per-object reconcile, because admission is
//! gated by a global quantity — free GPUs per node per series — that every queued job competes for
//! in priority order: deciding one job at a time on its own watch event would admit out of order.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use tuneplane_core::admission::{
    Admission, AdmissionPlan, PoolPlacement, Reservation, Waiting, plan_admissions,
};
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::claimant::Claimant;
use tuneplane_core::constants::POOL_LABEL;
use tuneplane_core::job::PendingReason;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::playground::{STAND_IN_POOL, admission_stand_in};
use tuneplane_core::privacy::redact_job_ids;
use tuneplane_core::quota::{TenantQuota, tenant_usage};
use tuneplane_core::render::{label_value, termination_grace_seconds};
use tuneplane_core::store::PlaygroundRecord;

use crate::admit::{a_few_at_a_time, admit, note};
use crate::cluster::{Cluster, pod_info};
use crate::decide::next_pending;
use crate::error::Result;
use crate::sync::{platform_event, sweep_orphans, sync_job};
use crate::{Ctx, workload};

pub use crate::config::PASS_CONCURRENCY as CONCURRENCY;
pub use crate::ctx::PassReport;

/// Machines of admitted jobs that are not bound to a node yet, with the planned nodes they still
/// wait for (planned nodes where no pod of the pool is bound yet).
pub fn reservations(cluster: &Cluster, jobs: &[JobRecord]) -> Vec<Reservation> {
    let mut out = Vec::new();
    for job in jobs.iter().filter(|j| j.state == JobState::Admitted) {
        let pods = cluster.pods_of(job);
        for pool in &job.spec.pools {
            let bound_on: Vec<String> = pods
                .iter()
                .filter(|p| {
                    p.metadata.labels.as_ref().and_then(|l| l.get(POOL_LABEL)) == Some(&pool.name)
                })
                .filter_map(|p| {
                    let info = pod_info(p);
                    if info.terminal { None } else { info.node_name }
                })
                .collect();
            let machines = pool
                .nodes
                .saturating_sub(u32::try_from(bound_on.len()).unwrap_or(u32::MAX));
            if machines == 0 {
                continue;
            }
            let nodes: Vec<String> = job
                .placements
                .iter()
                .find(|p| p.pool == pool.name)
                .map(|p| {
                    p.nodes
                        .iter()
                        .filter(|n| !bound_on.contains(n))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            out.push(Reservation {
                job_id: job.id.clone(),
                series: pool.series.clone(),
                gpus: pool.gpus_per_node,
                cpus: pool.cpus,
                memory_gb: pool.memory_gb,
                machines,
                nodes,
            });
        }
    }
    out
}

/// Extra time past the pods' termination grace that a next attempt waits for its previous
/// attempt's pods (the pass that notices them gone).
const STOPPING_SLACK_MS: i64 = 30_000;

/// Why queued `job` waits for its previous attempt: that attempt's pods still run on nodes that
/// are up (a stopped or interrupted attempt saving its checkpoint within its grace), at most the
/// pods' termination grace after the requeue. `None` when nothing holds it (pods on a lost node
/// are gone with it).
pub fn previous_attempt_stopping(cluster: &Cluster, job: &JobRecord, now: i64) -> Option<String> {
    if job.state != JobState::Queued {
        return None;
    }
    let last = job.attempts.last()?;
    let grace_ms =
        i64::try_from(termination_grace_seconds(job).saturating_mul(1000)).unwrap_or(i64::MAX);
    if now
        >= last
            .finished_at_ms
            .saturating_add(grace_ms)
            .saturating_add(STOPPING_SLACK_MS)
    {
        return None;
    }
    let workload = last.workload_name.as_deref()?;
    let label = label_value(&job.id);
    let alive = cluster
        .job_pods(&job.spec.namespace, &label)
        .into_iter()
        .filter(|p| crate::cluster::belongs_to(&p.metadata, &job.id, workload))
        .filter(|p| !pod_info(p).terminal)
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| cluster.node(n))
                .is_some_and(|n| crate::cluster::node_info(n).ready)
        })
        .count();
    (alive > 0).then(|| {
        format!(
            "attempt {} is stopping: {alive} of its pods have up to {}s to save a checkpoint; attempt {} starts from it",
            last.number, job.spec.deadlines.grace_seconds, job.attempt
        )
    })
}

async fn set_queued_pending(
    ctx: &Ctx,
    job: &JobRecord,
    waiting: Waiting<'_>,
    now: i64,
) -> Result<()> {
    let last = ctx.pending_written_at(&job.id);
    let Some((pending, new_reason)) = next_pending(
        job.pending.as_ref(),
        waiting.reason,
        &waiting.message,
        now,
        last,
    ) else {
        return Ok(());
    };
    let mut next = job.clone();
    let event = new_reason.then(|| {
        platform_event(
            pending.since_ms,
            format!("pending-{:?}-{}", pending.reason, pending.since_ms),
            "Normal",
            &format!("{:?}", pending.reason),
            pending.message.clone(),
        )
    });
    next.pending = Some(pending);
    let events: Vec<_> = event.into_iter().collect();
    ctx.jobs.update_job_with_events(&next, &events).await?;
    ctx.note_pending_written(&job.id, now);
    Ok(())
}

async fn sync_one(ctx: &Ctx, cluster: &Cluster, job: &JobRecord, now: i64) -> (String, Result<()>) {
    let outcome = if ctx.leadership.is_leader() {
        // Boxed: `sync_job`'s future is large (it can archive logs and create workloads), and a
        // pass builds one `sync_one` per active job up front. Unboxed, a pass over 10,000
        // running jobs spent ~20% of its CPU copying and page-faulting those futures (perf),
        // though most of them never await anything.
        Box::pin(sync_job(ctx, cluster, job, now)).await
    } else {
        Ok(())
    };
    (String::from(&job.id), outcome)
}

async fn admit_one(
    ctx: &Ctx,
    job: &JobRecord,
    placements: Vec<PoolPlacement>,
    message: String,
    now: i64,
) -> (String, Result<()>) {
    // Boxed, as in `sync_one`: a pass builds one `admit_one` per kept admission up front, and
    // `admit`'s future (it renders and creates the workload) is kilobytes. Unboxed, 5,000 of
    // them held ~65 MiB at once in the admission burst (heaptrack), though only
    // `PASS_CONCURRENCY` run at a time.
    let outcome = Box::pin(admit(ctx, job, placements, message, None, now)).await;
    (String::from(&job.id), outcome)
}

/// The playground step: reclaim, create pods of admitted ones, record why the others wait
/// (`waits`: reason and message by playground id, from this pass's plan).
async fn playgrounds_step(
    ctx: &Ctx,
    cluster: &Cluster,
    now: i64,
    playgrounds: Option<Vec<PlaygroundRecord>>,
    waits: &HashMap<String, (String, String)>,
    report: &mut PassReport,
) {
    if let Some(all) = playgrounds {
        crate::playground::pass(ctx, cluster, &all, waits, now, report).await;
    }
}

/// What a pass works on: the active jobs, then the live playgrounds standing in the queue as
/// one-machine jobs (`active[..jobs]` are the jobs), and the playground records (`None` when
/// they could not be read: then nothing is admitted, since a running playground's GPUs would be
/// missing from its tenant's quota).
struct Queue {
    active: Vec<JobRecord>,
    jobs: usize,
    playgrounds: Option<Vec<PlaygroundRecord>>,
    /// Active array parents: never admitted themselves, summarised by the array step.
    parents: Vec<JobRecord>,
    /// Jobs held out of this pass's plan (dependencies, array parallelism), with why.
    held: Vec<(JobRecord, PendingReason, String)>,
}

/// Phase 1: reads the active jobs and the playgrounds (one queue).
async fn read_queue(ctx: &Ctx, now: i64, report: &mut PassReport) -> Result<Queue> {
    let mut active = ctx.jobs.list_active().await?;
    // Taken out in place: a partition into two new vectors held the active jobs twice at once.
    let parents: Vec<JobRecord> = active.extract_if(.., |j| j.is_array_parent()).collect();
    let playgrounds = match ctx.jobs.list_playgrounds().await {
        Ok(all) => Some(all),
        Err(e) => {
            note(ctx, report, "playground read", "", Err(e.into()));
            None
        }
    };
    let jobs = active.len();
    let playground_ns = &ctx.config.playground_namespace;
    if let Some(all) = &playgrounds {
        for pg in all
            .iter()
            .filter(|pg| crate::playground::holds_or_wants(pg, now))
        {
            let ns = pg.pod_namespace.as_deref().unwrap_or(playground_ns);
            match admission_stand_in(pg, ns) {
                Ok(job) => active.push(job),
                // A playground the API never made: it takes no part in the plan.
                Err(e) => note(ctx, report, "playground stand-in", &pg.id, Err(e.into())),
            }
        }
    }
    Ok(Queue {
        active,
        jobs,
        playgrounds,
        parents,
        held: Vec::new(),
    })
}

/// Phase 4c: jobs that wait for their dependencies or their array's parallelism taken out of the
/// plan (they wait with a reason of their own and hold no place another job could use), and jobs
/// that ended `DependencyFailed` in this pass dropped from it.
fn hold_back(queue: &mut Queue, deps: crate::dependencies::Outcome) {
    let mut held: HashMap<String, (PendingReason, String)> = deps
        .waiting
        .into_iter()
        .map(|(id, why)| (id, (PendingReason::WaitingForDependencies, why)))
        .collect();
    let ready = queue.active[..queue.jobs]
        .iter()
        .filter(|j| j.array_child().is_some())
        .filter(|j| !held.contains_key(j.id.as_str()) && !deps.failed.contains(j.id.as_str()));
    let by_parallelism: Vec<(String, String)> = tuneplane_core::array::held_back(ready)
        .into_iter()
        .map(|(id, why)| (id.to_owned(), why))
        .collect();
    for (id, why) in by_parallelism {
        held.insert(id, (PendingReason::ArrayParallelism, why));
    }
    if held.is_empty() && deps.failed.is_empty() {
        return;
    }
    // Taken out of the jobs in place (the stand-ins after them stay): no second copy of the queue.
    let jobs = queue.jobs;
    let out: Vec<JobRecord> = queue
        .active
        .extract_if(..jobs, |j| {
            held.contains_key(j.id.as_str()) || deps.failed.contains(j.id.as_str())
        })
        .collect();
    queue.jobs = jobs - out.len();
    queue.held = out
        .into_iter()
        .filter_map(|j| {
            let (reason, why) = held.remove(j.id.as_str())?;
            Some((j, reason, why))
        })
        .collect();
}

/// Why each held-back job waits, recorded on it.
async fn record_held(ctx: &Ctx, queue: &Queue, now: i64, report: &mut PassReport) {
    for (job, reason, why) in &queue.held {
        let waiting = Waiting {
            job_id: &job.id,
            kind: Claimant::Job,
            reason: *reason,
            message: Arc::from(why.as_str()),
        };
        report.waiting += 1;
        let outcome = set_queued_pending(ctx, job, waiting, now).await;
        note(ctx, report, "pending", &job.id, outcome);
    }
}

/// Phase 2: the fleet's capacity with what each tenant holds and waits for, published (the
/// API shows a tenant its own) and counted in the metrics.
async fn publish_capacity(
    ctx: &Ctx,
    cluster: &Cluster,
    queue: &Queue,
    now: i64,
) -> Result<CapacitySnapshot> {
    let mut capacity = cluster.capacity(now, ctx.config.gpu_share, &ctx.config.interruption_taints);
    capacity.tenants = tenant_usage(&queue.active);
    ctx.metrics.set_tenants(&capacity.tenants);
    ctx.publish_capacity(&capacity).await?;
    let jobs = &queue.active[..queue.jobs];
    let queued = jobs.iter().filter(|j| j.state == JobState::Queued).count();
    ctx.metrics.set_jobs(queued, jobs.len());
    Ok(capacity)
}

/// Phase 3: every active job followed a step (a few at a time: jobs are independent, and a
/// pass with many changes must not be a queue of store round trips).
async fn sync_jobs(
    ctx: &Ctx,
    cluster: &Cluster,
    jobs: &[JobRecord],
    now: i64,
    report: &mut PassReport,
) {
    // Futures are collected first: a stream over a borrowing closure would not be `Send`.
    let syncs: Vec<_> = jobs
        .iter()
        .map(|job| sync_one(ctx, cluster, job, now))
        .collect();
    for (id, outcome) in a_few_at_a_time(syncs).await {
        note(ctx, report, "sync", &id, outcome);
    }
}

/// Phase 4 (leader): workloads and NetworkPolicies no current attempt owns are deleted.
async fn sweep(ctx: &Ctx, cluster: &Cluster, jobs: &[JobRecord], report: &mut PassReport) {
    let ids: HashMap<String, u32> = jobs
        .iter()
        .map(|j| (String::from(&j.id), j.attempt))
        .collect();
    let orphans = sweep_orphans(ctx, cluster, &ids).await;
    note(ctx, report, "orphan sweep", "", orphans);
    let policies = crate::policies::sweep(ctx, cluster, &ids).await;
    note(ctx, report, "network policy sweep", "", policies);
}

/// Phase 5: the admission plan over the queue, with what admitted but unbound work holds (also
/// returned: preemption plans on the same books); a job queued again waits while its previous
/// attempt's pods still save their checkpoint.
fn plan<'q>(
    ctx: &Ctx,
    cluster: &Cluster,
    queue: &'q Queue,
    playgrounds: &[PlaygroundRecord],
    capacity: &CapacitySnapshot,
    quotas: &[TenantQuota],
    now: i64,
) -> (AdmissionPlan<'q>, Vec<Reservation>) {
    let jobs = &queue.active[..queue.jobs];
    let mut held = reservations(cluster, jobs);
    held.extend(crate::playground::reservations(
        cluster,
        playgrounds,
        &ctx.config.playground_namespace,
        now,
    ));
    let mut plan = plan_admissions(&queue.active, capacity, &held, quotas);
    let stopping: HashMap<&str, String> = jobs
        .iter()
        .filter_map(|j| previous_attempt_stopping(cluster, j, now).map(|m| (j.id.as_str(), m)))
        .collect();
    if !stopping.is_empty() {
        plan.admit
            .retain(|a| !stopping.contains_key(a.job_id.as_str()));
        plan.waiting.retain(|w| !stopping.contains_key(w.job_id));
        for (id, message) in stopping {
            plan.waiting.push(Waiting {
                job_id: id,
                kind: Claimant::Job,
                reason: PendingReason::PreviousAttemptStopping,
                message: Arc::from(message.as_str()),
            });
        }
    }
    (plan, held)
}

/// Phase 6: the plan's admissions cut to what the client's rate limit creates in about a
/// second (each admission counted by the objects it creates, `Config::requests_per_pass`): a job
/// that arrives meanwhile (another tenant's first among them) is planned at the next pass instead
/// of waiting behind a creation backlog planned before it came. The rest stay QUEUED and are
/// planned again. Returns how many were deferred.
fn within_budget(
    ctx: &Ctx,
    admit: &mut Vec<Admission>,
    by_id: &HashMap<&str, &JobRecord>,
) -> usize {
    let budget = ctx.config.requests_per_pass();
    let (mut spent, mut keep) = (0usize, 0usize);
    for a in admit.iter() {
        let cost = match a.kind {
            Claimant::Playground => 2, // its server key's Secret and its Pod
            Claimant::Job => by_id
                .get(a.job_id.as_str())
                .map_or(1, |j| workload::creates_per_admission(ctx, j.spec.kind())),
        };
        if keep > 0 && spent + cost > budget {
            break;
        }
        spent += cost;
        keep += 1;
    }
    let deferred = admit.len().saturating_sub(keep);
    admit.truncate(keep);
    deferred
}

/// Phase 7: the kept admissions carried out: playgrounds recorded for their pods, jobs'
/// workloads created (a few at a time).
async fn admit_planned(
    ctx: &Ctx,
    admit: Vec<Admission>,
    by_id: &HashMap<&str, &JobRecord>,
    playgrounds: &mut [PlaygroundRecord],
    now: i64,
    report: &mut PassReport,
) {
    let (playground_admits, job_admits): (Vec<_>, Vec<_>) = admit
        .into_iter()
        .partition(|a| a.kind == Claimant::Playground);
    for a in playground_admits {
        let node = a.placements.first().and_then(|p| p.nodes.first()).cloned();
        let Some(node) = node else { continue };
        let outcome = crate::playground::admit(ctx, playgrounds, &a.job_id, node, now).await;
        report.admitted += usize::from(outcome.is_ok());
        note(ctx, report, "admit playground", &a.job_id, outcome);
    }
    let admits: Vec<_> = job_admits
        .into_iter()
        .filter_map(|a| {
            let job = *by_id.get(a.job_id.as_str())?;
            let placement = a
                .placements
                .iter()
                .map(|p| format!("{}: {}", p.pool, p.nodes.join(", ")))
                .collect::<Vec<_>>()
                .join("; ");
            let message = format!("admitted; planned nodes {placement}");
            Some(admit_one(ctx, job, a.placements, message, now))
        })
        .collect();
    for (id, outcome) in a_few_at_a_time(admits).await {
        report.admitted += usize::from(outcome.is_ok());
        note(ctx, report, "admit", &id, outcome);
    }
}

/// Phase 8: why each job that was not admitted waits, recorded on it (naming only its own
/// tenant's jobs); a playground's reason is returned for the playground step, by id.
async fn record_waiting(
    ctx: &Ctx,
    waiting: Vec<Waiting<'_>>,
    by_id: &HashMap<&str, &JobRecord>,
    now: i64,
    report: &mut PassReport,
) -> HashMap<String, (String, String)> {
    let mut playground_waits = HashMap::new();
    for mut w in waiting {
        let Some(&job) = by_id.get(w.job_id) else {
            continue;
        };
        let tenant_of = |id: &str| by_id.get(id).map(|j| j.tenant.as_str());
        if let Cow::Owned(text) = redact_job_ids(&w.message, &job.tenant, tenant_of) {
            w.message = Arc::from(text);
        }
        report.waiting += 1;
        if w.kind == Claimant::Playground {
            // The stand-in job's one pool is no name a user gave: leave it out.
            let prefix = format!("pool {STAND_IN_POOL}: ");
            let message = w.message.strip_prefix(&prefix).unwrap_or(&w.message);
            playground_waits.insert(
                w.job_id.to_owned(),
                (format!("{:?}", w.reason), message.to_owned()),
            );
            continue;
        }
        let outcome = set_queued_pending(ctx, job, w, now).await;
        note(ctx, report, "pending", &job.id, outcome);
    }
    playground_waits
}

/// Runs one pass over `cluster` at `now`, phase by phase (docs/design.md §8): read the queue,
/// publish capacity, sync jobs; as the leader also sweep, read quotas, plan, cut the plan to the
/// pass's budget, admit, record why the rest wait, run the playgrounds and ship live logs.
#[tracing::instrument(name = "pass", skip(ctx, cluster), err)]
pub async fn pass(ctx: &Ctx, cluster: &Cluster, now: i64) -> Result<PassReport> {
    let mut report = PassReport::default();
    let mut queue = read_queue(ctx, now, &mut report).await?;
    let capacity = publish_capacity(ctx, cluster, &queue, now).await?;
    sync_jobs(ctx, cluster, &queue.active[..queue.jobs], now, &mut report).await;
    if !ctx.leadership.is_leader() {
        return Ok(report);
    }
    sweep(ctx, cluster, &queue.active[..queue.jobs], &mut report).await;
    if !ctx.leadership.is_leader() {
        return Ok(report);
    }
    // Phase 4a: arrays create their children, pass stops on and summarise them.
    let parents = std::mem::take(&mut queue.parents);
    crate::arrays::phase(ctx, &parents, &queue.active[..queue.jobs], now, &mut report).await;
    // Phase 4b: dependencies met, still waited for, or failed.
    let deps =
        crate::dependencies::phase(ctx, &parents, &queue.active[..queue.jobs], now, &mut report)
            .await;
    hold_back(&mut queue, deps);
    // Quotas are read every pass (one small query), so a change applies at the next pass. A pass
    // that cannot read them admits nothing rather than admit past a limit.
    let quotas = match ctx.jobs.list_quotas().await {
        // Tenants without a record get the configured default (if any).
        Ok(q) => ctx
            .config
            .default_quota
            .complete(q, queue.active.iter().map(|j| &j.tenant)),
        Err(e) => {
            note(ctx, &mut report, "quota read", "", Err(e.into()));
            let playgrounds = queue.playgrounds.take();
            playgrounds_step(ctx, cluster, now, playgrounds, &HashMap::new(), &mut report).await;
            return Ok(report);
        }
    };
    let Some(mut playgrounds) = queue.playgrounds.take() else {
        // Without the playgrounds nothing is admitted (see `Queue`); jobs were synced.
        return Ok(report);
    };
    let waits = {
        let (mut plan, held) = plan(ctx, cluster, &queue, &playgrounds, &capacity, &quotas, now);
        // Phase 5b: waiting jobs owed room take it from running ones (docs/design.md §8, "Preemption").
        crate::preempt::phase(
            ctx,
            cluster,
            &queue.active,
            &capacity,
            &held,
            &quotas,
            &mut plan,
            now,
            &mut report,
        )
        .await;
        // Plans name jobs by id: look them up once each (10,000 queued jobs made a scan per job
        // quadratic).
        let by_id: HashMap<&str, &JobRecord> =
            queue.active.iter().map(|j| (j.id.as_str(), j)).collect();
        report.deferred = within_budget(ctx, &mut plan.admit, &by_id);
        let admit = std::mem::take(&mut plan.admit);
        admit_planned(ctx, admit, &by_id, &mut playgrounds, now, &mut report).await;
        let waits = record_waiting(ctx, plan.waiting, &by_id, now, &mut report).await;
        record_held(ctx, &queue, now, &mut report).await;
        waits
    };
    playgrounds_step(ctx, cluster, now, Some(playgrounds), &waits, &mut report).await;
    if ctx.leadership.is_leader() {
        let jobs = &queue.active[..queue.jobs];
        for (id, e) in crate::live_logs::ship(ctx, cluster, jobs, now).await {
            note(ctx, &mut report, "live logs", &id, Err(e));
        }
    }
    Ok(report)
}
