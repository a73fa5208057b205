//! Admission planning: which queued jobs start now, on which nodes, and why the others wait.
//!
//! [`plan_admissions`] walks the queue in priority then FIFO order over the very capacity snapshot
//! the API shows. A job is admitted only when every pool fits at once (gang), each machine on its
//! own node of the pool's series with enough free GPUs, CPU and memory on that node — never on
//! aggregate counts, so 4+4+4+4 free GPUs cannot host one machine of 8. Machines of admitted jobs
//! whose pods are not bound yet ([`Reservation`]) are placed first, so they stay reserved.
//!
//! A job that does not fit blocks later jobs of the series it needs (no starvation of big jobs by
//! small ones), but never jobs of other series. A job that could not fit even an idle fleet (the
//! fleet shrank after it was accepted) waits with `NoMatchingNode` and blocks nobody.

use std::collections::{BTreeMap, BTreeSet};

use crate::capacity::CapacitySnapshot;
use crate::job::{JobRecord, JobState, PendingReason};
use crate::spec::Pool;

/// Machines of an admitted job that hold no node yet (their pods are not bound).
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// Job id, for messages.
    pub job_id: String,
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
}

/// Where one pool of an admitted job goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolPlacement {
    /// Pool name.
    pub pool: String,
    /// One distinct node per machine.
    pub nodes: Vec<String>,
}

/// A job to admit now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Job id.
    pub job_id: String,
    /// Placement of every pool (the planned nodes; Kubernetes still binds the pods).
    pub placements: Vec<PoolPlacement>,
}

/// A job that stays queued, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Job id.
    pub job_id: String,
    /// Machine-readable reason.
    pub reason: PendingReason,
    /// Message for people.
    pub message: String,
}

/// The outcome of one planning round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionPlan {
    /// Jobs to admit, in order.
    pub admit: Vec<Admission>,
    /// Jobs that wait, in queue order.
    pub waiting: Vec<Waiting>,
}

#[derive(Debug, Clone)]
struct Free {
    series: Option<String>,
    gpus: u32,
    cpus: f64,
    memory_gb: f64,
}

type FreeMap = BTreeMap<String, Free>;

const EPS: f64 = 1e-9;

fn free_map(capacity: &CapacitySnapshot, idle: bool) -> FreeMap {
    capacity
        .nodes
        .iter()
        .filter(|n| n.schedulable())
        .map(|n| {
            let (gpus, cpus, mem) = if idle {
                (n.gpus, n.cpus, n.memory_gb)
            } else {
                (
                    n.free_gpus(),
                    n.cpus - n.cpus_used,
                    n.memory_gb - n.memory_gb_used,
                )
            };
            let free = Free {
                series: n.series.clone(),
                gpus,
                cpus: cpus.max(0.0),
                memory_gb: mem.max(0.0),
            };
            (n.name.clone(), free)
        })
        .collect()
}

fn fits(f: &Free, series: Option<&str>, gpus: u32, cpus: f64, mem: f64) -> bool {
    // CPU-only machines may use free CPU on any node; GPU machines only their series.
    let series_ok = series.is_none() || f.series.as_deref() == series;
    series_ok && f.gpus >= gpus && f.cpus + EPS >= cpus && f.memory_gb + EPS >= mem
}

/// Picks `count` distinct nodes (not in `taken`) for machines of this size, best fit first
/// (fewest free GPUs, then fewest free CPUs) to keep large blocks whole. `Err(available)` if too few.
fn pick(
    free: &FreeMap,
    taken: &BTreeSet<String>,
    series: Option<&str>,
    (gpus, cpus, mem): (u32, f64, f64),
    count: u32,
) -> Result<Vec<String>, u32> {
    let mut candidates: Vec<(&String, &Free)> = free
        .iter()
        .filter(|(name, f)| !taken.contains(*name) && fits(f, series, gpus, cpus, mem))
        .collect();
    candidates.sort_by(|a, b| {
        (a.1.gpus, a.0)
            .cmp(&(b.1.gpus, b.0))
            .then(a.1.cpus.total_cmp(&b.1.cpus))
    });
    let available = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
    if available < count {
        return Err(available);
    }
    Ok(candidates
        .into_iter()
        .take(count as usize)
        .map(|(n, _)| n.clone())
        .collect())
}

fn take(free: &mut FreeMap, node: &str, (gpus, cpus, mem): (u32, f64, f64)) {
    if let Some(f) = free.get_mut(node) {
        f.gpus = f.gpus.saturating_sub(gpus);
        f.cpus = (f.cpus - cpus).max(0.0);
        f.memory_gb = (f.memory_gb - mem).max(0.0);
    }
}

fn size(pool: &Pool) -> (u32, f64, f64) {
    (pool.gpus_per_node, pool.cpus, pool.memory_gb)
}

/// Why a pool did not fit: the pool and how many suitable nodes were found.
struct Misfit<'a> {
    pool: &'a Pool,
    available: u32,
}

/// Places every pool of `pools` on distinct nodes of `free`, applying the usage on success.
fn place<'a>(free: &mut FreeMap, pools: &'a [Pool]) -> Result<Vec<PoolPlacement>, Misfit<'a>> {
    // Largest machines first: they have the fewest candidate nodes.
    let mut order: Vec<&Pool> = pools.iter().collect();
    order.sort_by_key(|p| std::cmp::Reverse(p.gpus_per_node));
    let mut taken = BTreeSet::new();
    let mut trial = free.clone();
    let mut placed: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for pool in order {
        let nodes = pick(
            &trial,
            &taken,
            pool.series.as_deref(),
            size(pool),
            pool.nodes,
        )
        .map_err(|available| Misfit { pool, available })?;
        for n in &nodes {
            take(&mut trial, n, size(pool));
            taken.insert(n.clone());
        }
        placed.insert(pool.name.as_str(), nodes);
    }
    *free = trial;
    Ok(pools
        .iter()
        .map(|p| PoolPlacement {
            pool: p.name.clone(),
            nodes: placed.remove(p.name.as_str()).unwrap_or_default(),
        })
        .collect())
}

fn describe(pool: &Pool) -> String {
    match &pool.series {
        Some(s) => format!("{} free {s} GPUs", pool.gpus_per_node),
        None => format!("{} free CPUs and {} GiB memory", pool.cpus, pool.memory_gb),
    }
}

/// The scheduling domains a job competes in: one per GPU series, `cpu` for CPU-only machines.
fn domains(job: &JobRecord) -> BTreeSet<String> {
    job.spec
        .pools
        .iter()
        .map(|p| p.series.clone().unwrap_or_else(|| "cpu".to_owned()))
        .collect()
}

/// Plans which `queue` jobs (only `QUEUED` ones count) to admit against `capacity`, after placing
/// `reservations`. Jobs are taken by priority (high first), then submission time, then id.
pub fn plan_admissions(
    queue: &[JobRecord],
    capacity: &CapacitySnapshot,
    reservations: &[Reservation],
) -> AdmissionPlan {
    let mut free = free_map(capacity, false);
    let idle = free_map(capacity, true);
    for r in reservations {
        let shape = (r.gpus, r.cpus, r.memory_gb);
        // Reserve what can be reserved; machines that fit nowhere hold nothing.
        for _ in 0..r.machines {
            match pick(&free, &BTreeSet::new(), r.series.as_deref(), shape, 1) {
                Ok(nodes) => nodes.iter().for_each(|n| take(&mut free, n, shape)),
                Err(_) => break,
            }
        }
    }
    let mut jobs: Vec<&JobRecord> = queue
        .iter()
        .filter(|j| j.state == JobState::Queued && !j.stop_requested)
        .collect();
    jobs.sort_by(|a, b| {
        (std::cmp::Reverse(a.spec.priority), a.submitted_at_ms, &a.id).cmp(&(
            std::cmp::Reverse(b.spec.priority),
            b.submitted_at_ms,
            &b.id,
        ))
    });
    let mut blocked: BTreeMap<String, String> = BTreeMap::new();
    let mut plan = AdmissionPlan::default();
    for job in jobs {
        let wait = |reason, message: String| Waiting {
            job_id: job.id.clone(),
            reason,
            message,
        };
        if let Err(m) = place(&mut idle.clone(), &job.spec.pools) {
            let message = format!(
                "pool {}: needs {} node(s) with {}, the fleet has {} schedulable",
                m.pool.name,
                m.pool.nodes,
                describe(m.pool),
                m.available
            );
            plan.waiting
                .push(wait(PendingReason::NoMatchingNode, message));
            continue;
        }
        let doms = domains(job);
        if let Some(blocker) = doms.iter().find_map(|d| blocked.get(d)) {
            let message = format!("waiting behind job {blocker} (higher priority or earlier)");
            plan.waiting
                .push(wait(PendingReason::QueuedBehindOthers, message));
            continue;
        }
        match place(&mut free, &job.spec.pools) {
            Ok(placements) => plan.admit.push(Admission {
                job_id: job.id.clone(),
                placements,
            }),
            Err(m) => {
                let reason = if m.pool.series.is_some() {
                    PendingReason::InsufficientGpu
                } else {
                    PendingReason::InsufficientCpu
                };
                let message = format!(
                    "pool {}: needs {} node(s) with {}, {} available",
                    m.pool.name,
                    m.pool.nodes,
                    describe(m.pool),
                    m.available
                );
                plan.waiting.push(wait(reason, message));
                for d in doms {
                    blocked.entry(d).or_insert_with(|| job.id.clone());
                }
            }
        }
    }
    plan
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
