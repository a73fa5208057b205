//! What a waiting job is told: the texts of pending reasons, built from what the planner found.

use std::fmt::Write as _;

use crate::claimant::Claimant;
use crate::job::PendingReason;
use crate::quantity::plain;
use crate::quota::Over;
use crate::spec::Pool;

use super::planner::{CPU_SCOPE, Misfit, Planner, Shape};

/// What a pool needs per machine, for messages.
pub(super) fn describe(pool: &Pool) -> String {
    match &pool.series {
        Some(s) => format!("{} free {s} GPUs", pool.gpus_per_node),
        None => format!(
            "{} free CPUs and {} GiB memory",
            plain(pool.cpus),
            plain(pool.memory_gb)
        ),
    }
}

/// What the reason of a CPU-only job larger than every CPU node says.
pub(super) const SPILL: &str =
    "no CPU node is that large, so it waits for spare CPU on GPU nodes, where GPU jobs go first";

/// The reason and message of a job that is short of resources (not of reserved nodes).
pub(super) fn shortage(planner: &mut Planner, m: &Misfit) -> (PendingReason, String) {
    let p = m.pool;
    let scope = planner.scope_of(p).unwrap_or(CPU_SCOPE);
    let c = m.counts;
    // (reason, resource index for the holders, where the resource is short, message)
    let (reason, resource, short, mut message) = match &p.series {
        Some(s) if c.gpus < p.nodes => (
            PendingReason::InsufficientGpu,
            0,
            format!("{s} GPUs"),
            format!(
                "pool {}: needs {} node(s) with {}, {} available",
                p.name,
                p.nodes,
                describe(p),
                c.gpus
            ),
        ),
        Some(s) if c.gpus_cpus < p.nodes => (
            PendingReason::InsufficientCpu,
            1,
            format!("CPUs on {s} nodes"),
            format!(
                "pool {}: needs {} {s} node(s) with {} free GPUs and {} free CPUs; {} have the GPUs, {} also the CPUs",
                p.name,
                p.nodes,
                p.gpus_per_node,
                plain(p.cpus),
                c.gpus,
                c.gpus_cpus
            ),
        ),
        Some(s) => (
            PendingReason::InsufficientMemory,
            2,
            format!("memory on {s} nodes"),
            format!(
                "pool {}: needs {} {s} node(s) with {} free GPUs, {} CPUs and {} GiB memory; {} have the GPUs and CPUs, {} also the memory",
                p.name,
                p.nodes,
                p.gpus_per_node,
                plain(p.cpus),
                plain(p.memory_gb),
                c.gpus_cpus,
                c.all
            ),
        ),
        None => {
            let (reason, resource, short) = if c.gpus_cpus < p.nodes {
                (PendingReason::InsufficientCpu, 1, "CPUs")
            } else {
                (PendingReason::InsufficientMemory, 2, "memory")
            };
            let needs = format!(
                "pool {}: needs {} node(s) with {}",
                p.name,
                p.nodes,
                describe(p)
            );
            let (cpus, gib) = (plain(planner.share.cpus), plain(planner.share.memory_gb));
            let message = if planner.fits_cpu_node(&Shape::of(p)) {
                format!(
                    "{needs}, {} available (GPU nodes keep {cpus} CPUs and {gib} GiB per free GPU for GPU jobs)",
                    c.all
                )
            } else {
                format!(
                    "{needs}; {SPILL}; {} GPU node(s) have it free now beyond the {cpus} CPUs and {gib} GiB each free GPU keeps",
                    c.all
                )
            };
            (reason, resource, short.to_owned(), message)
        }
    };
    let holders = planner.holders(scope, resource);
    if !holders.is_empty() {
        let _ = write!(message, "; {short} held by {holders}");
    }
    (reason, message)
}

/// Cached waiting messages for a long queue (many jobs wait for the same reason).
pub(super) type ShortKey<'q> = (
    &'q str,
    Option<&'q str>,
    u32,
    u32,
    u64,
    u64,
    (u32, u32, u32),
);

/// A job that could not fit even the idle fleet.
pub(super) fn never_fits(m: &Misfit) -> String {
    format!(
        "pool {}: needs {} node(s) with {}, the fleet has {} schedulable",
        m.pool.name,
        m.pool.nodes,
        describe(m.pool),
        m.counts.all
    )
}

/// A job that would fit but only on nodes held for `who` (an earlier job, or "earlier jobs");
/// `spill`: a CPU-only job larger than every CPU node.
pub(super) fn behind(who: &str, spill: bool) -> String {
    if spill {
        format!("{SPILL}: the GPU nodes it would fit are held for {who} until they drain")
    } else {
        format!(
            "waiting behind {who} (served first by priority, submission order or fair share), which holds the nodes this job would use until they drain"
        )
    }
}

/// A job of `tenant` held by its quota; `borrowing`: above a borrowing limit, with no idle
/// capacity for it.
pub(super) fn quota(over: &Over, tenant: &str, kind: Claimant, wait: QuotaWait) -> String {
    let mut text = over.message(tenant, kind);
    // Appended, not formatted again: a long queue has tens of thousands of these.
    text.push_str(match wait {
        QuotaWait::Limit => "",
        QuotaWait::Borrowing => {
            "; it may borrow only capacity that no other job waiting within its quota needs, and none is free now"
        }
        QuotaWait::NotPreemptible if kind == Claimant::Playground => {
            "; a playground is never preempted, so it never borrows above the quota: it starts when the tenant's own jobs leave room"
        }
        QuotaWait::NotPreemptible => {
            "; the job is not preemptible (preemptible: false), so it never borrows above the quota: it starts when the tenant's own jobs leave room"
        }
    });
    text
}

/// How a job waits for its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum QuotaWait {
    /// Above a limit that does not allow borrowing.
    Limit,
    /// Above a borrowing limit, and nothing is free to borrow.
    Borrowing,
    /// Above a borrowing limit, but the job may not borrow (a borrowed job may be preempted).
    NotPreemptible,
}
