//! How admission orders jobs: the one comparator behind the planner's queue, the fair-share turn
//! between tenants, a job's `queue_position` and the active index's sort key.
//!
//! 1. **Tenants take turns by share.** Among tenants with queued jobs, the one with the lowest
//!    weighted dominant share of what it holds goes next ([`Turn`]); ties go to the tenant whose
//!    next job comes first by rules 2–4.
//! 2. **Priority**, high first.
//! 3. **Submission time**, earliest first.
//! 4. **Job id**, so that two jobs never tie.
//!
//! Rules 2–4 are a tenant's own order and the queue order users see ([`job_order`],
//! [`active_sort_key`]); rule 1 interleaves tenants during a pass. Backfill may still start a
//! later job first where it fits nodes an earlier one cannot use (see the planner).

use std::cmp::{Ordering, Reverse};

use crate::job::{JobRecord, JobState};

use super::fasthash::FastMap;

/// Rules 2 and 3 as one plain value (no pointer to chase: a queue of 100,000 records sorted
/// through references spent most of its time loading them); rule 4 breaks its ties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank {
    priority: Reverse<i32>,
    submitted_at_ms: i64,
}

impl Rank {
    /// The rank of a job of `priority` submitted at `submitted_at_ms` (Unix ms; times before
    /// the epoch count as the epoch, as in the stored sort key).
    pub fn new(priority: i32, submitted_at_ms: i64) -> Self {
        Rank {
            priority: Reverse(priority),
            submitted_at_ms: submitted_at_ms.max(0),
        }
    }

    /// The rank of `job`.
    pub fn of(job: &JobRecord) -> Self {
        Rank::new(job.spec.priority, job.submitted_at_ms)
    }
}

/// Rules 2–4: whether `a` comes before `b` in the queue.
pub fn job_order(a: &JobRecord, b: &JobRecord) -> Ordering {
    Rank::of(a).cmp(&Rank::of(b)).then_with(|| a.id.cmp(&b.id))
}

/// Rules 2–4 spelled as a string that orders byte-wise like [`job_order`] (the active index's
/// range key, ascending = admission order): inverted priority, submission time, id.
pub fn active_sort_key(priority: i32, submitted_at_ms: i64, id: &str) -> String {
    let inverted = i64::from(i32::MAX) - i64::from(priority);
    format!("{inverted:010}#{:013}#{id}", submitted_at_ms.max(0))
}

/// Whether `job` waits in the queue: queued and not being stopped.
pub fn in_queue(job: &JobRecord) -> bool {
    job.state == JobState::Queued && !job.stop_requested
}

/// Whether `job` was last seen waiting for its dependencies (it is not in line yet).
pub fn waits_for_dependencies(job: &JobRecord) -> bool {
    job.pending
        .as_ref()
        .is_some_and(|p| p.reason == crate::job::PendingReason::WaitingForDependencies)
}

/// How many jobs of `jobs` that wait in the queue come before `job` ([`job_order`]); jobs
/// waiting for their dependencies are not in line.
pub fn queue_ahead(job: &JobRecord, jobs: &[JobRecord]) -> u64 {
    jobs.iter()
        .filter(|j| {
            in_queue(j)
                && !waits_for_dependencies(j)
                && j.id != job.id
                && job_order(j, job) == Ordering::Less
        })
        .count() as u64
}

/// Rule 1: a tenant's turn, lowest first; a max-heap holds `Reverse(turn)`.
pub(super) type Turn<'q> = (u64, Rank, &'q str, usize);

/// The turn of tenant `t` whose weighted dominant share is `share` and whose next job is `next`.
pub(super) fn turn<'q>(share: f64, next: &'q JobRecord, t: usize) -> Turn<'q> {
    // Shares are never negative, so their bit patterns order as the numbers do.
    (share.to_bits(), Rank::of(next), next.id.as_str(), t)
}

/// A pass's queue: queued jobs grouped by tenant, each group in rules 2–4 order, and the active
/// jobs that hold resources (admitted, running), by tenant.
pub(super) struct Sorted<'q> {
    /// Tenant names by index, in the order they first appear in the queue.
    pub(super) tenants: Vec<&'q str>,
    /// Queued jobs: (tenant, rank, index into the queue), grouped by tenant.
    pub(super) keys: Vec<(u32, Rank, usize)>,
    /// Per tenant, its range of `keys`.
    pub(super) runs: Vec<std::ops::Range<usize>>,
    /// Active jobs that hold resources: (tenant, index into the queue).
    pub(super) holding: Vec<(usize, usize)>,
}

impl<'q> Sorted<'q> {
    /// Sorts `queue` (terminal records and queued ones being stopped are left out).
    pub(super) fn new(queue: &'q [JobRecord]) -> Self {
        let mut index: FastMap<&str, u32> = FastMap::default();
        let mut tenants: Vec<&str> = Vec::new();
        // Consecutive records of one tenant skip the map.
        let mut last: Option<(&str, u32)> = None;
        let mut tenant_of = |name: &'q str| -> u32 {
            if let Some((n, i)) = last
                && n == name
            {
                return i;
            }
            let i = *index.entry(name).or_insert_with(|| {
                tenants.push(name);
                (tenants.len() - 1) as u32
            });
            last = Some((name, i));
            i
        };
        let mut keys: Vec<(u32, Rank, usize)> = Vec::new();
        let mut holding = Vec::new();
        for (k, j) in queue.iter().enumerate() {
            if j.state.is_terminal() || (j.state == JobState::Queued && j.stop_requested) {
                continue;
            }
            let t = tenant_of(&j.tenant);
            if j.state == JobState::Queued {
                keys.push((t, Rank::of(j), k));
            } else {
                holding.push((t as usize, k));
            }
        }
        // Sorted as one packed integer per job (tenant, priority, time order as the tuple does),
        // the id read only for ties: comparing the tuples themselves was a tenth of a long pass.
        let mut packed: Vec<(u128, usize)> =
            keys.iter().map(|&(t, r, k)| (pack(t, r), k)).collect();
        packed.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| queue[a.1].id.cmp(&queue[b.1].id))
        });
        let keys: Vec<(u32, Rank, usize)> = packed
            .into_iter()
            .map(|(p, k)| {
                let (t, r) = unpack(p);
                (t, r, k)
            })
            .collect();
        let mut runs = vec![0..0; tenants.len()];
        let mut at = 0;
        while at < keys.len() {
            let t = keys[at].0;
            let start = at;
            while at < keys.len() && keys[at].0 == t {
                at += 1;
            }
            runs[t as usize] = start..at;
        }
        Sorted {
            tenants,
            keys,
            runs,
            holding,
        }
    }
}

/// `(tenant, rank)` as one integer that orders as the tuple: the tenant, then the priority
/// inverted (high first), then the submission time (never negative in a rank).
fn pack(tenant: u32, rank: Rank) -> u128 {
    let priority = !((rank.priority.0 as u32) ^ 0x8000_0000);
    (u128::from(tenant) << 96)
        | (u128::from(priority) << 64)
        | u128::from(rank.submitted_at_ms as u64)
}

/// The inverse of [`pack`].
fn unpack(p: u128) -> (u32, Rank) {
    let priority = ((!((p >> 64) as u32)) ^ 0x8000_0000) as i32;
    let rank = Rank {
        priority: Reverse(priority),
        submitted_at_ms: (p as u64) as i64,
    };
    ((p >> 96) as u32, rank)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A one-CPU job of tenant `acme` (the admission tests' fixture).
    fn job(id: &str, priority: i32, submitted: i64) -> JobRecord {
        let pool = serde_json::json!(
            {"name": "w", "nodes": 1, "gpus_per_node": 0, "cpus": 1.0, "memory_gb": 1.0}
        );
        super::super::tests::job(id, priority, submitted, vec![pool])
    }

    #[test]
    fn priority_then_submission_then_id() {
        let mut jobs = [
            job("c", 0, 5),
            job("b", 10, 9),
            job("d", -3, 1),
            job("a", 0, 2),
            job("e", i32::MAX, 100),
            job("f", i32::MIN, 0),
            job("a2", 0, 2),
        ];
        jobs.sort_by(job_order);
        let ids: Vec<_> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["e", "b", "a", "a2", "c", "d", "f"]);
        assert_eq!(queue_ahead(&jobs[3], &jobs), 3);
    }

    proptest! {
        /// The packed sort key orders as (tenant, rank) and unpacks to them.
        #[test]
        fn the_packed_key_orders_as_tenant_then_rank(
            a in (any::<u32>(), any::<i32>(), 0i64..i64::MAX),
            b in (any::<u32>(), any::<i32>(), 0i64..i64::MAX),
        ) {
            let (ra, rb) = (Rank::new(a.1, a.2), Rank::new(b.1, b.2));
            prop_assert_eq!(pack(a.0, ra).cmp(&pack(b.0, rb)), (a.0, ra).cmp(&(b.0, rb)));
            prop_assert_eq!(unpack(pack(a.0, ra)), (a.0, ra));
        }

        /// The stored sort key and the comparator are one order.
        #[test]
        fn the_sort_key_orders_as_the_comparator(
            a in (any::<i32>(), -5i64..1_000_000_000_000_000, "[a-z0-9-]{1,12}"),
            b in (any::<i32>(), -5i64..1_000_000_000_000_000, "[a-z0-9-]{1,12}"),
        ) {
            let (ja, jb) = (job(&a.2, a.0, a.1), job(&b.2, b.0, b.1));
            let by_key = active_sort_key(a.0, a.1, &a.2).cmp(&active_sort_key(b.0, b.1, &b.2));
            prop_assert_eq!(by_key, job_order(&ja, &jb));
        }
    }
}
