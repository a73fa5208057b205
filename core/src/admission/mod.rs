//! Admission planning: which queued jobs start now, on which nodes, and why the others wait.
//!
//! [`plan_admissions`] walks the queue in priority then FIFO order over the very capacity snapshot
//! the API shows. A job is admitted only when every pool fits at once (gang), each machine on its
//! own node of the pool's series with enough free GPUs, CPU and memory on that node — never on
//! aggregate counts, so 4+4+4+4 free GPUs cannot host one machine of 8. The planned nodes are
//! part of the admission: the rendered workload is pinned to them (required node affinity), so
//! what Kubernetes binds is what was planned.
//!
//! The rules, in the order they apply (the reconciler's README explains them for operators):
//!
//! 1. **Admitted but unbound.** Machines of admitted jobs whose pods are not bound yet
//!    ([`Reservation`]) keep their planned nodes: their resources are taken first.
//! 2. **CPU jobs and GPU nodes.** A CPU-only machine goes to CPU nodes first. On a GPU node it may
//!    use only what the node's free GPUs do not keep ([`GpuShare`]: 4 CPUs and 32 GiB per free
//!    GPU by default), so CPU work never makes free GPUs unusable, and only what is free there
//!    now: a waiting CPU job reserves CPU nodes only, never a GPU node. A CPU job larger than
//!    every CPU node waits for spare CPU on GPU nodes, where GPU jobs go first.
//! 3. **Never fits.** A job that could not fit even the idle fleet (it shrank after the job was
//!    accepted) waits with `NoMatchingNode` and holds nothing.
//! 4. **Backfill with reservations.** A job that fits now on nodes nobody has reserved is
//!    admitted, whatever waits before it. A job that does not fit reserves, for this pass, the
//!    nodes it would use once they drain (those closest to fitting it); later jobs may not use
//!    reserved nodes. So small jobs fill the gaps a waiting big job cannot use (other series, CPU
//!    nodes, nodes it does not need) but never the nodes it waits for, and the big job starts as
//!    soon as they drain. Reservations are recomputed every pass and never persisted.
//! 5. **Reasons tell the truth.** A job that waits names what is short and where: `InsufficientGpu`
//!    only when fewer nodes of the series have the free GPUs than it needs, else `InsufficientCpu`
//!    or `InsufficientMemory`, with the jobs holding most of it; `QueuedBehindOthers` when it
//!    would fit but only on nodes reserved for an earlier job.
//!
//! Within a pass free resources only shrink and reservations only grow, so a machine shape that
//! failed once fails again for every larger one: the planner remembers failures per series and
//! answers most jobs of a long queue without scanning nodes (see `BENCHMARKS.md`).
//!
//! The rooms: [`order`] is how jobs are ordered (one comparator, also behind `queue_position`
//! and the stored sort key); `fair` holds tenants' shares and quota checks; `planner` the
//! per-node resources, placements and reservations; `round` admits or records a wait, job by
//! job; `reasons` the texts a waiting job is given. [`plan_admissions`] below runs the phases;
//! [`plan_preemptions`] (`preempt`) runs after it and says which running jobs stop for a waiting
//! job that is owed room (quota reclaim, priority within a tenant).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::capacity::CapacitySnapshot;
use crate::claimant::Claimant;
pub use crate::job::PoolPlacement;
use crate::job::{JobRecord, PendingReason};
use crate::quota::{TenantQuota, Verdict};

mod fair;
mod fasthash;
pub mod order;
mod planner;
mod preempt;
mod reasons;
mod round;

use planner::Planner;
pub use preempt::{
    CheckpointSeen, Preemption, PreemptionRules, Victim, plan_preemptions, preemption_candidates,
};
use reasons::QuotaWait;
use round::Round;

/// Machines of an admitted job that hold no node yet (their pods are not bound).
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// Job (or playground) id, for messages.
    pub job_id: crate::ids::JobId,
    /// GPU series; `None` for a CPU-only machine.
    pub series: Option<String>,
    /// GPUs per machine.
    pub gpus: u32,
    /// CPU cores per machine.
    pub cpus: f64,
    /// Memory per machine, GiB.
    pub memory_gb: f64,
    /// Machines still unbound.
    pub machines: u32,
    /// The planned nodes these machines wait for (empty for jobs admitted before plans were
    /// recorded: then any fitting node is held).
    pub nodes: Vec<String>,
}

/// A job to admit now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Job to admit (its record moves to ADMITTED with these placements).
    pub job_id: crate::ids::JobId,
    /// A job's or a playground's admission (each carried out by its own step).
    pub kind: Claimant,
    /// Placement of every pool: the workload is pinned to these nodes.
    pub placements: Vec<PoolPlacement>,
}

/// A job that stays queued, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<'q> {
    /// Job id (borrowed from the queue: a long queue's waiting jobs copy nothing).
    pub job_id: &'q str,
    /// A job or a playground (each records its wait in its own place).
    pub kind: Claimant,
    /// Machine-readable reason.
    pub reason: PendingReason,
    /// Message for people (shared: the many jobs of a long queue that wait for the same reason
    /// share one text).
    pub message: Arc<str>,
}

/// The outcome of one planning round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionPlan<'q> {
    /// Jobs to admit, in order.
    pub admit: Vec<Admission>,
    /// Jobs that wait, in the order they were considered.
    pub waiting: Vec<Waiting<'q>>,
}
/// Plans which `queue` jobs (only `QUEUED` ones count) to admit against `capacity`, after placing
/// `reservations`, under the tenants' `quotas`. The other active records of `queue` (admitted,
/// running) are what each tenant holds now.
///
/// Jobs are considered in [`order`]'s order: tenants take turns by weighted dominant share, each
/// tenant's jobs by priority, submission time and id. A job above a hard limit of its quota waits
/// (`QuotaExceeded`) and reserves nothing; a job above a borrowing limit is considered only after
/// every job within its quota, on nodes nobody reserved, and reserves nothing either.
pub fn plan_admissions<'q>(
    queue: &'q [JobRecord],
    capacity: &CapacitySnapshot,
    reservations: &[Reservation],
    quotas: &[TenantQuota],
) -> AdmissionPlan<'q> {
    // 1. Capacity: free resources per node, less what admitted-but-unbound machines keep.
    let mut planner = Planner::new(capacity);
    planner::hold_reservations(&mut planner, reservations);

    // 2. Order: queued jobs per tenant in queue order; the active ones are what tenants hold.
    let sorted = order::Sorted::new(queue);

    // 3. Tenants: quotas, what each holds, and so its share.
    let totals = fair::Totals::of(capacity);
    let mut tenants = fair::tenants(&sorted, queue, &planner, quotas, &totals);
    let next_job = |tenants: &[fair::Tenant], t: usize| &queue[sorted.keys[tenants[t].next].2];
    let mut turns: BinaryHeap<Reverse<order::Turn>> = (0..tenants.len())
        .filter(|&t| tenants[t].waiting())
        .map(|t| Reverse(order::turn(tenants[t].share, next_job(&tenants, t), t)))
        .collect();

    // 4. Fair share: the tenant with the lowest share goes next with its next job. Within its
    //    quota the job is admitted if it fits now, or waits and reserves the nodes it would use;
    //    over a hard limit it waits; a borrower waits for phase 5.
    let mut round = Round::new(planner, sorted.keys.len());
    let mut borrowers: Vec<(usize, &'q JobRecord)> = Vec::new();
    while let Some(Reverse((.., t))) = turns.pop() {
        // With one tenant left, its jobs go in its own order: no heap work per job.
        let alone = turns.is_empty();
        loop {
            let job = next_job(&tenants, t);
            warm_ahead(queue, &sorted.keys, tenants[t].next, tenants[t].end);
            tenants[t].next += 1;
            let verdict = match tenants[t].quota {
                None => Verdict::Within,
                Some(q) => {
                    round.planner.set_job(&job.spec.pools);
                    fair::quota_verdict(&round.planner, &tenants[t], q, &job.spec)
                }
            };
            match verdict {
                Verdict::Within => {
                    if round.consider(job) {
                        fair::hold(&mut tenants[t], &round.planner, &job.spec, &totals);
                    }
                }
                Verdict::Borrow(over) if !job.spec.preemptible => {
                    round.held_by_quota(t, job, over, QuotaWait::NotPreemptible);
                }
                Verdict::Borrow(_) => borrowers.push((t, job)),
                Verdict::Exceeded(over) => round.held_by_quota(t, job, over, QuotaWait::Limit),
            }
            if !tenants[t].waiting() {
                break;
            }
            if !alone {
                turns.push(Reverse(order::turn(
                    tenants[t].share,
                    next_job(&tenants, t),
                    t,
                )));
                break;
            }
        }
    }

    // 5. Borrowing: after every job within its quota, on nodes nobody reserved, reserving nothing.
    for (t, job) in borrowers {
        let Some(q) = tenants[t].quota else { continue };
        round.planner.set_job(&job.spec.pools);
        match fair::quota_verdict(&round.planner, &tenants[t], q, &job.spec) {
            Verdict::Within => {
                if round.consider(job) {
                    fair::hold(&mut tenants[t], &round.planner, &job.spec, &totals);
                }
            }
            Verdict::Exceeded(over) => round.held_by_quota(t, job, over, QuotaWait::Limit),
            Verdict::Borrow(over) => {
                if round.try_admit(job) {
                    fair::hold(&mut tenants[t], &round.planner, &job.spec, &totals);
                } else {
                    round.held_by_quota(t, job, over, QuotaWait::Borrowing);
                }
            }
        }
    }
    round.plan
}

/// Reads ahead in a tenant's run of `keys` (from `at`, before `end`) what the coming jobs' questions
/// will read: the record of the job 12 ahead, the pools of the one 6 ahead (its record read 6 jobs
/// ago), the pool names and series of the one 3 ahead. Each is one memory read that does not wait
/// for another, so the three overlap with each other and with this job's work, instead of each job
/// waiting for its record, then its pools, then its strings in turn (a long queue's records do not
/// fit any cache; `BENCHMARKS.md`). Plans do not depend on it: it reads and discards.
fn warm_ahead(queue: &[JobRecord], keys: &[(u32, order::Rank, usize)], at: usize, end: usize) {
    let job = |d: usize| (at + d < end).then(|| &queue[keys[at + d].2]);
    let mut sum = 0_usize;
    if let Some(j) = job(12) {
        sum += j.spec.pools.len() + j.id.len();
    }
    if let Some(j) = job(6) {
        sum += j.spec.pools.iter().map(|p| p.nodes as usize).sum::<usize>();
    }
    if let Some(j) = job(3) {
        for p in &j.spec.pools {
            sum += usize::from(p.name.as_bytes().first().copied().unwrap_or(0));
            sum += p.series.as_deref().map_or(0, |s| {
                usize::from(s.as_bytes().first().copied().unwrap_or(0))
            });
        }
        sum += usize::from(j.id.as_bytes().first().copied().unwrap_or(0));
    }
    std::hint::black_box(sum);
}

#[cfg(test)]
mod tests;
