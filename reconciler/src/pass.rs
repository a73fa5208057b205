//! One reconcile pass (docs/design.md §8), a function per phase that [`pass`] calls in turn:
//! [`read_queue`] → [`publish_capacity`] → [`sync_jobs`] → (leader) [`sweep`] →
//! [`crate::arrays::phase`] → [`crate::dependencies::phase`] → [`hold_back`] → quotas →
//! [`plan`] → [`crate::preempt::phase`] → [`to_decide`] → [`decide_planned`] → [`create_workloads`]
//! → [`record_waiting`] → playgrounds → live logs.
//!
//! The pass reads the reflector stores once (a [`Cluster`]) and the active index once, then acts.
//! It is a periodic pass over all jobs rather than a per-object reconcile, because admission is
//! gated by a global quantity — free GPUs per node per series — that every queued job competes for
//! in priority order: deciding one job at a time on its own watch event would admit out of order.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use tuneplane_core::admission::{Admission, AdmissionPlan, Reservation, Waiting, plan_admissions};
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::claimant::Claimant;
use tuneplane_core::constants::POOL_LABEL;
use tuneplane_core::job::PendingReason;
use tuneplane_core::job::{JobEvent, JobRecord, JobState};
use tuneplane_core::playground::{STAND_IN_POOL, admission_stand_in};
use tuneplane_core::privacy::redact_job_ids;
use tuneplane_core::quota::{TenantQuota, tenant_usage};
use tuneplane_core::render::{label_value, termination_grace_seconds};
use tuneplane_core::store::PlaygroundRecord;

use crate::admit::{
    a_few_at_a_time, admission, create_workload, note, record_admissions, write_batch,
};
use crate::cluster::{Cluster, pod_info};
use crate::decide::next_pending;
use crate::error::Result;
use crate::sync::{Synced, platform_event, sweep_orphans, sync_job};
use crate::{Ctx, workload};

pub use crate::config::PASS_CONCURRENCY as CONCURRENCY;
pub use crate::ctx::PassReport;
use crate::ctx::PhaseClock;

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

/// A queued job's new pending reason (the record and, when the reason itself changed, its
/// event), or `None` when the stored one stands (see [`next_pending`]).
fn queued_pending(
    ctx: &Ctx,
    job: &JobRecord,
    waiting: &Waiting<'_>,
    now: i64,
) -> Option<(JobRecord, Vec<JobEvent>)> {
    let last = ctx.pending_written_at(&job.id);
    let (pending, new_reason) = next_pending(
        job.pending.as_ref(),
        waiting.reason,
        &waiting.message,
        now,
        last,
    )?;
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
    Some((next, event.into_iter().collect()))
}

/// Queued jobs' new pending reasons written, in one store batch (one commit in the embedded
/// store: a pass whose plan changed many reasons stays short).
async fn write_pending(
    ctx: &Ctx,
    changes: &[(JobRecord, Vec<JobEvent>)],
    now: i64,
    report: &mut PassReport,
) {
    let outcomes = write_batch(ctx, changes.iter().map(|(j, e)| (j, e.as_slice()))).await;
    for ((job, _), outcome) in changes.iter().zip(outcomes) {
        if outcome.is_ok() {
            ctx.note_pending_written(&job.id, now);
        }
        note(ctx, report, "pending", &job.id, outcome.map(drop));
    }
}

async fn sync_one<'j>(
    ctx: &Ctx,
    cluster: &Cluster,
    job: &'j JobRecord,
    now: i64,
) -> (&'j JobRecord, Result<Synced>) {
    let outcome = if ctx.leadership.is_leader() {
        // Boxed: `sync_job`'s future is large (it can archive logs and create workloads), and a
        // pass builds one `sync_one` per active job up front. Unboxed, a pass over 10,000
        // running jobs spent ~20% of its CPU copying and page-faulting those futures (perf),
        // though most of them never await anything.
        Box::pin(sync_job(ctx, cluster, job, now)).await
    } else {
        Ok(Synced::Done)
    };
    (job, outcome)
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
    let mut changes = Vec::new();
    for (job, reason, why) in &queue.held {
        let waiting = Waiting {
            job_id: &job.id,
            kind: Claimant::Job,
            reason: *reason,
            message: Arc::from(why.as_str()),
        };
        report.waiting += 1;
        changes.extend(queued_pending(ctx, job, &waiting, now));
    }
    write_pending(ctx, &changes, now, report).await;
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
/// pass with many changes must not be a queue of store round trips). Returns the admitted jobs
/// whose workload is missing, for the create phase.
async fn sync_jobs(
    ctx: &Ctx,
    cluster: &Cluster,
    jobs: &[JobRecord],
    now: i64,
    report: &mut PassReport,
) -> Vec<JobRecord> {
    // Futures are collected first: a stream over a borrowing closure would not be `Send`.
    let syncs: Vec<_> = jobs
        .iter()
        .map(|job| sync_one(ctx, cluster, job, now))
        .collect();
    let mut to_create = Vec::new();
    let mut writes = Vec::new();
    for (job, outcome) in a_few_at_a_time(syncs).await {
        match outcome {
            Ok(Synced::NeedsCreate) => to_create.push(job.clone()),
            Ok(Synced::Write(change)) => writes.push(*change),
            Ok(Synced::Done) => {}
            Err(e) => note(ctx, report, "sync", &job.id, Err(e)),
        }
    }
    // The records the sync changed (RUNNING, pending reasons), one store batch: a pass in which
    // hundreds of pods started stays short.
    let outcomes = write_batch(ctx, writes.iter().map(|(j, e)| (j, e.as_slice()))).await;
    for ((job, _), outcome) in writes.iter().zip(outcomes) {
        if matches!(&outcome, Ok(stored) if stored.state == JobState::Running) {
            tracing::info!(job_id = %job.id, "running");
        }
        note(ctx, report, "sync", &job.id, outcome.map(drop));
    }
    to_create
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

/// Most admissions a pass decides (records it writes ADMITTED, in one store batch): a pass must
/// stay short for a job that arrives meanwhile (another tenant's first among them) to be decided
/// at the next one.
pub const DECISIONS_PER_PASS: usize = 500;

/// How many passes' worth of creates (`Config::requests_per_pass`) may wait decided but not yet
/// created: decisions run ahead of the creates by at most this many seconds of the client's rate
/// limit, so that a decided job's workload follows within a bounded time (far inside any
/// pre-running deadline) and a later, more important job is not locked out by decisions made
/// minutes before its workload could be.
pub const CREATE_BACKLOG_PASSES: usize = 30;

/// Phase 6: the plan's admissions cut to what the pass decides: at most [`DECISIONS_PER_PASS`],
/// and no more than keeps the creates still to make (`backlog`, in requests, the ones the sync
/// found plus these) within [`CREATE_BACKLOG_PASSES`] of the client's rate (each admission counted
/// by the objects it creates). The rest stay QUEUED and are planned again next pass. Returns how
/// many were deferred.
fn to_decide(
    ctx: &Ctx,
    admit: &mut Vec<Admission>,
    backlog: usize,
    by_id: &HashMap<&str, &JobRecord>,
) -> usize {
    let room = ctx
        .config
        .requests_per_pass()
        .saturating_mul(CREATE_BACKLOG_PASSES)
        .saturating_sub(backlog);
    let (mut spent, mut keep) = (0usize, 0usize);
    for a in admit.iter() {
        let cost = match a.kind {
            Claimant::Playground => 2, // its server key's Secret and its Pod
            Claimant::Job => by_id
                .get(a.job_id.as_str())
                .map_or(1, |j| workload::creates_per_admission(ctx, j.spec.kind())),
        };
        if keep == DECISIONS_PER_PASS || (spent + cost > room && (keep > 0 || backlog > 0)) {
            break;
        }
        spent += cost;
        keep += 1;
    }
    let deferred = admit.len().saturating_sub(keep);
    admit.truncate(keep);
    deferred
}

/// Phase 7: the kept admissions decided: playgrounds recorded for their pods, jobs' records
/// written ADMITTED (one store batch). Returns the jobs' stored records, for the create phase.
async fn decide_planned(
    ctx: &Ctx,
    admit: Vec<Admission>,
    by_id: &HashMap<&str, &JobRecord>,
    playgrounds: &mut [PlaygroundRecord],
    now: i64,
    report: &mut PassReport,
) -> Vec<JobRecord> {
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
    let mut decisions = Vec::with_capacity(job_admits.len());
    for a in job_admits {
        let Some(&job) = by_id.get(a.job_id.as_str()) else {
            continue;
        };
        let placement = a
            .placements
            .iter()
            .map(|p| format!("{}: {}", p.pool, p.nodes.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        let message = format!("admitted; planned nodes {placement}");
        match admission(job, a.placements, message, None, now) {
            Ok(d) => decisions.push(d),
            Err(e) => note(ctx, report, "admit", &job.id, Err(e)),
        }
    }
    // One store batch (one commit in the embedded store): the decisions of a burst keep the
    // pass short, so a job that arrives meanwhile is decided at the next pass.
    let mut decided = Vec::with_capacity(decisions.len());
    for (id, outcome) in record_admissions(ctx, &decisions).await {
        match outcome {
            Ok(stored) => {
                report.admitted += 1;
                decided.push(stored);
            }
            Err(e) => note(ctx, report, "admit", &id, Err(e)),
        }
    }
    decided
}

/// Phase 7b: workloads of admitted jobs offered to [`crate::creates`] in [`create_order`]: they
/// start beside the pass as slots free (within the requests the client's rate limit sends in
/// about a second), the next at the front of this order each time one ends. Returns how many
/// wait, ADMITTED with their nodes reserved.
fn create_workloads(ctx: &Arc<Ctx>, to_create: Vec<JobRecord>) -> usize {
    let offers = create_order(to_create)
        .into_iter()
        .map(|job| {
            let cost = workload::creates_per_admission(ctx, job.spec.kind());
            let owned = Arc::clone(ctx);
            let job_id = String::from(&job.id);
            let create: crate::creates::CreateFuture = Box::pin(async move {
                // A replica that lost the Lease while this waited for its turn leaves it to the
                // next leader.
                if !owned.leadership.is_leader() {
                    return Ok(());
                }
                create_workload(&owned, &job).await
            });
            crate::creates::Offer {
                job_id,
                cost,
                create,
            }
        })
        .collect();
    ctx.creates.offer(offers)
}

/// The order in which admitted jobs' workloads are created: tenants take turns (one job each per
/// round, the tenant whose next job is most important and oldest first), and each tenant's jobs go
/// by priority, then by when they were admitted. A tenant whose first job was just decided is in
/// the first round, however many creates another tenant's burst left waiting.
pub fn create_order(jobs: Vec<JobRecord>) -> Vec<JobRecord> {
    let key = |j: &JobRecord| {
        (
            std::cmp::Reverse(j.spec.priority),
            j.admitted_at_ms.unwrap_or(i64::MAX),
            j.id.clone(),
        )
    };
    let mut by_tenant: HashMap<tuneplane_core::ids::TenantId, Vec<JobRecord>> = HashMap::new();
    for job in jobs {
        by_tenant.entry(job.tenant.clone()).or_default().push(job);
    }
    let mut queues: Vec<std::collections::VecDeque<JobRecord>> = by_tenant
        .into_values()
        .map(|mut js| {
            js.sort_by_key(key);
            js.into()
        })
        .collect();
    queues.sort_by_key(|q| q.front().map(key));
    let total = queues.iter().map(std::collections::VecDeque::len).sum();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        for q in &mut queues {
            if let Some(job) = q.pop_front() {
                out.push(job);
            }
        }
    }
    out
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
    let mut changes = Vec::new();
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
        changes.extend(queued_pending(ctx, job, &w, now));
    }
    write_pending(ctx, &changes, now, report).await;
    playground_waits
}

/// Runs one pass over `cluster` at `now`, phase by phase (docs/design.md §8): read the queue,
/// publish capacity, sync jobs; as the leader also sweep, read quotas, plan, decide what fits,
/// create workloads within the pass's budget, record why the rest wait, run the playgrounds and
/// ship live logs.
#[tracing::instrument(name = "pass", skip(ctx, cluster), err)]
pub async fn pass(ctx: &Arc<Ctx>, cluster: &Cluster, now: i64) -> Result<PassReport> {
    let mut report = PassReport::default();
    let mut clock = PhaseClock::start();
    let mut queue = read_queue(ctx, now, &mut report).await?;
    clock.lap(&mut report, "read");
    let capacity = publish_capacity(ctx, cluster, &queue, now).await?;
    clock.lap(&mut report, "capacity");
    let mut to_create =
        sync_jobs(ctx, cluster, &queue.active[..queue.jobs], now, &mut report).await;
    clock.lap(&mut report, "sync");
    if !ctx.leadership.is_leader() {
        return Ok(report);
    }
    sweep(ctx, cluster, &queue.active[..queue.jobs], &mut report).await;
    clock.lap(&mut report, "sweep");
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
    clock.lap(&mut report, "arrays and dependencies");
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
            // What was decided before is still created.
            report.deferred += create_workloads(ctx, to_create);
            let playgrounds = queue.playgrounds.take();
            playgrounds_step(ctx, cluster, now, playgrounds, &HashMap::new(), &mut report).await;
            return Ok(report);
        }
    };
    let Some(mut playgrounds) = queue.playgrounds.take() else {
        // Without the playgrounds nothing is admitted (see `Queue`); jobs were synced, and what
        // was decided before is still created.
        report.deferred += create_workloads(ctx, to_create);
        return Ok(report);
    };
    let waits = {
        let (mut plan, held) = plan(ctx, cluster, &queue, &playgrounds, &capacity, &quotas, now);
        clock.lap(&mut report, "plan");
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
        clock.lap(&mut report, "preempt");
        // Plans name jobs by id: look them up once each (10,000 queued jobs made a scan per job
        // quadratic).
        let by_id: HashMap<&str, &JobRecord> =
            queue.active.iter().map(|j| (j.id.as_str(), j)).collect();
        let backlog: usize = to_create
            .iter()
            .map(|j| workload::creates_per_admission(ctx, j.spec.kind()))
            .sum();
        report.deferred = to_decide(ctx, &mut plan.admit, backlog, &by_id);
        let admit = std::mem::take(&mut plan.admit);
        let decided = decide_planned(ctx, admit, &by_id, &mut playgrounds, now, &mut report).await;
        clock.lap(&mut report, "decide");
        to_create.extend(decided);
        report.deferred += create_workloads(ctx, to_create);
        clock.lap(&mut report, "create (started)");
        let waits = record_waiting(ctx, plan.waiting, &by_id, now, &mut report).await;
        record_held(ctx, &queue, now, &mut report).await;
        clock.lap(&mut report, "pending reasons");
        waits
    };
    playgrounds_step(ctx, cluster, now, Some(playgrounds), &waits, &mut report).await;
    clock.lap(&mut report, "playgrounds");
    if ctx.leadership.is_leader() {
        let jobs = &queue.active[..queue.jobs];
        for (id, e) in crate::live_logs::ship(ctx, cluster, jobs, now).await {
            note(ctx, &mut report, "live logs", &id, Err(e));
        }
        clock.lap(&mut report, "live logs");
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuneplane_core::spec::JobSpec;

    fn admitted(id: &str, tenant: &str, priority: i32, at: i64) -> JobRecord {
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": [{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
            "cpus": 1.0, "memory_gb": 1.0}],
            "deadlines": {"pre_running_seconds": 10, "run_seconds": 100}, "priority": priority,
            "labels": {}, "namespace": "ns", "platform_version": "0"
        }))
        .unwrap();
        let mut job =
            JobRecord::new_queued(id.parse().unwrap(), tenant.parse().unwrap(), spec, "ab", 0);
        job.transition(JobState::Admitted, at).unwrap();
        job
    }

    fn ids(jobs: &[JobRecord]) -> Vec<&str> {
        jobs.iter().map(|j| j.id.as_str()).collect()
    }

    #[test]
    fn tenants_take_turns_and_a_late_tenant_is_in_the_first_round() {
        let mut jobs: Vec<JobRecord> = (0..5)
            .map(|i| admitted(&format!("a-{i}"), "team-a", 0, 1_000 + i))
            .collect();
        jobs.push(admitted("b-0", "team-b", 0, 9_000));
        jobs.push(admitted("c-0", "team-c", 0, 2_000));
        jobs.push(admitted("c-1", "team-c", 0, 2_001));
        let order = create_order(jobs);
        assert_eq!(
            ids(&order),
            ["a-0", "c-0", "b-0", "a-1", "c-1", "a-2", "a-3", "a-4"]
        );
    }

    #[test]
    fn a_tenants_more_important_job_is_created_before_its_older_ones() {
        let jobs = vec![
            admitted("old", "team-a", 0, 1_000),
            admitted("urgent", "team-a", 5, 5_000),
            admitted("other", "team-b", 0, 2_000),
        ];
        let order = create_order(jobs);
        assert_eq!(ids(&order), ["urgent", "other", "old"]);
    }

    #[test]
    fn nothing_to_create_is_an_empty_order() {
        assert!(create_order(Vec::new()).is_empty());
    }
}
