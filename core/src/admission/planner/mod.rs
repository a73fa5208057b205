//! The planner: free resources per node over one pass, placing machines on distinct nodes,
//! reserving the nodes a waiting job would use, and remembering failures so a long queue is
//! answered without scanning nodes again.
//!
//! - this module: the planner's state (free resources per node, scopes, reservations);
//! - [`accounting`]: taking and giving back node resources, reserving nodes, what admitted jobs
//!   hold;
//! - [`memo`]: failures remembered per scope, so a long queue is answered without scanning again;
//! - [`search`]: the placement search (scans, best fit, reservations for waiting jobs);
//! - [`holders`]: the "held by" text of a misfit's message.

mod accounting;
mod holders;
mod memo;
mod search;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::collections::BTreeSet;

use crate::capacity::{CapacitySnapshot, GpuShare};
use crate::spec::Pool;

pub(super) use accounting::hold_reservations;
use memo::Failure;
pub(super) use search::Misfit;

/// Free resources of one schedulable node.
#[derive(Debug, Clone, Copy)]
pub(super) struct Free {
    pub(super) gpus: u32,
    pub(super) cpus: f64,
    pub(super) memory_gb: f64,
}

/// A machine: GPUs, CPUs, memory; `gpu` false for CPU-only machines (which see GPU nodes through
/// the [`GpuShare`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) gpus: u32,
    pub(super) cpus: f64,
    pub(super) memory_gb: f64,
    pub(super) cpu_only: bool,
}

impl Shape {
    pub(super) fn of(pool: &Pool) -> Shape {
        Shape {
            gpus: pool.gpus_per_node,
            cpus: pool.cpus,
            memory_gb: pool.memory_gb,
            cpu_only: pool.series.is_none(),
        }
    }

    /// `self` needs at least as much as `other` of everything.
    fn covers(&self, other: &Shape) -> bool {
        self.cpu_only == other.cpu_only
            && self.gpus >= other.gpus
            && self.cpus + EPS >= other.cpus
            && self.memory_gb + EPS >= other.memory_gb
    }
}

const EPS: f64 = 1e-9;

/// Which nodes a placement may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    /// Nodes nobody reserved in this pass.
    Open,
    /// Every schedulable node (to tell "short" from "reserved for another job").
    All,
}

/// How many nodes of a scope passed each test, for the reason of a misfit.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counts {
    pub(super) gpus: u32,
    pub(super) gpus_cpus: u32,
    pub(super) all: u32,
}

/// A scope: the nodes one pool may use (a series, or every node for CPU-only pools).
pub(super) struct Scope {
    /// Node indexes, in the order CPU-only machines prefer them (CPU nodes first) for the CPU
    /// scope, by name otherwise.
    nodes: Vec<usize>,
    /// Per free-GPU count, how many open / all nodes of the scope have exactly that many.
    open_hist: Vec<u32>,
    all_hist: Vec<u32>,
    /// Series scopes: the nodes with exactly `g` free GPUs, per `g`, so that a scan for machines
    /// of `g` GPUs visits only nodes that have them (a nearly full series is not walked node by
    /// node for every waiting job). Order within a bucket is the order nodes entered it. (The
    /// CPU scope's GPU nodes are ordered in the planner's `cpu_open`.)
    by_free: Vec<Vec<usize>>,
    /// Series scopes: the nodes nobody reserved, per free-GPU count as in `by_free`: what
    /// best-fit scans of open nodes and reservations walk (by the end of a long queue most of a
    /// series is reserved, and walking past reserved nodes was most of those scans).
    open_by_free: Vec<Vec<usize>>,
    /// Nodes of the scope nobody reserved in this pass.
    open: u32,
    failed: [Vec<Failure>; 2],
    failed_reserve: Vec<(Shape, u32)>,
    /// Machines known to fit every schedulable node view (`shape`, machines, a reservation
    /// owner among the fitting nodes); cleared whenever resources of the scope are taken.
    fits_all: Vec<(Shape, u32, Option<usize>)>,
    /// Machines known to fit the idle fleet (it does not change within a pass).
    fits_idle: Vec<(Shape, u32)>,
    /// Lazily built "held by" texts per resource (0 GPUs, 1 CPUs, 2 memory).
    holders: [Option<String>; 3],
}

impl Scope {
    fn count_ge(hist: &[u32], gpus: u32) -> u32 {
        hist.iter().skip(gpus as usize).sum()
    }
}

/// The planner's state over one pass.
pub(super) struct Planner<'c> {
    capacity: &'c CapacitySnapshot,
    /// Index into `capacity.nodes` of each schedulable node.
    cap_index: Vec<usize>,
    /// Position of each node of a series in its scope's `by_free` bucket.
    slot: Vec<usize>,
    /// Position of each open node of a series in its scope's `open_by_free` bucket.
    open_slot: Vec<usize>,
    /// The GPU nodes nobody reserved, per free-GPU count, ordered by free CPUs (as
    /// [`search::total_order_bits`]) and index: what a best-fit pick for CPU-only machines ranks
    /// (CPU nodes first, then fewest free GPUs, then fewest CPUs left to them), so that it visits
    /// the few nodes that can rank first instead of the whole fleet.
    cpu_open: Vec<BTreeSet<(u64, usize)>>,
    /// How many nodes without GPUs lead the CPU scope's `nodes`.
    cpu_nodes: usize,
    pub(super) names: Vec<&'c str>,
    gpu_node: Vec<bool>,
    series_scope: Vec<Option<usize>>,
    free: Vec<Free>,
    idle: Vec<Free>,
    /// Owner (index into `owners`) of a node reserved in this pass.
    reserved: Vec<Option<usize>>,
    pub(super) owners: Vec<String>,
    pub(super) share: GpuShare,
    /// Scope 0 is the CPU scope (every node); the rest are series.
    pub(super) scopes: Vec<Scope>,
    /// Scope of each series (a handful: a linear search beats hashing).
    by_series: Vec<(&'c str, usize)>,
    /// Nodes taken by the pools of the job being placed: `marks[i] == epoch` (a new epoch clears
    /// them all at once, so no per-node list is searched).
    marks: Vec<Cell<u32>>,
    epoch: Cell<u32>,
    /// Scope of each pool of the job being planned (resolved once per job).
    pub(super) cur: Vec<Option<usize>>,
    /// Address of the pools `cur` was resolved for (asking again for the same job is free).
    cur_for: usize,
    /// The idle sizes (CPUs, memory) of schedulable CPU nodes that no other one beats in both:
    /// whether a CPU-only machine fits some CPU node at all.
    cpu_node_sizes: Vec<(f64, f64)>,
    /// What jobs admitted in this pass (and admitted jobs not bound yet) hold: node, job, shape.
    /// The snapshot's own holders come from pods, which these do not have yet.
    pass_holders: Vec<(usize, String, Shape)>,
}

pub(super) const CPU_SCOPE: usize = 0;

impl<'c> Planner<'c> {
    pub(super) fn new(capacity: &'c CapacitySnapshot) -> Self {
        let share = capacity.gpu_share;
        let mut p = Planner {
            capacity,
            cap_index: Vec::new(),
            slot: Vec::new(),
            open_slot: Vec::new(),
            cpu_open: Vec::new(),
            cpu_nodes: 0,
            names: Vec::new(),
            gpu_node: Vec::new(),
            series_scope: Vec::new(),
            free: Vec::new(),
            idle: Vec::new(),
            reserved: Vec::new(),
            owners: Vec::new(),
            share,
            scopes: Vec::new(),
            by_series: Vec::new(),
            marks: Vec::new(),
            epoch: Cell::new(0),
            cur: Vec::new(),
            cur_for: 0,
            cpu_node_sizes: Vec::new(),
            pass_holders: Vec::new(),
        };
        let max_gpus = capacity.nodes.iter().map(|n| n.gpus).max().unwrap_or(0) as usize;
        let scope = || Scope {
            nodes: Vec::new(),
            open_hist: vec![0; max_gpus + 1],
            all_hist: vec![0; max_gpus + 1],
            by_free: vec![Vec::new(); max_gpus + 1],
            open_by_free: vec![Vec::new(); max_gpus + 1],
            open: 0,
            failed: [Vec::new(), Vec::new()],
            failed_reserve: Vec::new(),
            fits_all: Vec::new(),
            fits_idle: Vec::new(),
            holders: [None, None, None],
        };
        p.scopes.push(scope());
        p.cpu_open = vec![BTreeSet::new(); max_gpus + 1];
        for (k, n) in capacity.nodes.iter().enumerate() {
            if !n.schedulable() {
                continue;
            }
            let i = p.names.len();
            p.cap_index.push(k);
            p.names.push(n.name.as_str());
            p.gpu_node.push(n.gpus > 0);
            let free = Free {
                gpus: n.free_gpus(),
                cpus: (n.cpus - n.cpus_used).max(0.0),
                memory_gb: (n.memory_gb - n.memory_gb_used).max(0.0),
            };
            p.free.push(free);
            p.idle.push(Free {
                gpus: n.gpus,
                cpus: n.cpus.max(0.0),
                memory_gb: n.memory_gb.max(0.0),
            });
            p.reserved.push(None);
            p.marks.push(Cell::new(0));
            let s = n.series.as_deref().map(|name| {
                match p.by_series.iter().find(|(s, _)| *s == name) {
                    Some((_, k)) => *k,
                    None => {
                        p.scopes.push(scope());
                        p.by_series.push((name, p.scopes.len() - 1));
                        p.scopes.len() - 1
                    }
                }
            });
            p.series_scope.push(s);
            if n.gpus == 0 {
                let size = (n.cpus.max(0.0), n.memory_gb.max(0.0));
                let beats = |a: &(f64, f64), b: &(f64, f64)| a.0 >= b.0 && a.1 >= b.1;
                if !p.cpu_node_sizes.iter().any(|o| beats(o, &size)) {
                    p.cpu_node_sizes.retain(|o| !beats(&size, o));
                    p.cpu_node_sizes.push(size);
                }
            }
            p.scopes[CPU_SCOPE].nodes.push(i);
            p.scopes[CPU_SCOPE].open += 1;
            p.slot.push(0);
            p.open_slot.push(0);
            if n.gpus > 0 {
                p.cpu_open[free.gpus as usize].insert((search::total_order_bits(free.cpus), i));
            } else {
                p.cpu_nodes += 1;
            }
            if let Some(s) = s {
                let bucket = &mut p.scopes[s].by_free[free.gpus as usize];
                p.slot[i] = bucket.len();
                bucket.push(i);
                let open = &mut p.scopes[s].open_by_free[free.gpus as usize];
                p.open_slot[i] = open.len();
                open.push(i);
                p.scopes[s].nodes.push(i);
                p.scopes[s].open += 1;
                let g = free.gpus as usize;
                p.scopes[s].open_hist[g] += 1;
                p.scopes[s].all_hist[g] += 1;
            }
        }
        // CPU-only machines prefer CPU nodes; the sort is stable, so names order the rest.
        let gpu_node = &p.gpu_node;
        p.scopes[CPU_SCOPE].nodes.sort_by_key(|&i| gpu_node[i]);
        p
    }

    /// Starts a new placement question: no node is taken.
    fn begin(&self) {
        self.epoch.set(self.epoch.get().wrapping_add(1));
        if self.epoch.get() == 0 {
            // Wrapped: clear the stale marks once.
            self.marks.iter().for_each(|m| m.set(u32::MAX));
            self.epoch.set(1);
        }
    }

    fn mark(&self, i: usize) {
        self.marks[i].set(self.epoch.get());
    }

    fn marked(&self, i: usize) -> bool {
        self.marks[i].get() == self.epoch.get()
    }

    pub(super) fn scope_of(&self, pool: &Pool) -> Option<usize> {
        match pool.series.as_deref() {
            None => Some(CPU_SCOPE),
            Some(s) => self.series(s),
        }
    }

    /// Resolves the scopes of a job's pools, for every question about that job that follows.
    pub(super) fn set_job(&mut self, pools: &[Pool]) {
        let at = pools.as_ptr() as usize;
        if at == self.cur_for && self.cur.len() == pools.len() {
            return;
        }
        self.cur_for = at;
        self.cur.clear();
        for p in pools {
            let scope = self.scope_of(p);
            self.cur.push(scope);
        }
    }

    pub(super) fn series(&self, name: &str) -> Option<usize> {
        self.by_series
            .iter()
            .find(|(s, _)| *s == name)
            .map(|(_, k)| *k)
    }
}
