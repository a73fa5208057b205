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

/// Free resources of one schedulable node.
#[derive(Debug, Clone, Copy)]
struct Free {
    gpus: u32,
    cpus: f64,
    memory_gb: f64,
}

/// Schedulable nodes by index (the snapshot's name order), grouped by series so a pool scans only
/// the nodes it may use.
struct Nodes<'c> {
    names: Vec<&'c str>,
    by_series: BTreeMap<&'c str, Vec<usize>>,
    all: Vec<usize>,
}

const EPS: f64 = 1e-9;

fn index(capacity: &CapacitySnapshot) -> (Nodes<'_>, Vec<Free>, Vec<Free>) {
    let mut nodes = Nodes {
        names: Vec::new(),
        by_series: BTreeMap::new(),
        all: Vec::new(),
    };
    let (mut free, mut idle) = (Vec::new(), Vec::new());
    for n in capacity.nodes.iter().filter(|n| n.schedulable()) {
        let i = nodes.names.len();
        nodes.names.push(n.name.as_str());
        nodes.all.push(i);
        if let Some(s) = &n.series {
            nodes.by_series.entry(s.as_str()).or_default().push(i);
        }
        free.push(Free {
            gpus: n.free_gpus(),
            cpus: (n.cpus - n.cpus_used).max(0.0),
            memory_gb: (n.memory_gb - n.memory_gb_used).max(0.0),
        });
        idle.push(Free {
            gpus: n.gpus,
            cpus: n.cpus.max(0.0),
            memory_gb: n.memory_gb.max(0.0),
        });
    }
    (nodes, free, idle)
}

fn fits(f: &Free, (gpus, cpus, mem): (u32, f64, f64)) -> bool {
    f.gpus >= gpus && f.cpus + EPS >= cpus && f.memory_gb + EPS >= mem
}

/// Picks `count` distinct nodes (not in `taken`) for machines of this size, best fit first
/// (fewest free GPUs, then fewest free CPUs) to keep large blocks whole. `Err(available)` if too few.
/// CPU-only machines may use free CPU on any node; GPU machines only nodes of their series.
fn pick(
    nodes: &Nodes,
    free: &[Free],
    taken: &[usize],
    series: Option<&str>,
    shape: (u32, f64, f64),
    count: u32,
) -> Result<Vec<usize>, u32> {
    let scope: &[usize] = match series {
        Some(s) => nodes.by_series.get(s).map_or(&[], Vec::as_slice),
        None => &nodes.all,
    };
    let mut candidates: Vec<usize> = scope
        .iter()
        .copied()
        .filter(|i| !taken.contains(i) && fits(&free[*i], shape))
        .collect();
    let available = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
    if available < count {
        return Err(available);
    }
    let order = |a: &usize, b: &usize| {
        free[*a]
            .gpus
            .cmp(&free[*b].gpus)
            .then(free[*a].cpus.total_cmp(&free[*b].cpus))
            .then(a.cmp(b))
    };
    if count == 0 {
        return Ok(Vec::new());
    }
    candidates.select_nth_unstable_by(count as usize - 1, order);
    candidates.truncate(count as usize);
    candidates.sort_by(order);
    Ok(candidates)
}

fn size(pool: &Pool) -> (u32, f64, f64) {
    (pool.gpus_per_node, pool.cpus, pool.memory_gb)
}

/// Why a pool did not fit: the pool and how many suitable nodes were found.
struct Misfit<'a> {
    pool: &'a Pool,
    available: u32,
}

/// Places every pool of `pools` on distinct nodes, taking their resources from `free` on success
/// and leaving `free` untouched on failure (changes are undone).
fn place<'a>(
    nodes: &Nodes,
    free: &mut [Free],
    pools: &'a [Pool],
) -> Result<Vec<PoolPlacement>, Misfit<'a>> {
    // Largest machines first: they have the fewest candidate nodes.
    let mut order: Vec<usize> = (0..pools.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(pools[*i].gpus_per_node));
    let mut taken: Vec<usize> = Vec::new();
    let mut undo: Vec<(usize, Free)> = Vec::new();
    let mut placed: Vec<Vec<usize>> = vec![Vec::new(); pools.len()];
    for i in order {
        let pool = &pools[i];
        let shape = size(pool);
        match pick(
            nodes,
            free,
            &taken,
            pool.series.as_deref(),
            shape,
            pool.nodes,
        ) {
            Ok(chosen) => {
                for n in &chosen {
                    undo.push((*n, free[*n]));
                    let f = &mut free[*n];
                    f.gpus = f.gpus.saturating_sub(shape.0);
                    f.cpus = (f.cpus - shape.1).max(0.0);
                    f.memory_gb = (f.memory_gb - shape.2).max(0.0);
                }
                taken.extend_from_slice(&chosen);
                placed[i] = chosen;
            }
            Err(available) => {
                for (n, before) in undo.into_iter().rev() {
                    free[n] = before;
                }
                return Err(Misfit { pool, available });
            }
        }
    }
    Ok(pools
        .iter()
        .zip(placed)
        .map(|(p, chosen)| PoolPlacement {
            pool: p.name.clone(),
            nodes: chosen.iter().map(|i| nodes.names[*i].to_owned()).collect(),
        })
        .collect())
}

/// Places `pools` on a copy of the idle fleet: `Some` if the job could never fit it.
fn never_fits<'a>(nodes: &Nodes, idle: &[Free], pools: &'a [Pool]) -> Option<Misfit<'a>> {
    if surely_fits(nodes, idle, pools) {
        return None;
    }
    place(nodes, &mut idle.to_vec(), pools).err()
}

/// A cheap sufficient test that [`place`] succeeds on the idle fleet: within each series, at least
/// as many idle nodes fit the largest shape of the series' pools as those pools have machines.
/// Then every pool finds its machines among those nodes whatever the pools before it took, so the
/// full placement (a copy of the fleet and a sort per pool) is skipped for almost every job. The
/// scan stops as soon as enough nodes are found, so it costs about one step per machine.
fn surely_fits(nodes: &Nodes, idle: &[Free], pools: &[Pool]) -> bool {
    // CPU-only machines may use any node, so they share nodes with the GPU pools: no shortcut.
    if pools.len() > 1 && pools.iter().any(|p| p.series.is_none()) {
        return false;
    }
    pools.iter().enumerate().all(|(k, p)| {
        if pools[..k].iter().any(|q| q.series == p.series) {
            return true; // this series was checked with its first pool
        }
        let (mut envelope, mut machines) = ((0, 0.0_f64, 0.0_f64), 0_usize);
        for q in pools[k..].iter().filter(|q| q.series == p.series) {
            envelope = (
                envelope.0.max(q.gpus_per_node),
                envelope.1.max(q.cpus),
                envelope.2.max(q.memory_gb),
            );
            machines = machines.saturating_add(q.nodes as usize);
        }
        let scope: &[usize] = match p.series.as_deref() {
            Some(s) => nodes.by_series.get(s).map_or(&[], Vec::as_slice),
            None => &nodes.all,
        };
        scope
            .iter()
            .filter(|i| fits(&idle[**i], envelope))
            .take(machines)
            .count()
            >= machines
    })
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
    let (nodes, mut free, idle) = index(capacity);
    for r in reservations {
        let shape = (r.gpus, r.cpus, r.memory_gb);
        // Reserve what can be reserved; machines that fit nowhere hold nothing.
        for _ in 0..r.machines {
            let Ok(chosen) = pick(&nodes, &free, &[], r.series.as_deref(), shape, 1) else {
                break;
            };
            for n in chosen {
                let f = &mut free[n];
                f.gpus = f.gpus.saturating_sub(shape.0);
                f.cpus = (f.cpus - shape.1).max(0.0);
                f.memory_gb = (f.memory_gb - shape.2).max(0.0);
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
        if let Some(m) = never_fits(&nodes, &idle, &job.spec.pools) {
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
        match place(&nodes, &mut free, &job.spec.pools) {
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
