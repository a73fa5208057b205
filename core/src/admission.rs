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

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::capacity::{CapacitySnapshot, GpuShare};
use crate::job::{JobRecord, JobState, PendingReason};
use crate::quota::{self, Demand, Over, OverKey, TenantQuota, Verdict};
use crate::spec::{JobSpec, Pool};

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
    /// The planned nodes these machines wait for (empty for jobs admitted before plans were
    /// recorded: then any fitting node is held).
    pub nodes: Vec<String>,
}

/// Where one pool of an admitted job goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPlacement {
    /// The pool of the job's spec (`pools[].name`) these nodes are for.
    pub pool: String,
    /// One distinct node per machine.
    pub nodes: Vec<String>,
}

/// A job to admit now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Job to admit (its record moves to ADMITTED with these placements).
    pub job_id: String,
    /// Placement of every pool: the workload is pinned to these nodes.
    pub placements: Vec<PoolPlacement>,
}

/// A job that stays queued, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<'q> {
    /// Job id (borrowed from the queue: a long queue's waiting jobs copy nothing).
    pub job_id: &'q str,
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

/// Free resources of one schedulable node.
#[derive(Debug, Clone, Copy)]
struct Free {
    gpus: u32,
    cpus: f64,
    memory_gb: f64,
}

/// A machine: GPUs, CPUs, memory; `gpu` false for CPU-only machines (which see GPU nodes through
/// the [`GpuShare`]).
#[derive(Debug, Clone, Copy)]
struct Shape {
    gpus: u32,
    cpus: f64,
    memory_gb: f64,
    cpu_only: bool,
}

impl Shape {
    fn of(pool: &Pool) -> Shape {
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
enum View {
    /// Nodes nobody reserved in this pass.
    Open,
    /// Every schedulable node (to tell "short" from "reserved for another job").
    All,
}

/// How many nodes of a scope passed each test, for the reason of a misfit.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    gpus: u32,
    gpus_cpus: u32,
    all: u32,
}

/// A remembered failure: placing `shape` × `machines` failed in this scope and view, so every
/// shape that covers it with at least as many machines fails too.
#[derive(Debug, Clone, Copy)]
struct Failure {
    shape: Shape,
    machines: u32,
    counts: Counts,
}

/// Failures remembered per scope and view; bounded, so a queue of endless distinct shapes costs
/// a scan per job rather than a growing list.
const MAX_FAILURES: usize = 48;

/// A scope: the nodes one pool may use (a series, or every node for CPU-only pools).
struct Scope {
    /// Node indexes, in the order CPU-only machines prefer them (CPU nodes first) for the CPU
    /// scope, by name otherwise.
    nodes: Vec<usize>,
    /// Per free-GPU count, how many open / all nodes of the scope have exactly that many.
    open_hist: Vec<u32>,
    all_hist: Vec<u32>,
    /// Series scopes: the nodes with exactly `g` free GPUs, per `g`, so that a scan for machines
    /// of `g` GPUs visits only nodes that have them (a nearly full series is not walked node by
    /// node for every waiting job). Order within a bucket is the order nodes entered it.
    by_free: Vec<Vec<usize>>,
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
struct Planner<'c> {
    capacity: &'c CapacitySnapshot,
    /// Index into `capacity.nodes` of each schedulable node.
    cap_index: Vec<usize>,
    /// Position of each node of a series in its scope's `by_free` bucket.
    slot: Vec<usize>,
    names: Vec<&'c str>,
    gpu_node: Vec<bool>,
    series_scope: Vec<Option<usize>>,
    free: Vec<Free>,
    idle: Vec<Free>,
    /// Owner (index into `owners`) of a node reserved in this pass.
    reserved: Vec<Option<usize>>,
    owners: Vec<String>,
    share: GpuShare,
    /// Scope 0 is the CPU scope (every node); the rest are series.
    scopes: Vec<Scope>,
    /// Scope of each series (a handful: a linear search beats hashing).
    by_series: Vec<(&'c str, usize)>,
    /// Nodes taken by the pools of the job being placed: `marks[i] == epoch` (a new epoch clears
    /// them all at once, so no per-node list is searched).
    marks: Vec<Cell<u32>>,
    epoch: Cell<u32>,
    /// Scope of each pool of the job being planned (resolved once per job).
    cur: Vec<Option<usize>>,
    /// Address of the pools `cur` was resolved for (asking again for the same job is free).
    cur_for: usize,
    /// The idle sizes (CPUs, memory) of schedulable CPU nodes that no other one beats in both:
    /// whether a CPU-only machine fits some CPU node at all.
    cpu_node_sizes: Vec<(f64, f64)>,
    /// What jobs admitted in this pass (and admitted jobs not bound yet) hold: node, job, shape.
    /// The snapshot's own holders come from pods, which these do not have yet.
    pass_holders: Vec<(usize, String, Shape)>,
}

const CPU_SCOPE: usize = 0;

impl<'c> Planner<'c> {
    fn new(capacity: &'c CapacitySnapshot) -> Self {
        let share = capacity.gpu_share;
        let mut p = Planner {
            capacity,
            cap_index: Vec::new(),
            slot: Vec::new(),
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
            open: 0,
            failed: [Vec::new(), Vec::new()],
            failed_reserve: Vec::new(),
            fits_all: Vec::new(),
            fits_idle: Vec::new(),
            holders: [None, None, None],
        };
        p.scopes.push(scope());
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
            if let Some(s) = s {
                let bucket = &mut p.scopes[s].by_free[free.gpus as usize];
                p.slot[i] = bucket.len();
                bucket.push(i);
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

    fn scope_of(&self, pool: &Pool) -> Option<usize> {
        match pool.series.as_deref() {
            None => Some(CPU_SCOPE),
            Some(s) => self.series(s),
        }
    }

    /// Resolves the scopes of a job's pools, for every question about that job that follows.
    fn set_job(&mut self, pools: &[Pool]) {
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

    fn series(&self, name: &str) -> Option<usize> {
        self.by_series
            .iter()
            .find(|(s, _)| *s == name)
            .map(|(_, k)| *k)
    }

    /// What a machine of `shape` may use of `f` on node `i`.
    fn room(&self, i: usize, f: &Free, shape: &Shape) -> Free {
        if shape.cpu_only && self.gpu_node[i] {
            let (cpus, memory_gb) = self.share.cpu_job_room(f.gpus, f.cpus, f.memory_gb);
            Free {
                gpus: f.gpus,
                cpus,
                memory_gb,
            }
        } else {
            *f
        }
    }

    /// Whether a CPU-only machine of `shape` fits some idle CPU node; if not, it can only use
    /// spare CPU of GPU nodes.
    fn fits_cpu_node(&self, shape: &Shape) -> bool {
        self.cpu_node_sizes
            .iter()
            .any(|&(c, m)| c + EPS >= shape.cpus && m + EPS >= shape.memory_gb)
    }

    fn fits(&self, i: usize, f: &Free, shape: &Shape) -> bool {
        let r = self.room(i, f, shape);
        r.gpus >= shape.gpus && r.cpus + EPS >= shape.cpus && r.memory_gb + EPS >= shape.memory_gb
    }

    /// Takes `shape` from node `i`, keeping the histograms current.
    fn take(&mut self, i: usize, shape: &Shape) {
        self.scopes[CPU_SCOPE].fits_all.clear();
        if let Some(s) = self.series_scope[i] {
            self.scopes[s].fits_all.clear();
        }
        let before = self.free[i].gpus;
        let f = &mut self.free[i];
        f.gpus = f.gpus.saturating_sub(shape.gpus);
        f.cpus = (f.cpus - shape.cpus).max(0.0);
        f.memory_gb = (f.memory_gb - shape.memory_gb).max(0.0);
        let after = f.gpus;
        self.rehist(i, before, after);
    }

    fn restore(&mut self, i: usize, to: Free) {
        let before = self.free[i].gpus;
        self.free[i] = to;
        self.rehist(i, before, to.gpus);
    }

    fn rehist(&mut self, i: usize, before: u32, after: u32) {
        if before == after {
            return;
        }
        if let Some(s) = self.series_scope[i] {
            let open = self.reserved[i].is_none();
            let sc = &mut self.scopes[s];
            sc.all_hist[before as usize] -= 1;
            sc.all_hist[after as usize] += 1;
            if open {
                sc.open_hist[before as usize] -= 1;
                sc.open_hist[after as usize] += 1;
            }
            let from = &mut sc.by_free[before as usize];
            let at = self.slot[i];
            from.swap_remove(at);
            if let Some(&moved) = from.get(at) {
                self.slot[moved] = at;
            }
            let to = &mut sc.by_free[after as usize];
            self.slot[i] = to.len();
            to.push(i);
        }
    }

    fn reserve_node(&mut self, i: usize, owner: usize) {
        self.reserved[i] = Some(owner);
        self.scopes[CPU_SCOPE].open -= 1;
        if let Some(s) = self.series_scope[i] {
            self.scopes[s].open_hist[self.free[i].gpus as usize] -= 1;
            self.scopes[s].open -= 1;
        }
    }

    /// A remembered failure that `shape` × `machines` covers, if any.
    fn known_failure(
        &self,
        scope: usize,
        view: View,
        shape: &Shape,
        machines: u32,
    ) -> Option<Counts> {
        let sc = &self.scopes[scope];
        let hist = match view {
            View::Open => &sc.open_hist,
            View::All => &sc.all_hist,
        };
        if view == View::Open && sc.open < machines {
            return Some(Counts::default());
        }
        if !shape.cpu_only {
            let with_gpus = Scope::count_ge(hist, shape.gpus);
            if with_gpus < machines {
                // Exact: the histogram counts the nodes with enough free GPUs.
                return Some(Counts {
                    gpus: with_gpus,
                    gpus_cpus: with_gpus,
                    all: with_gpus,
                });
            }
        }
        sc.failed[view as usize]
            .iter()
            .find(|f| machines >= f.machines && shape.covers(&f.shape))
            .map(|f| f.counts)
    }

    fn remember(&mut self, scope: usize, view: View, shape: Shape, machines: u32, counts: Counts) {
        let list = &mut self.scopes[scope].failed[view as usize];
        list.retain(|f| !(f.machines >= machines && f.shape.covers(&shape)));
        if list.len() >= MAX_FAILURES {
            list.remove(0);
        }
        list.push(Failure {
            shape,
            machines,
            counts,
        });
    }

    /// Scans the nodes of `scope` this view may use (not reserved for the open view, not marked
    /// taken) for machines of `shape`, counting how many pass each test and pushing those that
    /// fit onto `fitting`; stops once `limit` fit. The one scan behind every placement question.
    fn scan(
        &self,
        scope: usize,
        shape: &Shape,
        view: View,
        limit: Option<u32>,
        fitting: &mut Vec<usize>,
    ) -> Counts {
        let mut counts = Counts::default();
        let sc = &self.scopes[scope];
        // Returns true once `limit` nodes fit.
        let mut visit = |i: usize| -> bool {
            if (view == View::Open && self.reserved[i].is_some()) || self.marked(i) {
                return false;
            }
            let r = self.room(i, &self.free[i], shape);
            if r.gpus < shape.gpus {
                return false;
            }
            counts.gpus += 1;
            if r.cpus + EPS < shape.cpus {
                return false;
            }
            counts.gpus_cpus += 1;
            if r.memory_gb + EPS < shape.memory_gb {
                return false;
            }
            counts.all += 1;
            fitting.push(i);
            limit.is_some_and(|l| counts.all >= l)
        };
        if scope == CPU_SCOPE {
            // Every node, CPU nodes first.
            for &i in &sc.nodes {
                if visit(i) {
                    break;
                }
            }
        } else {
            // A series only through the buckets of nodes with enough free GPUs: a nearly full
            // series is not walked node by node for every waiting job.
            let from = (shape.gpus as usize).min(sc.by_free.len());
            'buckets: for bucket in &sc.by_free[from..] {
                for &i in bucket {
                    if visit(i) {
                        break 'buckets;
                    }
                }
            }
        }
        counts
    }

    /// Picks `count` distinct nodes of `scope` (not marked taken) for machines of `shape`, best fit
    /// first (fewest free GPUs, then fewest free CPUs; CPU nodes before GPU nodes for CPU-only
    /// machines) to keep large blocks whole.
    fn pick(
        &self,
        scope: usize,
        shape: &Shape,
        count: u32,
        view: View,
    ) -> Result<Vec<usize>, Counts> {
        let mut candidates: Vec<usize> = Vec::new();
        let counts = self.scan(scope, shape, view, None, &mut candidates);
        if counts.all < count {
            return Err(counts);
        }
        if count == 0 {
            return Ok(Vec::new());
        }
        Ok(best_nodes(candidates, count as usize, |i| {
            let r = self.room(i, &self.free[i], shape);
            (shape.cpu_only && self.gpu_node[i], r.gpus, r.cpus)
        }))
    }

    /// Whether `pools` would fit if nobody had reserved anything in this pass, and if so the
    /// owner of a reservation in the way. Pools of one series are asked together as their
    /// largest machine times their machines (enough when it fits); answers are remembered per
    /// series until resources of it are taken, so a long queue of jobs that wait for reserved
    /// nodes costs no scans.
    fn fits_unreserved<'p>(&mut self, pools: &'p [Pool]) -> Result<Option<usize>, Misfit<'p>> {
        if pools.len() > 1 && pools.iter().any(|p| p.series.is_none()) {
            return self.exact_owner(pools);
        }
        const MAX_GROUPS: usize = 8;
        if pools.len() > MAX_GROUPS {
            return self.exact_owner(pools);
        }
        let mut owner: Option<usize> = None;
        // (scope, envelope, machines, pools) per scope, on the stack.
        let blank = (usize::MAX, Shape::of(&pools[0]), 0_u32, 0_usize);
        let mut groups_buf = [blank; MAX_GROUPS];
        let mut len = 0;
        for (k, pool) in pools.iter().enumerate() {
            let Some(scope) = self.cur[k] else {
                return Err(Misfit {
                    pool,
                    counts: Counts::default(),
                });
            };
            let shape = Shape::of(pool);
            match groups_buf[..len].iter_mut().find(|g| g.0 == scope) {
                Some(g) => {
                    g.1.gpus = g.1.gpus.max(shape.gpus);
                    g.1.cpus = g.1.cpus.max(shape.cpus);
                    g.1.memory_gb = g.1.memory_gb.max(shape.memory_gb);
                    g.2 = g.2.saturating_add(pool.nodes);
                    g.3 += 1;
                }
                None => {
                    groups_buf[len] = (scope, shape, pool.nodes, 1);
                    len += 1;
                }
            }
        }
        for &(scope, shape, machines, count) in &groups_buf[..len] {
            let known = self.scopes[scope]
                .fits_all
                .iter()
                .find(|(s, m, _)| *m >= machines && s.covers(&shape))
                .map(|(_, _, o)| *o);
            if let Some(o) = known {
                owner = owner.or(o);
                continue;
            }
            if count == 1 {
                let pool = (0..pools.len())
                    .find(|&k| self.cur[k] == Some(scope))
                    .map_or(&pools[0], |k| &pools[k]);
                if let Some(counts) = self.known_failure(scope, View::All, &shape, machines) {
                    return Err(Misfit { pool, counts });
                }
            }
            // Reservations do not matter here, earlier questions' marks must not either.
            self.begin();
            let mut fitting: Vec<usize> = Vec::new();
            let counts = self.scan(scope, &shape, View::All, Some(machines), &mut fitting);
            let found_owner = fitting.iter().find_map(|&i| self.reserved[i]);
            if counts.all >= machines {
                let list = &mut self.scopes[scope].fits_all;
                if list.len() >= MAX_FAILURES {
                    list.remove(0);
                }
                list.push((shape, machines, found_owner));
                owner = owner.or(found_owner);
                continue;
            }
            if count > 1 {
                // The envelope is only a sufficient test: ask the exact question.
                return self.exact_owner(pools);
            }
            let pool = (0..pools.len())
                .find(|&k| self.cur[k] == Some(scope))
                .map_or(&pools[0], |k| &pools[k]);
            self.remember(scope, View::All, shape, machines, counts);
            return Err(Misfit { pool, counts });
        }
        Ok(owner)
    }

    fn exact_owner<'p>(&mut self, pools: &'p [Pool]) -> Result<Option<usize>, Misfit<'p>> {
        let nodes = self.would_fit(pools, View::All)?;
        Ok(nodes.iter().find_map(|&i| self.reserved[i]))
    }

    /// Whether `pools` would fit on distinct nodes of this view, answered by first fit with an
    /// early stop (no sorting, nothing taken): the question behind "short" versus "reserved".
    fn would_fit<'p>(&mut self, pools: &'p [Pool], view: View) -> Result<Vec<usize>, Misfit<'p>> {
        self.begin();
        let mut taken: Vec<usize> = Vec::new();
        for (k, pool) in pools.iter().enumerate() {
            let shape = Shape::of(pool);
            let Some(scope) = self.cur[k] else {
                return Err(Misfit {
                    pool,
                    counts: Counts::default(),
                });
            };
            // A remembered failure holds whatever other pools took.
            if let Some(counts) = self.known_failure(scope, view, &shape, pool.nodes) {
                return Err(Misfit { pool, counts });
            }
            let start = taken.len();
            let counts = self.scan(scope, &shape, view, Some(pool.nodes), &mut taken);
            for &i in &taken[start..] {
                self.mark(i);
            }
            if counts.all < pool.nodes {
                if start == 0 {
                    self.remember(scope, view, shape, pool.nodes, counts);
                }
                return Err(Misfit { pool, counts });
            }
        }
        Ok(taken)
    }

    /// Places every pool of `pools` on distinct nodes, taking their resources on success and
    /// leaving everything untouched on failure.
    fn place<'p>(
        &mut self,
        pools: &'p [Pool],
        view: View,
        commit: bool,
    ) -> Result<Vec<Vec<usize>>, Misfit<'p>> {
        // Most waiting jobs of a long queue fail on a remembered failure: answer before
        // allocating anything.
        for (k, pool) in pools.iter().enumerate() {
            let Some(scope) = self.cur[k] else {
                return Err(Misfit {
                    pool,
                    counts: Counts::default(),
                });
            };
            if let Some(counts) = self.known_failure(scope, view, &Shape::of(pool), pool.nodes) {
                return Err(Misfit { pool, counts });
            }
        }
        self.begin();
        let mut taken_any = false;
        let mut undo: Vec<(usize, Free)> = Vec::new();
        let mut placed: Vec<Vec<usize>> = vec![Vec::new(); pools.len()];
        for (i, pool, shape) in largest_first(pools) {
            let outcome = match self.cur[i] {
                None => Err(Counts::default()),
                Some(scope) => {
                    // A remembered failure holds whatever other pools took; a new one is
                    // remembered only when none took anything.
                    match self.known_failure(scope, view, &shape, pool.nodes) {
                        Some(counts) => Err(counts),
                        None => {
                            let picked = self.pick(scope, &shape, pool.nodes, view);
                            if let (Err(counts), false) = (&picked, taken_any) {
                                self.remember(scope, view, shape, pool.nodes, *counts);
                            }
                            picked
                        }
                    }
                }
            };
            match outcome {
                Ok(chosen) => {
                    for &n in &chosen {
                        undo.push((n, self.free[n]));
                        self.take(n, &shape);
                        self.mark(n);
                    }
                    taken_any |= !chosen.is_empty();
                    placed[i] = chosen;
                }
                Err(counts) => {
                    for (n, before) in undo.into_iter().rev() {
                        self.restore(n, before);
                    }
                    return Err(Misfit { pool, counts });
                }
            }
        }
        if !commit {
            for (n, before) in undo.into_iter().rev() {
                self.restore(n, before);
            }
        }
        Ok(placed)
    }

    /// A cheap sufficient test that `pools` fit the idle fleet: within each series, at least as
    /// many idle nodes fit the largest machine of the series' pools as those pools have
    /// machines. Then every pool finds its machines among those nodes whatever the pools before
    /// it took. The scan stops once enough nodes are found (about one step per machine).
    fn surely_fits(&mut self, pools: &[Pool]) -> bool {
        // CPU-only machines may use any node, so they share nodes with the GPU pools: no shortcut.
        if pools.len() > 1 && pools.iter().any(|p| p.series.is_none()) {
            return false;
        }
        for (k, p) in pools.iter().enumerate() {
            if self.cur[..k].contains(&self.cur[k]) {
                continue; // this series was checked with its first pool
            }
            let mut envelope = Shape::of(p);
            let mut machines = 0_u32;
            for (_, q) in pools
                .iter()
                .enumerate()
                .skip(k)
                .filter(|(j, _)| self.cur[*j] == self.cur[k])
            {
                envelope.gpus = envelope.gpus.max(q.gpus_per_node);
                envelope.cpus = envelope.cpus.max(q.cpus);
                envelope.memory_gb = envelope.memory_gb.max(q.memory_gb);
                machines = machines.saturating_add(q.nodes);
            }
            let Some(scope) = self.cur[k] else {
                return false;
            };
            let sc = &self.scopes[scope];
            if sc
                .fits_idle
                .iter()
                .any(|(s, m)| *m >= machines && s.covers(&envelope))
            {
                continue;
            }
            let found = sc
                .nodes
                .iter()
                .filter(|&&i| self.fits(i, &self.idle[i], &envelope))
                .take(machines as usize)
                .count();
            if found < machines as usize {
                return false;
            }
            let list = &mut self.scopes[scope].fits_idle;
            if list.len() >= MAX_FAILURES {
                list.remove(0);
            }
            list.push((envelope, machines));
        }
        true
    }

    /// Would `pools` fit the idle fleet? `Some` with the misfit if never.
    fn never_fits<'p>(&mut self, pools: &'p [Pool]) -> Option<Misfit<'p>> {
        if self.surely_fits(pools) {
            return None;
        }
        self.begin();
        for (i, pool, shape) in largest_first(pools) {
            let Some(scope) = self.cur[i] else {
                return Some(Misfit {
                    pool,
                    counts: Counts::default(),
                });
            };
            // Idle nodes that fit, in scope order; any of them will do for the fit question, but
            // later pools of the same scope must not reuse them, so take the smallest fitting.
            let mut found = 0_u32;
            let mut fitting: Vec<usize> = Vec::new();
            for &n in &self.scopes[scope].nodes {
                if self.marked(n) || !self.fits(n, &self.idle[n], &shape) {
                    continue;
                }
                found += 1;
                fitting.push(n);
                if found >= pool.nodes && pools.len() == 1 {
                    break;
                }
            }
            if found < pool.nodes {
                return Some(Misfit {
                    pool,
                    counts: Counts {
                        gpus: found,
                        gpus_cpus: found,
                        all: found,
                    },
                });
            }
            if pools.len() > 1 {
                let idle = &self.idle;
                fitting.sort_by(|a, b| {
                    idle[*a]
                        .gpus
                        .cmp(&idle[*b].gpus)
                        .then(idle[*a].cpus.total_cmp(&idle[*b].cpus))
                        .then(a.cmp(b))
                });
                fitting
                    .into_iter()
                    .take(pool.nodes as usize)
                    .for_each(|n| self.mark(n));
            }
        }
        None
    }

    /// Reserves for `owner` the nodes `pools` would use once they drain: per pool, open nodes
    /// whose idle size fits, closest to fitting now first. All or nothing. A CPU-only machine
    /// reserves CPU nodes only: a reservation on a GPU node would keep its free GPUs from the GPU
    /// jobs behind it while the CPU job waits for CPU that GPU jobs go first for.
    fn reserve(&mut self, pools: &[Pool], owner: usize) -> bool {
        if pools
            .iter()
            .any(|p| p.series.is_none() && !self.fits_cpu_node(&Shape::of(p)))
        {
            return false;
        }
        self.begin();
        let mut chosen_all: Vec<usize> = Vec::new();
        for (i, pool, shape) in largest_first(pools) {
            let Some(scope) = self.cur[i] else {
                return false;
            };
            let first = chosen_all.is_empty();
            if self.scopes[scope].open < pool.nodes {
                return false;
            }
            if first
                && self.scopes[scope]
                    .failed_reserve
                    .iter()
                    .any(|(s, m)| pool.nodes >= *m && shape.covers(s))
            {
                return false;
            }
            let candidates: Vec<usize> = self.scopes[scope]
                .nodes
                .iter()
                .copied()
                .filter(|&n| {
                    self.reserved[n].is_none()
                        && !(shape.cpu_only && self.gpu_node[n])
                        && !self.marked(n)
                        && self.fits(n, &self.idle[n], &shape)
                })
                .collect();
            if (candidates.len() as u64) < u64::from(pool.nodes) {
                if first {
                    let list = &mut self.scopes[scope].failed_reserve;
                    if list.len() >= MAX_FAILURES {
                        list.remove(0);
                    }
                    list.push((shape, pool.nodes));
                }
                return false;
            }
            // Closest to fitting now: most free GPUs, then CPUs (as the machine sees them; negated
            // CPUs sort in reverse).
            let closest = best_nodes(candidates, pool.nodes as usize, |n| {
                let r = self.room(n, &self.free[n], &shape);
                (false, std::cmp::Reverse(r.gpus), -r.cpus)
            });
            for n in closest {
                self.mark(n);
                chosen_all.push(n);
            }
        }
        for n in chosen_all {
            self.reserve_node(n, owner);
        }
        true
    }

    /// "held by j-a (16 GPUs), j-b (8 GPUs)" for the nodes of `scope`, by `resource`
    /// (0 GPUs, 1 CPUs, 2 memory); empty when nobody holds any.
    /// Records that `job` holds `shape` on node `i` (admitted in this pass, or admitted and not
    /// bound yet), for the "held by" of later messages. A scope's text is built once per pass,
    /// when a message first needs it (rebuilding it after every admission cost a third of a long
    /// pass); jobs admitted after that are named from the next pass on.
    fn hold(&mut self, i: usize, job: &str, shape: Shape) {
        self.pass_holders.push((i, job.to_owned(), shape));
    }

    fn holders(&mut self, scope: usize, resource: usize) -> String {
        if let Some(text) = &self.scopes[scope].holders[resource] {
            return text.clone();
        }
        let mut per_job: BTreeMap<&str, f64> = BTreeMap::new();
        for (i, job, shape) in &self.pass_holders {
            if scope != CPU_SCOPE && self.series_scope[*i] != Some(scope) {
                continue;
            }
            let amount = match resource {
                0 => f64::from(shape.gpus),
                1 => shape.cpus,
                _ => shape.memory_gb,
            };
            if amount > 0.0 {
                *per_job.entry(job.as_str()).or_insert(0.0) += amount;
            }
        }
        for &i in &self.scopes[scope].nodes {
            for h in &self.capacity.nodes[self.cap_index[i]].holders {
                let amount = match resource {
                    0 => f64::from(h.gpus),
                    1 => h.cpus,
                    _ => h.memory_gb,
                };
                if amount > 0.0 {
                    *per_job.entry(h.job_id.as_str()).or_insert(0.0) += amount;
                }
            }
        }
        let mut top: Vec<(&str, f64)> = per_job.into_iter().collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        let unit = ["GPUs", "CPUs", "GiB"][resource];
        let mut text = String::new();
        for (k, (job, amount)) in top.iter().take(3).enumerate() {
            let sep = if k == 0 { "" } else { ", " };
            let _ = write!(text, "{sep}{job} ({} {unit})", trim(*amount));
        }
        if top.len() > 3 {
            let _ = write!(text, " and {} more", top.len() - 3);
        }
        self.scopes[scope].holders[resource] = Some(text.clone());
        text
    }
}

/// The pools with their index and machine shape, largest machines (most GPUs per node) first,
/// ties in pool order.
fn largest_first(pools: &[Pool]) -> impl Iterator<Item = (usize, &Pool, Shape)> {
    let mut order: Vec<usize> = (0..pools.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(pools[*i].gpus_per_node));
    order
        .into_iter()
        .map(move |i| (i, &pools[i], Shape::of(&pools[i])))
}

/// The `count` first nodes of `candidates` (all of them when fewer) in the order of their `key`
/// (a flag, then a count, then a number), ties broken by node index, in that order.
fn best_nodes<G: Ord>(
    mut candidates: Vec<usize>,
    count: usize,
    key: impl Fn(usize) -> (bool, G, f64),
) -> Vec<usize> {
    let order = |a: &usize, b: &usize| {
        let (ka, kb) = (key(*a), key(*b));
        ka.0.cmp(&kb.0)
            .then(ka.1.cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(a.cmp(b))
    };
    if count < candidates.len() {
        if count > 0 {
            candidates.select_nth_unstable_by(count - 1, order);
        }
        candidates.truncate(count);
    }
    candidates.sort_unstable_by(order);
    candidates
}

/// A number without a needless `.0`.
fn trim(v: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

/// Why a pool did not fit: the pool and how many nodes passed each test.
struct Misfit<'a> {
    pool: &'a Pool,
    counts: Counts,
}

fn describe(pool: &Pool) -> String {
    match &pool.series {
        Some(s) => format!("{} free {s} GPUs", pool.gpus_per_node),
        None => format!(
            "{} free CPUs and {} GiB memory",
            trim(pool.cpus),
            trim(pool.memory_gb)
        ),
    }
}

/// What the reason of a CPU-only job larger than every CPU node says.
const SPILL: &str =
    "no CPU node is that large, so it waits for spare CPU on GPU nodes, where GPU jobs go first";

/// The reason and message of a job that is short of resources (not of reserved nodes).
fn shortage(planner: &mut Planner, m: &Misfit) -> (PendingReason, String) {
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
                trim(p.cpus),
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
                trim(p.cpus),
                trim(p.memory_gb),
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
            let message = if planner.fits_cpu_node(&Shape::of(p)) {
                format!(
                    "pool {}: needs {} node(s) with {}, {} available (GPU nodes keep {} CPUs and {} GiB per free GPU for GPU jobs)",
                    p.name,
                    p.nodes,
                    describe(p),
                    c.all,
                    trim(planner.share.cpus),
                    trim(planner.share.memory_gb)
                )
            } else {
                format!(
                    "pool {}: needs {} node(s) with {}; {SPILL}; {} GPU node(s) have it free now beyond the {} CPUs and {} GiB each free GPU keeps",
                    p.name,
                    p.nodes,
                    describe(p),
                    c.all,
                    trim(planner.share.cpus),
                    trim(planner.share.memory_gb)
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
type ShortKey<'q> = (
    &'q str,
    Option<&'q str>,
    u32,
    u32,
    u64,
    u64,
    (u32, u32, u32),
);

/// One planning round: the planner, the plan being built and the message caches.
struct Round<'c, 'q> {
    planner: Planner<'c>,
    plan: AdmissionPlan<'q>,
    behind_messages: Vec<Option<Arc<str>>>,
    spill_behind_messages: Vec<Option<Arc<str>>>,
    short_messages: HashMap<ShortKey<'q>, (PendingReason, Arc<str>)>,
}

impl<'c, 'q> Round<'c, 'q> {
    /// Places `job` on open nodes and admits it if every pool fits now.
    fn try_admit(&mut self, job: &'q JobRecord) -> bool {
        let pools = &job.spec.pools;
        self.planner.set_job(pools);
        let Ok(placed) = self.planner.place(pools, View::Open, true) else {
            return false;
        };
        for (pool, nodes) in pools.iter().zip(&placed) {
            for &n in nodes {
                self.planner.hold(n, &job.id, Shape::of(pool));
            }
        }
        let placements = pools
            .iter()
            .zip(placed)
            .map(|(p, nodes)| PoolPlacement {
                pool: p.name.clone(),
                nodes: nodes
                    .iter()
                    .map(|i| self.planner.names[*i].to_owned())
                    .collect(),
            })
            .collect();
        self.plan.admit.push(Admission {
            job_id: job.id.clone(),
            placements,
        });
        true
    }

    fn wait(&mut self, job: &'q JobRecord, reason: PendingReason, message: Arc<str>) {
        self.plan.waiting.push(Waiting {
            job_id: &job.id,
            reason,
            message,
        });
    }

    /// Admits `job` if it fits now; otherwise records why it waits and reserves the nodes it
    /// would use once they drain. Returns whether it was admitted.
    fn consider(&mut self, job: &'q JobRecord) -> bool {
        if self.try_admit(job) {
            return true;
        }
        let pools = &job.spec.pools;
        let planner = &mut self.planner;
        if let Some(m) = planner.never_fits(pools) {
            let message = format!(
                "pool {}: needs {} node(s) with {}, the fleet has {} schedulable",
                m.pool.name,
                m.pool.nodes,
                describe(m.pool),
                m.counts.all
            );
            self.wait(job, PendingReason::NoMatchingNode, message.into());
            return false;
        }
        // Would it fit without this pass's reservations? Then it waits for a reserved node.
        match planner.fits_unreserved(pools) {
            Ok(owner) => {
                // One message per owner, cloned: a long queue behind one job formats it once.
                let o = owner.or((!planner.owners.is_empty()).then_some(0));
                let k = o.map_or(0, |o| o + 1);
                let spill = match pools.as_slice() {
                    [p] if p.series.is_none() => !planner.fits_cpu_node(&Shape::of(p)),
                    _ => false,
                };
                let cache = if spill {
                    &mut self.spill_behind_messages
                } else {
                    &mut self.behind_messages
                };
                if cache.len() <= k {
                    cache.resize(k + 1, None);
                }
                let message = cache[k]
                    .get_or_insert_with(|| {
                        let who = o.map_or_else(
                            || "earlier jobs".to_owned(),
                            |o| format!("job {}", planner.owners[o]),
                        );
                        Arc::from(if spill {
                            format!(
                                "{SPILL}: the GPU nodes it would fit are held for {who} until they drain"
                            )
                        } else {
                            format!(
                                "waiting behind {who} (served first by priority, submission order or fair share), which holds the nodes this job would use until they drain"
                            )
                        })
                    })
                    .clone();
                self.wait(job, PendingReason::QueuedBehindOthers, message);
            }
            Err(m) => {
                // Many waiting jobs of a long queue share a pool shape and counts: format once.
                let p = m.pool;
                let key = (
                    p.name.as_str(),
                    p.series.as_deref(),
                    p.nodes,
                    p.gpus_per_node,
                    p.cpus.to_bits(),
                    p.memory_gb.to_bits(),
                    (m.counts.gpus, m.counts.gpus_cpus, m.counts.all),
                );
                let (reason, message) = match self.short_messages.get(&key) {
                    Some(cached) => cached.clone(),
                    None => {
                        let (reason, text) = shortage(planner, &m);
                        let made = (reason, Arc::<str>::from(text));
                        self.short_messages.insert(key, made.clone());
                        made
                    }
                };
                self.wait(job, reason, message);
            }
        }
        let planner = &mut self.planner;
        let owner = planner.owners.len();
        if planner.reserve(pools, owner) {
            planner.owners.push(job.id.clone());
        }
        false
    }
}

/// Per tenant during a round: its quota, what it holds, its queued jobs and its share.
struct Tenant<'q> {
    quota: Option<&'q TenantQuota>,
    weight: f64,
    held: Demand,
    /// With a quota: the limit and the GPUs held, per series scope of the planner.
    limits: Vec<Option<quota::SeriesLimit>>,
    held_gpus: Vec<u32>,
    /// Weighted dominant share of `held`, recomputed when it changes.
    share: f64,
    /// Indexes into the sorted queue keys (`start..end`), and the next to consider.
    next: usize,
    end: usize,
}

/// The tenant's weighted dominant share: its largest fraction of any resource of the fleet
/// (GPUs of each series, CPUs and memory of CPU-only jobs), divided by its weight.
fn dominant_share(held: &Demand, weight: f64, totals: &Totals) -> f64 {
    let mut share: f64 = 0.0;
    for (series, gpus) in &held.gpus {
        let total = totals.gpus.get(series.as_str()).copied().unwrap_or(0);
        if total > 0 {
            share = share.max(f64::from(*gpus) / f64::from(total));
        } else if *gpus > 0 {
            share = share.max(1.0);
        }
    }
    if totals.cpus > 0.0 {
        share = share.max(held.cpus / totals.cpus);
    }
    if totals.memory_gb > 0.0 {
        share = share.max(held.memory_gb / totals.memory_gb);
    }
    share / weight.max(crate::quota::MIN_WEIGHT)
}

/// Adds what `spec` holds to `tenant` (by name, and per scope for its quota checks).
fn hold(tenant: &mut Tenant, planner: &Planner, spec: &JobSpec, totals: &Totals) {
    tenant.held.add(&Demand::of(spec));
    tenant.share = dominant_share(&tenant.held, tenant.weight, totals);
    if tenant.held_gpus.is_empty() {
        return;
    }
    for pool in &spec.pools {
        if let Some(scope) = pool.series.as_deref().and_then(|s| planner.series(s)) {
            let g = &mut tenant.held_gpus[scope];
            *g = g.saturating_add(pool.nodes.saturating_mul(pool.gpus_per_node));
        }
    }
}

/// Where the job of `spec` stands against `quota`; the planner has resolved the job's pools
/// (`set_job`), so series are compared by scope index, not by name. A pool of a series without
/// schedulable nodes takes the by-name path.
fn quota_verdict<'s>(
    planner: &Planner,
    tenant: &Tenant,
    quota: &TenantQuota,
    spec: &'s JobSpec,
) -> Verdict<'s> {
    let pools = &spec.pools;
    let cur = &planner.cur;
    if pools
        .iter()
        .zip(cur)
        .any(|(p, s)| p.series.is_some() && s.is_none())
    {
        return quota::check_spec(quota, &tenant.held, spec);
    }
    let gpus = pools.iter().enumerate().filter_map(|(i, p)| {
        let series = p.series.as_deref()?;
        let scope = cur[i]?;
        if cur[..i].contains(&Some(scope)) {
            return None;
        }
        let need = pools[i..]
            .iter()
            .zip(&cur[i..])
            .filter(|(_, s)| **s == Some(scope))
            .map(|(q, _)| q.nodes.saturating_mul(q.gpus_per_node))
            .fold(0u32, u32::saturating_add);
        Some(quota::GpuUse {
            series,
            need,
            used: tenant.held_gpus[scope],
            limit: tenant.limits[scope],
        })
    });
    let (cpus, memory_gb) = quota::cpu_only_need(spec);
    quota::judge(quota, &tenant.held, gpus, cpus, memory_gb)
}

/// Fleet totals the shares are fractions of.
struct Totals<'c> {
    gpus: HashMap<&'c str, u32>,
    cpus: f64,
    memory_gb: f64,
}

/// Plans which `queue` jobs (only `QUEUED` ones count) to admit against `capacity`, after placing
/// `reservations`, under the tenants' `quotas`. The other active records of `queue` (admitted,
/// running) are what each tenant holds now.
///
/// Order: among tenants with queued jobs, the one with the lowest weighted dominant share of what
/// is admitted goes next (ties: its next job's priority, submission time, id); within a tenant,
/// priority (high first), then submission time, then id. A job above a hard limit of its quota
/// waits (`QuotaExceeded`) and reserves nothing; a job above a borrowing limit is considered only
/// after every job within its quota, on nodes nobody reserved, and reserves nothing either.
pub fn plan_admissions<'q>(
    queue: &'q [JobRecord],
    capacity: &CapacitySnapshot,
    reservations: &[Reservation],
    quotas: &[TenantQuota],
) -> AdmissionPlan<'q> {
    let mut planner = Planner::new(capacity);
    hold_reservations(&mut planner, reservations);

    // Tenants, by index; consecutive records of one tenant skip the map.
    let mut tenant_index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    let mut last: Option<(&str, usize)> = None;
    let mut index_of = |name: &'q str| -> usize {
        if let Some((n, i)) = last
            && n == name
        {
            return i;
        }
        let i = match tenant_index.get(name) {
            Some(&i) => i,
            None => {
                let i = names.len();
                tenant_index.insert(name, i);
                names.push(name);
                i
            }
        };
        last = Some((name, i));
        i
    };
    // Sorted on plain keys (ids only break ties): a queue of 100,000 records sorted through
    // references spent most of its time chasing pointers.
    // The first part packs the tenant (high half) and the priority, high first (low half).
    let mut keys: Vec<(u64, i64, usize)> = Vec::new();
    let tenant_of = |key: &(u64, i64, usize)| (key.0 >> 32) as usize;
    let mut holding: Vec<(usize, usize)> = Vec::new();
    for (k, j) in queue.iter().enumerate() {
        if j.state.is_terminal() {
            continue;
        }
        if j.state == JobState::Queued {
            if !j.stop_requested {
                let t = index_of(&j.tenant);
                let priority = !((j.spec.priority as u32) ^ 0x8000_0000);
                keys.push((
                    ((t as u64) << 32) | u64::from(priority),
                    j.submitted_at_ms,
                    k,
                ));
            }
        } else {
            let t = index_of(&j.tenant);
            holding.push((t, k));
        }
    }
    keys.sort_unstable_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| queue[a.2].id.cmp(&queue[b.2].id))
    });

    let totals = Totals {
        gpus: capacity
            .series
            .iter()
            .map(|(s, c)| (s.as_str(), c.total_gpus))
            .collect(),
        cpus: capacity.cpu.total_cpus,
        memory_gb: capacity.cpu.total_memory_gb,
    };
    let quota_of: HashMap<&str, &TenantQuota> =
        quotas.iter().map(|q| (q.tenant.as_str(), q)).collect();
    let mut tenants: Vec<Tenant> = names
        .iter()
        .map(|n| {
            let quota = quota_of.get(n).copied();
            let mut limits = Vec::new();
            if let Some(q) = quota {
                limits = vec![None; planner.scopes.len()];
                for (series, limit) in &q.series {
                    if let Some(scope) = planner.series(series) {
                        limits[scope] = Some(*limit);
                    }
                }
            }
            Tenant {
                quota,
                weight: quota.map_or(1.0, |q| q.weight),
                held: Demand::default(),
                held_gpus: vec![0; limits.len()],
                limits,
                share: 0.0,
                next: 0,
                end: 0,
            }
        })
        .collect();
    for (t, k) in holding {
        hold(&mut tenants[t], &planner, &queue[k].spec, &totals);
    }
    let mut at = 0;
    while at < keys.len() {
        let t = tenant_of(&keys[at]);
        let start = at;
        while at < keys.len() && tenant_of(&keys[at]) == t {
            at += 1;
        }
        tenants[t].next = start;
        tenants[t].end = at;
    }

    // Lowest share first; ties go to the earlier next job (priority, submission, id).
    type Entry<'q> = std::cmp::Reverse<(u64, std::cmp::Reverse<i32>, i64, &'q str, usize)>;
    let entry = |tenants: &[Tenant], t: usize| -> Entry<'_> {
        let tenant = &tenants[t];
        let job = &queue[keys[tenant.next].2];
        // Shares are never negative, so their bit patterns order as the numbers do.
        let share = tenant.share;
        std::cmp::Reverse((
            share.to_bits(),
            std::cmp::Reverse(job.spec.priority),
            job.submitted_at_ms,
            job.id.as_str(),
            t,
        ))
    };
    let mut heap: std::collections::BinaryHeap<Entry> = (0..tenants.len())
        .filter(|&t| tenants[t].next < tenants[t].end)
        .map(|t| entry(&tenants, t))
        .collect();

    let mut round = Round {
        planner,
        plan: AdmissionPlan {
            admit: Vec::new(),
            waiting: Vec::with_capacity(keys.len()),
        },
        behind_messages: Vec::new(),
        spill_behind_messages: Vec::new(),
        short_messages: HashMap::new(),
    };
    let mut borrowers: Vec<(usize, &'q JobRecord)> = Vec::new();
    // Quota messages, formatted once per tenant and limit state (a long queue of one tenant
    // waits for the same reason).
    let mut quota_messages: HashMap<(usize, bool, OverKey<'q>), Arc<str>> = HashMap::new();
    let mut held_by_quota = |round: &mut Round<'_, 'q>,
                             t: usize,
                             job: &'q JobRecord,
                             over: Over<'q>,
                             borrowing: bool| {
        let key = (t, borrowing, over.key());
        let message = quota_messages
            .entry(key)
            .or_insert_with(|| {
                let text = over.message(&job.tenant);
                Arc::from(if borrowing {
                    format!(
                        "{text}; it may borrow only capacity that no other job waiting within its quota needs, and none is free now"
                    )
                } else {
                    text
                })
            })
            .clone();
        round.wait(job, PendingReason::QuotaExceeded, message);
    };
    while let Some(std::cmp::Reverse((.., t))) = heap.pop() {
        // With one tenant left, its jobs go in its own order: no heap work per job.
        let alone = heap.is_empty();
        loop {
            let job = &queue[keys[tenants[t].next].2];
            tenants[t].next += 1;
            let verdict = match tenants[t].quota {
                None => Verdict::Within,
                Some(q) => {
                    round.planner.set_job(&job.spec.pools);
                    quota_verdict(&round.planner, &tenants[t], q, &job.spec)
                }
            };
            match verdict {
                Verdict::Within => {
                    if round.consider(job) {
                        hold(&mut tenants[t], &round.planner, &job.spec, &totals);
                    }
                }
                Verdict::Borrow(_) => borrowers.push((t, job)),
                Verdict::Exceeded(over) => held_by_quota(&mut round, t, job, over, false),
            }
            if tenants[t].next >= tenants[t].end {
                break;
            }
            if !alone {
                heap.push(entry(&tenants, t));
                break;
            }
        }
    }
    // Borrowing: after every job within its quota, on nodes nobody reserved, reserving nothing.
    for (t, job) in borrowers {
        let Some(q) = tenants[t].quota else { continue };
        round.planner.set_job(&job.spec.pools);
        match quota_verdict(&round.planner, &tenants[t], q, &job.spec) {
            Verdict::Within => {
                if round.consider(job) {
                    hold(&mut tenants[t], &round.planner, &job.spec, &totals);
                }
            }
            Verdict::Exceeded(over) => held_by_quota(&mut round, t, job, over, false),
            Verdict::Borrow(over) => {
                if round.try_admit(job) {
                    hold(&mut tenants[t], &round.planner, &job.spec, &totals);
                } else {
                    held_by_quota(&mut round, t, job, over, true);
                }
            }
        }
    }
    round.plan
}

/// Takes the resources of admitted-but-unbound machines from their planned nodes (or, for jobs
/// admitted without a recorded plan, from the best-fitting nodes).
fn hold_reservations(planner: &mut Planner, reservations: &[Reservation]) {
    let index: HashMap<&str, usize> = planner
        .names
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, i))
        .collect();
    for r in reservations {
        let shape = Shape {
            gpus: r.gpus,
            cpus: r.cpus,
            memory_gb: r.memory_gb,
            cpu_only: r.series.is_none(),
        };
        if !r.nodes.is_empty() {
            for n in r.nodes.iter().take(r.machines as usize) {
                if let Some(&i) = index.get(n.as_str()) {
                    planner.take(i, &shape);
                    planner.hold(i, &r.job_id, shape);
                }
            }
            continue;
        }
        let scope = match r.series.as_deref() {
            None => Some(CPU_SCOPE),
            Some(s) => planner.series(s),
        };
        let Some(scope) = scope else { continue };
        // Reserve what can be reserved; machines that fit nowhere hold nothing.
        for _ in 0..r.machines {
            planner.begin();
            let Ok(chosen) = planner.pick(scope, &shape, 1, View::All) else {
                break;
            };
            for n in chosen {
                planner.take(n, &shape);
                planner.hold(n, &r.job_id, shape);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of admission planning: gang fit per node, fragmentation, reservations, ordering and
    //! series independence.

    use super::*;
    use crate::capacity::NodeCapacity;
    use crate::spec::JobSpec;

    fn node(name: &str, series: Option<&str>, gpus: u32, used: u32) -> NodeCapacity {
        NodeCapacity {
            name: name.into(),
            series: series.map(String::from),
            gpus,
            gpus_used: used,
            cpus: 96.0,
            memory_gb: 1024.0,
            ready: true,
            ..NodeCapacity::default()
        }
    }

    fn snapshot(nodes: Vec<NodeCapacity>) -> CapacitySnapshot {
        CapacitySnapshot::from_nodes(0, nodes)
    }

    fn pool(name: &str, series: Option<&str>, nodes: u32, gpus: u32) -> serde_json::Value {
        serde_json::json!({"name": name, "series": series, "nodes": nodes, "gpus_per_node": gpus,
            "cpus": 8.0, "memory_gb": 64.0})
    }

    fn job(id: &str, priority: i32, submitted: i64, pools: Vec<serde_json::Value>) -> JobRecord {
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true", "env": {},
            "pools": pools, "deadlines": {"pre_running_seconds": 60, "run_seconds": 600},
            "priority": priority, "labels": {}, "namespace": "ns", "platform_version": "0"
        }))
        .expect("spec");
        JobRecord::new_queued(id, "acme", spec, "ab", submitted)
    }

    /// One unbound 8-GPU h200 machine of an admitted job "earlier", waiting for `nodes`.
    fn earlier_h200_machine(nodes: Vec<String>) -> Reservation {
        Reservation {
            job_id: "earlier".into(),
            series: Some("h200".into()),
            gpus: 8,
            cpus: 8.0,
            memory_gb: 64.0,
            machines: 1,
            nodes,
        }
    }

    fn admitted<'p>(plan: &'p AdmissionPlan) -> Vec<&'p str> {
        plan.admit.iter().map(|a| a.job_id.as_str()).collect()
    }

    fn nodes_of<'p>(plan: &'p AdmissionPlan, id: &str) -> Vec<&'p str> {
        plan.admit
            .iter()
            .filter(|a| a.job_id == id)
            .flat_map(|a| a.placements.iter().flat_map(|p| p.nodes.iter()))
            .map(String::as_str)
            .collect()
    }

    fn message<'p>(plan: &'p AdmissionPlan, id: &str) -> &'p str {
        plan.waiting
            .iter()
            .find(|w| w.job_id == id)
            .map_or("", |w| &*w.message)
    }

    fn reason(plan: &AdmissionPlan, id: &str) -> Option<PendingReason> {
        plan.waiting
            .iter()
            .find(|w| w.job_id == id)
            .map(|w| w.reason)
    }

    #[test]
    fn sixteen_free_gpus_spread_four_per_node_cannot_host_one_machine_of_eight() {
        let cap = snapshot(
            (0..4)
                .map(|i| node(&format!("h-{i}"), Some("h200"), 8, 4))
                .collect(),
        );
        assert_eq!(cap.series["h200"].free_gpus, 16);
        let queue = [job("big", 0, 1, vec![pool("main", Some("h200"), 1, 8)])];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert!(plan.admit.is_empty());
        let w = &plan.waiting[0];
        assert_eq!(w.reason, PendingReason::InsufficientGpu);
        assert!(
            w.message
                .contains("needs 1 node(s) with 8 free h200 GPUs, 0 available"),
            "{}",
            w.message
        );
    }

    #[test]
    fn multi_pool_job_is_admitted_only_when_every_pool_fits_on_distinct_nodes() {
        let pools = vec![
            pool("main", Some("h200"), 2, 8),
            pool("eval", Some("l40s"), 1, 4),
        ];
        let short = snapshot(vec![
            node("h-0", Some("h200"), 8, 0),
            node("h-1", Some("h200"), 8, 2),
            node("l-0", Some("l40s"), 4, 0),
        ]);
        let queue = [job("j", 0, 1, pools.clone())];
        let plan = plan_admissions(&queue, &short, &[], &[]);
        assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientGpu));

        let enough = snapshot(vec![
            node("h-0", Some("h200"), 8, 0),
            node("h-1", Some("h200"), 8, 0),
            node("l-0", Some("l40s"), 4, 0),
        ]);
        let queue = [job("j", 0, 1, pools)];
        let plan = plan_admissions(&queue, &enough, &[], &[]);
        assert_eq!(admitted(&plan), ["j"]);
        let p = &plan.admit[0].placements;
        assert_eq!((p[0].pool.as_str(), p[0].nodes.len()), ("main", 2));
        assert_eq!(p[1].nodes, ["l-0"]);
    }

    #[test]
    fn two_pools_of_one_series_never_share_a_node() {
        // One node with 16 free GPUs could hold both machines by count, but each machine needs its own node.
        let cap = snapshot(vec![node("h-0", Some("h200"), 16, 0)]);
        let pools = vec![pool("a", Some("h200"), 1, 8), pool("b", Some("h200"), 1, 8)];
        let queue = [job("j", 0, 1, pools)];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert!(plan.admit.is_empty());
    }

    #[test]
    fn reservations_of_admitted_jobs_keep_their_gpus() {
        let cap = snapshot(vec![
            node("h-0", Some("h200"), 8, 0),
            node("h-1", Some("h200"), 8, 0),
        ]);
        let held = earlier_h200_machine(Vec::new());
        let queue = [
            job("a", 0, 1, vec![pool("m", Some("h200"), 1, 8)]),
            job("b", 0, 2, vec![pool("m", Some("h200"), 1, 8)]),
        ];
        let plan = plan_admissions(&queue, &cap, &[held], &[]);
        assert_eq!(admitted(&plan), ["a"]);
        assert_eq!(reason(&plan, "b"), Some(PendingReason::InsufficientGpu));
        // Jobs admitted in this pass and admitted jobs not bound yet have no pods to show yet, but
        // they hold the GPUs all the same.
        let m = message(&plan, "b");
        assert!(
            m.ends_with("h200 GPUs held by a (8 GPUs), earlier (8 GPUs)"),
            "{m}"
        );
    }

    #[test]
    fn priority_then_submission_order_and_a_blocked_series_blocks_only_itself() {
        let cap = snapshot(vec![
            node("h-0", Some("h200"), 8, 0),
            node("l-0", Some("l40s"), 4, 0),
        ]);
        let queue = [
            job("small-late", 0, 5, vec![pool("m", Some("h200"), 1, 8)]),
            job(
                "big-h200",
                0,
                1,
                vec![pool("m", Some("h200"), 1, 8), pool("x", Some("h200"), 1, 8)],
            ),
            job("urgent", 9, 9, vec![pool("m", Some("h200"), 1, 4)]),
            job("l40s", 0, 3, vec![pool("m", Some("l40s"), 1, 4)]),
        ];
        // big-h200 needs two h200 nodes; the fleet has one: it never fits and blocks nobody.
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["urgent", "l40s"]);
        assert_eq!(
            reason(&plan, "big-h200"),
            Some(PendingReason::NoMatchingNode)
        );
        assert_eq!(
            reason(&plan, "small-late"),
            Some(PendingReason::InsufficientGpu)
        );

        // A job that does not fit right now reserves the node it waits for; later jobs backfill the
        // nodes it does not need, but not that one.
        let cap = snapshot(vec![
            node("h-0", Some("h200"), 8, 4),
            node("h-1", Some("h200"), 8, 4),
            node("l-0", Some("l40s"), 4, 0),
        ]);
        let queue = [
            job("big", 0, 1, vec![pool("m", Some("h200"), 1, 8)]),
            job("small", 0, 2, vec![pool("m", Some("h200"), 1, 2)]),
            job("small2", 0, 3, vec![pool("m", Some("h200"), 1, 2)]),
            job("small3", 0, 4, vec![pool("m", Some("h200"), 1, 2)]),
            job("other", 0, 5, vec![pool("m", Some("l40s"), 1, 4)]),
        ];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["small", "small2", "other"]);
        assert_eq!(nodes_of(&plan, "small"), ["h-1"]);
        assert_eq!(reason(&plan, "big"), Some(PendingReason::InsufficientGpu));
        assert_eq!(
            reason(&plan, "small3"),
            Some(PendingReason::QueuedBehindOthers)
        );
        assert!(message(&plan, "small3").contains("waiting behind job big"));
    }

    #[test]
    fn cordoned_series_gives_no_matching_node_and_cpu_jobs_use_any_node() {
        let mut cordoned = node("h-0", Some("h200"), 8, 0);
        cordoned.cordoned = true;
        let cap = snapshot(vec![cordoned, node("c-0", None, 0, 0)]);
        let mut cpu = pool("main", None, 1, 0);
        cpu["cpus"] = serde_json::json!(2.0);
        let queue = [
            job("gpu", 0, 1, vec![pool("m", Some("h200"), 1, 8)]),
            job("cpu", 0, 2, vec![cpu]),
        ];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["cpu"]);
        assert_eq!(reason(&plan, "gpu"), Some(PendingReason::NoMatchingNode));
    }

    #[test]
    fn cpu_job_larger_than_free_cpu_waits_with_insufficient_cpu() {
        let mut busy = node("c-0", None, 0, 0);
        busy.cpus_used = 95.0;
        let cap = snapshot(vec![busy]);
        let queue = [job("cpu", 0, 1, vec![pool("main", None, 1, 0)])];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(reason(&plan, "cpu"), Some(PendingReason::InsufficientCpu));
    }

    #[test]
    fn jobs_already_stopping_or_admitted_are_not_planned() {
        let cap = snapshot(vec![node("h-0", Some("h200"), 8, 0)]);
        let mut stopping = job("s", 0, 1, vec![pool("m", Some("h200"), 1, 8)]);
        stopping.stop_requested = true;
        let mut running = job("r", 0, 1, vec![pool("m", Some("h200"), 1, 8)]);
        running.state = JobState::Admitted;
        let queue = [stopping, running];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert!(plan.admit.is_empty() && plan.waiting.is_empty());
    }

    #[test]
    fn job_that_fits_idle_fleet_only_by_mixing_node_sizes_is_not_reported_as_never_fitting() {
        // One 8-GPU and one 2-GPU node: only one node fits the largest machine of the series, so the
        // quick idle-fleet test cannot vouch for the job and the full placement must decide.
        let cap = snapshot(vec![
            node("h-big", Some("h200"), 8, 0),
            node("h-small", Some("h200"), 2, 0),
        ]);
        let mixed = job(
            "mixed",
            0,
            1,
            vec![
                pool("main", Some("h200"), 1, 8),
                pool("aux", Some("h200"), 1, 2),
            ],
        );
        let too_big = job("too-big", 0, 2, vec![pool("main", Some("h200"), 2, 8)]);
        let queue = [mixed, too_big];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["mixed"]);
        assert_eq!(
            reason(&plan, "too-big"),
            Some(PendingReason::NoMatchingNode)
        );
    }

    fn sized(
        name: &str,
        series: Option<&str>,
        gpus: u32,
        cpus: f64,
        memory_gb: f64,
    ) -> NodeCapacity {
        NodeCapacity {
            cpus,
            memory_gb,
            ..node(name, series, gpus, 0)
        }
    }

    fn cpu_pool(cpus: f64, memory_gb: f64) -> serde_json::Value {
        serde_json::json!({"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
            "cpus": cpus, "memory_gb": memory_gb})
    }

    fn gpu_pool(series: &str, nodes: u32, gpus: u32) -> serde_json::Value {
        // The JobSpec defaults: 4 CPUs and 32 GiB per GPU.
        serde_json::json!({"name": "main", "series": series, "nodes": nodes, "gpus_per_node": gpus,
            "cpus": 4.0 * f64::from(gpus), "memory_gb": 32.0 * f64::from(gpus)})
    }

    /// The sample fleet (`examples/fleet.yaml`): h200 × 4 (one cordoned), l40s × 2, cpu × 2.
    fn sample_fleet() -> Vec<NodeCapacity> {
        let mut nodes: Vec<NodeCapacity> = (0..4)
            .map(|i| sized(&format!("h200-{i}"), Some("h200"), 8, 192.0, 2048.0))
            .collect();
        nodes[3].cordoned = true;
        nodes.extend((0..2).map(|i| sized(&format!("l40s-{i}"), Some("l40s"), 4, 64.0, 512.0)));
        nodes.extend((0..2).map(|i| sized(&format!("cpu-{i}"), None, 0, 32.0, 128.0)));
        nodes
    }

    /// Takes the admitted jobs' machines from `cap` on their planned nodes, as the next pass sees it.
    fn apply(cap: &mut CapacitySnapshot, queue: &[JobRecord], plan: &AdmissionPlan) {
        for a in &plan.admit {
            let Some(job) = queue.iter().find(|j| j.id == a.job_id) else {
                continue;
            };
            for placement in &a.placements {
                let Some(pool) = job.spec.pools.iter().find(|p| p.name == placement.pool) else {
                    continue;
                };
                for name in &placement.nodes {
                    let Some(n) = cap.nodes.iter_mut().find(|n| &n.name == name) else {
                        continue;
                    };
                    n.gpus_used += pool.gpus_per_node;
                    n.cpus_used += pool.cpus;
                    n.memory_gb_used += pool.memory_gb;
                    n.holders.push(crate::capacity::Holder {
                        job_id: job.id.clone(),
                        gpus: pool.gpus_per_node,
                        cpus: pool.cpus,
                        memory_gb: pool.memory_gb,
                    });
                }
            }
        }
        *cap = CapacitySnapshot::from_nodes(cap.taken_at_ms, std::mem::take(&mut cap.nodes));
    }

    #[test]
    fn the_new_user_scenario_uses_cpu_nodes_first_and_keeps_the_h200_gpus_usable() {
        // 30 small CPU jobs and 8 jobs of 30 CPUs, then an h200 × 3 × 8 job.
        let mut queue: Vec<JobRecord> = (0..30)
            .map(|i| job(&format!("small-{i:02}"), 0, i, vec![cpu_pool(1.0, 2.0)]))
            .collect();
        queue.extend(
            (0..8).map(|i| job(&format!("wide-{i}"), 0, 100 + i, vec![cpu_pool(30.0, 8.0)])),
        );
        let mut cap = snapshot(sample_fleet());
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(plan.admit.len(), 38, "{:?}", plan.waiting);
        for i in 0..30 {
            let on = nodes_of(&plan, &format!("small-{i:02}"));
            assert!(
                on[0].starts_with("cpu-"),
                "small-{i:02} on {on:?}: CPU nodes come first"
            );
        }
        apply(&mut cap, &queue, &plan);
        // Every h200 node keeps 4 CPUs and 32 GiB for each of its 8 free GPUs.
        for n in cap
            .nodes
            .iter()
            .filter(|n| n.series.as_deref() == Some("h200") && !n.cordoned)
        {
            assert!(
                n.cpus - n.cpus_used >= 32.0,
                "{}: {} CPUs used",
                n.name,
                n.cpus_used
            );
        }
        let gpu = job("h200-3x8", 0, 1_000, vec![gpu_pool("h200", 3, 8)]);
        let plan = plan_admissions(std::slice::from_ref(&gpu), &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["h200-3x8"], "{:?}", plan.waiting);
        let mut planned = nodes_of(&plan, "h200-3x8");
        planned.sort_unstable();
        assert_eq!(planned, ["h200-0", "h200-1", "h200-2"]);
    }

    #[test]
    fn cpu_jobs_spilled_onto_gpu_nodes_never_take_what_free_gpus_keep() {
        // CPU nodes full; CPU jobs spill onto one 8-GPU node of 96 CPUs: they may use 96 - 8 × 4 = 64.
        let mut full = sized("cpu-0", None, 0, 32.0, 128.0);
        full.cpus_used = 32.0;
        let cap = snapshot(vec![full, sized("h-0", Some("h200"), 8, 96.0, 1024.0)]);
        let queue: Vec<JobRecord> = (0..3)
            .map(|i| job(&format!("spill-{i}"), 0, i, vec![cpu_pool(30.0, 8.0)]))
            .chain([job("gpu", 0, 10, vec![gpu_pool("h200", 1, 8)])])
            .collect();
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["spill-0", "spill-1", "gpu"]);
        assert_eq!(
            reason(&plan, "spill-2"),
            Some(PendingReason::InsufficientCpu)
        );
        assert!(
            message(&plan, "spill-2").contains("GPU nodes keep 4 CPUs and 32 GiB per free GPU"),
            "{}",
            message(&plan, "spill-2")
        );
    }

    #[test]
    fn cpu_jobs_larger_than_every_cpu_node_never_hold_gpu_nodes_from_a_gpu_job() {
        // Issue 29's scenario on the sample fleet: two 32-CPU jobs fill the CPU nodes, six
        // 90-CPU jobs spill onto the three h200 nodes (three run, three wait), then a job for
        // 3 × 8 h200 GPUs comes.
        let mut queue: Vec<JobRecord> = (0..2)
            .map(|i| job(&format!("cpu32-{i}"), 0, i, vec![cpu_pool(32.0, 8.0)]))
            .collect();
        queue.extend(
            (0..6).map(|i| job(&format!("cpu90-{i}"), 0, 10 + i, vec![cpu_pool(90.0, 8.0)])),
        );
        let mut cap = snapshot(sample_fleet());
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(
            admitted(&plan),
            ["cpu32-0", "cpu32-1", "cpu90-0", "cpu90-1", "cpu90-2"]
        );
        apply(&mut cap, &queue, &plan);
        let left: Vec<JobRecord> = queue
            .iter()
            .filter(|j| !plan.admit.iter().any(|a| a.job_id == j.id))
            .cloned()
            .chain([job("h200-3x8", 0, 100, vec![gpu_pool("h200", 3, 8)])])
            .collect();
        let plan = plan_admissions(&left, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["h200-3x8"], "{:?}", plan.waiting);
        for id in ["cpu90-3", "cpu90-4", "cpu90-5"] {
            assert_eq!(reason(&plan, id), Some(PendingReason::InsufficientCpu));
            let m = message(&plan, id);
            assert!(
                m.contains("no CPU node is that large, so it waits for spare CPU on GPU nodes, where GPU jobs go first"),
                "{m}"
            );
            // True of the snapshot the plan saw: no h200 node has 90 CPUs beyond its GPUs' share.
            assert!(m.contains("0 GPU node(s) have it free now"), "{m}");
        }
        // And once the GPU job holds the nodes, the CPU jobs still wait for the same reason.
        apply(&mut cap, &left, &plan);
        let rest: Vec<JobRecord> = left.into_iter().filter(|j| j.id != "h200-3x8").collect();
        let plan = plan_admissions(&rest, &cap, &[], &[]);
        assert!(plan.admit.is_empty());
        assert_eq!(
            reason(&plan, "cpu90-3"),
            Some(PendingReason::InsufficientCpu)
        );
    }

    #[test]
    fn a_cpu_job_that_fits_only_gpu_nodes_waits_for_their_reservation_without_making_one() {
        // One h200 node reserved by a waiting GPU job: the big CPU job would fit it without the
        // reservation, so it says whose the node is, and it reserves nothing itself.
        let mut h = sized("h-0", Some("h200"), 8, 192.0, 2048.0);
        h.gpus_used = 4;
        let cap = snapshot(vec![h, sized("cpu-0", None, 0, 32.0, 128.0)]);
        let queue = [
            job("gpu8", 5, 1, vec![gpu_pool("h200", 1, 8)]),
            job("cpu90", 0, 2, vec![cpu_pool(90.0, 8.0)]),
            job("cpu30", 0, 3, vec![cpu_pool(30.0, 8.0)]),
        ];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["cpu30"], "{:?}", plan.waiting);
        assert_eq!(nodes_of(&plan, "cpu30"), ["cpu-0"]);
        assert_eq!(
            reason(&plan, "cpu90"),
            Some(PendingReason::QueuedBehindOthers)
        );
        let m = message(&plan, "cpu90");
        assert!(
            m.contains("spare CPU on GPU nodes, where GPU jobs go first"),
            "{m}"
        );
        assert!(m.contains("held for job gpu8"), "{m}");
    }

    #[test]
    fn a_gpu_job_short_of_cpu_says_cpu_and_names_the_holders() {
        let mut a = sized("h-0", Some("h200"), 8, 64.0, 1024.0);
        a.cpus_used = 60.0;
        a.holders = vec![crate::capacity::Holder {
            job_id: "hog".into(),
            gpus: 0,
            cpus: 60.0,
            memory_gb: 8.0,
        }];
        let cap = snapshot(vec![a]);
        let queue = [job("j", 0, 1, vec![gpu_pool("h200", 1, 8)])];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientCpu));
        let m = message(&plan, "j");
        assert!(m.contains("1 have the GPUs, 0 also the CPUs"), "{m}");
        assert!(
            m.contains("CPUs on h200 nodes held by hog (60 CPUs)"),
            "{m}"
        );

        let mut b = sized("h-0", Some("h200"), 8, 64.0, 300.0);
        b.memory_gb_used = 200.0;
        let queue = [job("j", 0, 1, vec![gpu_pool("h200", 1, 8)])];
        let plan = plan_admissions(&queue, &snapshot(vec![b]), &[], &[]);
        assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientMemory));
    }

    #[test]
    fn a_small_cpu_job_behind_a_waiting_gpu_job_is_admitted_in_the_same_pass() {
        let mut busy = sized("h-0", Some("h200"), 8, 96.0, 1024.0);
        busy.gpus_used = 4;
        let cap = snapshot(vec![busy, sized("cpu-0", None, 0, 32.0, 128.0)]);
        let queue = [
            job("head", 5, 1, vec![gpu_pool("h200", 1, 8)]),
            job("tiny", 0, 2, vec![cpu_pool(1.0, 1.0)]),
        ];
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        assert_eq!(admitted(&plan), ["tiny"]);
        assert_eq!(nodes_of(&plan, "tiny"), ["cpu-0"]);
        assert_eq!(reason(&plan, "head"), Some(PendingReason::InsufficientGpu));
    }

    #[test]
    fn a_big_job_is_not_starved_by_a_stream_of_small_ones() {
        // Twelve 8-GPU nodes, each busy with a 4-GPU job. A 10-node job waits; every pass, four new
        // 4-GPU jobs arrive and running ones end two passes after admission. Without reservations the
        // small jobs would refill each node as it drains and the big job would never start.
        let names: Vec<String> = (0..12).map(|i| format!("n-{i:02}")).collect();
        let mut running: Vec<(String, String, u32, usize)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("old-{i}"), n.clone(), 4, i % 3))
            .collect();
        let mut queue = vec![job("big", 0, 0, vec![gpu_pool("h200", 10, 8)])];
        let mut big_admitted_at = None;
        for pass in 0..20_usize {
            running.retain(|r| r.3 > pass);
            queue.extend((0..4).map(|k| {
                let id = format!("small-{pass}-{k}");
                job(
                    &id,
                    0,
                    1 + (pass * 4 + k) as i64,
                    vec![gpu_pool("h200", 1, 4)],
                )
            }));
            let nodes = names
                .iter()
                .map(|n| {
                    let used: u32 = running.iter().filter(|r| &r.1 == n).map(|r| r.2).sum();
                    let mut c = sized(n, Some("h200"), 8, 96.0, 1024.0);
                    c.gpus_used = used;
                    c.cpus_used = f64::from(used) * 4.0;
                    c.memory_gb_used = f64::from(used) * 32.0;
                    c
                })
                .collect();
            let plan = plan_admissions(&queue, &snapshot(nodes), &[], &[]);
            for a in &plan.admit {
                let Some(job) = queue.iter().find(|j| j.id == a.job_id) else {
                    continue;
                };
                let gpus = job.spec.pools[0].gpus_per_node;
                for n in &a.placements[0].nodes {
                    running.push((a.job_id.clone(), n.clone(), gpus, pass + 2));
                }
            }
            if plan.admit.iter().any(|a| a.job_id == "big") {
                big_admitted_at = Some(pass);
                break;
            }
            let admitted_ids: Vec<String> = admitted(&plan).into_iter().map(String::from).collect();
            drop(plan);
            queue.retain(|j| !admitted_ids.contains(&j.id));
        }
        let pass = big_admitted_at.expect("the big job starved for 20 passes");
        // The old jobs end by pass 3 and nothing new lands on the ten reserved nodes.
        assert!(pass <= 3, "admitted at pass {pass}");
    }

    #[test]
    fn admitted_but_unbound_machines_keep_their_planned_nodes() {
        let cap = snapshot(vec![
            node("h-0", Some("h200"), 8, 0),
            node("h-1", Some("h200"), 8, 0),
        ]);
        let held = earlier_h200_machine(vec!["h-0".into()]);
        let queue = [job("next", 0, 1, vec![pool("m", Some("h200"), 1, 8)])];
        let plan = plan_admissions(&queue, &cap, &[held], &[]);
        assert_eq!(
            nodes_of(&plan, "next"),
            ["h-1"],
            "h-0 is planned for the earlier job"
        );
    }

    /// Deterministic xorshift for the property tests.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn insufficient_gpu_is_only_said_when_too_few_nodes_have_the_free_gpus() {
        // Random partly-busy fleets and queues; at most one pool per series per job, so "too few
        // nodes" is a plain count. After applying the plan's admissions (what the next snapshot
        // shows), every job waiting with InsufficientGpu must see fewer nodes of its series with
        // the free GPUs than it needs, and every GPU job waiting with InsufficientCpu/Memory must see
        // enough of them (GPUs were not what it lacked).
        let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
        let series = ["h200", "l40s", "a10g"];
        let mut checked = 0;
        for round in 0..200 {
            let (gpu_nodes, cpu_nodes) = (4 + rng.below(12), rng.below(3));
            let mut nodes: Vec<NodeCapacity> = (0..gpu_nodes)
                .map(|i| {
                    let s = series[rng.below(3) as usize];
                    let mut n = sized(&format!("n-{i}"), Some(s), 8, 64.0, 512.0);
                    n.gpus_used = rng.below(9) as u32;
                    n.cpus_used = rng.below(65) as f64;
                    n.memory_gb_used = rng.below(513) as f64;
                    n.cordoned = rng.below(10) == 0;
                    n
                })
                .collect();
            nodes.extend((0..cpu_nodes).map(|i| sized(&format!("c-{i}"), None, 0, 32.0, 128.0)));
            let queue: Vec<JobRecord> = (0..(1 + rng.below(12)))
                .map(|i| {
                    let s = series[rng.below(3) as usize];
                    let g = [1, 2, 4, 8][rng.below(4) as usize];
                    let pools = if rng.below(6) == 0 {
                        vec![cpu_pool(
                            1.0 + rng.below(40) as f64,
                            1.0 + rng.below(100) as f64,
                        )]
                    } else {
                        vec![gpu_pool(s, 1 + rng.below(3) as u32, g)]
                    };
                    job(
                        &format!("r{round}-{i}"),
                        rng.below(3) as i32,
                        i as i64,
                        pools,
                    )
                })
                .collect();
            let mut cap = snapshot(nodes);
            let plan = plan_admissions(&queue, &cap, &[], &[]);
            apply(&mut cap, &queue, &plan);
            for w in &plan.waiting {
                let Some(job) = queue.iter().find(|j| j.id == w.job_id) else {
                    continue;
                };
                let p = &job.spec.pools[0];
                let Some(s) = p.series.as_deref() else {
                    continue;
                };
                let with_gpus = cap
                    .nodes
                    .iter()
                    .filter(|n| n.series.as_deref() == Some(s) && n.free_gpus() >= p.gpus_per_node)
                    .count() as u32;
                match w.reason {
                    PendingReason::InsufficientGpu => {
                        checked += 1;
                        assert!(
                            with_gpus < p.nodes,
                            "{}: {} ({with_gpus} nodes have the GPUs)",
                            w.job_id,
                            w.message
                        );
                    }
                    PendingReason::InsufficientCpu | PendingReason::InsufficientMemory => {
                        assert!(with_gpus >= p.nodes, "{}: {}", w.job_id, w.message);
                    }
                    _ => {}
                }
            }
        }
        assert!(
            checked > 50,
            "only {checked} InsufficientGpu cases were generated"
        );
    }

    // ---------------------------------------------------------------------------------------------
    // Tenants: fair share, quotas, borrowing.

    fn of(tenant: &str, mut j: JobRecord) -> JobRecord {
        j.tenant = tenant.into();
        j
    }

    fn holding(tenant: &str, id: &str, gpus: u32) -> JobRecord {
        let mut j = of(
            tenant,
            job(id, 0, 0, vec![pool("main", Some("h200"), 1, gpus)]),
        );
        j.state = JobState::Running;
        j
    }

    fn h200_job(tenant: &str, id: &str, submitted: i64) -> JobRecord {
        of(
            tenant,
            job(id, 0, submitted, vec![pool("main", Some("h200"), 1, 8)]),
        )
    }

    fn h200_quota(tenant: &str, gpus: u32, borrow: bool) -> TenantQuota {
        let mut q = TenantQuota::unlimited(tenant);
        q.set_gpu_limit("h200", gpus, borrow);
        q
    }

    /// `n` h200 nodes of 8 GPUs; `used[i]` GPUs taken on node i.
    fn h200_fleet(used: &[u32]) -> CapacitySnapshot {
        snapshot(
            used.iter()
                .enumerate()
                .map(|(i, u)| node(&format!("h200-{i}"), Some("h200"), 8, *u))
                .collect(),
        )
    }

    #[test]
    fn a_tenant_holding_nothing_is_served_before_one_with_a_hundred_jobs_queued_earlier() {
        // Tenant a runs on h200-0 and queued 100 jobs first; b queued one later; one node is free.
        let mut queue = vec![holding("a", "a-running", 8)];
        queue.extend((0..100).map(|i| h200_job("a", &format!("a-{i:03}"), 10 + i)));
        queue.push(h200_job("b", "b-0", 1_000));
        let plan = plan_admissions(&queue, &h200_fleet(&[8, 0]), &[], &[]);
        assert_eq!(admitted(&plan), ["b-0"], "the next opening goes to b");
        assert_eq!(reason(&plan, "a-000"), Some(PendingReason::InsufficientGpu));
        assert_eq!(plan.waiting.len(), 100);
    }

    #[test]
    fn tenants_with_equal_shares_take_turns_in_submission_order() {
        let queue = vec![
            h200_job("a", "a-1", 1),
            h200_job("a", "a-2", 2),
            h200_job("a", "a-3", 3),
            h200_job("b", "b-1", 10),
            h200_job("b", "b-2", 11),
        ];
        let plan = plan_admissions(&queue, &h200_fleet(&[0, 0, 0, 0]), &[], &[]);
        assert_eq!(admitted(&plan), ["a-1", "b-1", "a-2", "b-2"]);
        // A single tenant keeps plain priority-then-submission order.
        let one: Vec<JobRecord> = vec![
            h200_job("a", "late", 5),
            of(
                "a",
                job("urgent", 9, 6, vec![pool("main", Some("h200"), 1, 8)]),
            ),
            h200_job("a", "early", 1),
        ];
        let plan = plan_admissions(&one, &h200_fleet(&[0, 0]), &[], &[]);
        assert_eq!(admitted(&plan), ["urgent", "early"]);
    }

    #[test]
    fn weights_scale_the_share() {
        // a holds 16 of 32 GPUs at weight 4 (share 0.125); b holds 8 at weight 1 (share 0.25).
        let mut queue = vec![
            holding("a", "a-r1", 8),
            holding("a", "a-r2", 8),
            holding("b", "b-r1", 8),
        ];
        queue.push(h200_job("b", "b-next", 1));
        queue.push(h200_job("a", "a-next", 2));
        let mut a = TenantQuota::unlimited("a");
        a.weight = 4.0;
        let plan = plan_admissions(&queue, &h200_fleet(&[8, 8, 8, 0]), &[], &[a]);
        assert_eq!(admitted(&plan), ["a-next"]);
        // Without the weight, b (holding less) goes first.
        let plan = plan_admissions(&queue, &h200_fleet(&[8, 8, 8, 0]), &[], &[]);
        assert_eq!(admitted(&plan), ["b-next"]);
    }

    #[test]
    fn a_hard_quota_holds_the_tenants_further_jobs_with_quota_exceeded_and_reserves_nothing() {
        // a holds 8 of its 16: of two more 8-GPU jobs one fits the quota, the other waits for it.
        let queue = vec![
            holding("a", "a-run", 8),
            h200_job("a", "a-1", 1),
            h200_job("a", "a-2", 2),
        ];
        let quotas = [h200_quota("a", 16, false)];
        let plan = plan_admissions(&queue, &h200_fleet(&[8, 0, 0]), &[], &quotas);
        assert_eq!(admitted(&plan), ["a-1"]);
        assert_eq!(reason(&plan, "a-2"), Some(PendingReason::QuotaExceeded));
        assert_eq!(
            message(&plan, "a-2"),
            "tenant a uses 16 of 16 h200 GPUs; this job needs 8"
        );
        // A held job reserves nothing: a (lower share) is considered first and held by its quota,
        // and b's later job still gets the one free node.
        let queue = vec![
            holding("a", "a-run", 8),
            holding("b", "b-run-1", 8),
            holding("b", "b-run-2", 8),
            h200_job("a", "a-1", 1),
            h200_job("b", "b-1", 2),
        ];
        let plan = plan_admissions(
            &queue,
            &h200_fleet(&[8, 8, 8, 0]),
            &[],
            &[h200_quota("a", 8, false)],
        );
        assert_eq!(admitted(&plan), ["b-1"]);
        assert_eq!(reason(&plan, "a-1"), Some(PendingReason::QuotaExceeded));
    }

    #[test]
    fn borrowing_uses_idle_nodes_only_after_jobs_within_quota() {
        // a's quota is 8 and it holds 8: its next job borrows. b (no quota) queued later.
        let queue = vec![
            holding("a", "a-run", 8),
            h200_job("a", "a-borrow-1", 1),
            h200_job("a", "a-borrow-2", 2),
            h200_job("b", "b-1", 10),
        ];
        let quotas = [h200_quota("a", 8, true)];
        // Two free nodes: b's job first, then one borrowed job.
        let plan = plan_admissions(&queue, &h200_fleet(&[8, 0, 0]), &[], &quotas);
        assert_eq!(admitted(&plan), ["b-1", "a-borrow-1"]);
        assert_eq!(
            reason(&plan, "a-borrow-2"),
            Some(PendingReason::QuotaExceeded)
        );
        assert!(
            message(&plan, "a-borrow-2").starts_with(
                "tenant a uses 16 of 8 h200 GPUs; this job needs 8; it may borrow only"
            ),
            "{}",
            message(&plan, "a-borrow-2")
        );
        // Without b, a borrows both idle nodes.
        let alone: Vec<JobRecord> = queue[..3].to_vec();
        let plan = plan_admissions(&alone, &h200_fleet(&[8, 0, 0]), &[], &quotas);
        assert_eq!(admitted(&plan), ["a-borrow-1", "a-borrow-2"]);
        // A hard quota never borrows.
        let plan = plan_admissions(
            &alone,
            &h200_fleet(&[8, 0, 0]),
            &[],
            &[h200_quota("a", 8, false)],
        );
        assert!(plan.admit.is_empty());
    }

    #[test]
    fn a_waiting_tenant_within_quota_keeps_its_nodes_from_borrowers() {
        // a holds 16 (8 of them borrowed) and queued another borrowing job; b waits for two whole
        // nodes, and only one is free: b reserves it, so a's borrower may not take it.
        let queue = vec![
            holding("a", "a-run-1", 8),
            holding("a", "a-run-2", 8),
            h200_job("a", "a-borrow", 1),
            of(
                "b",
                job("b-2x8", 0, 5, vec![pool("main", Some("h200"), 2, 8)]),
            ),
        ];
        let plan = plan_admissions(
            &queue,
            &h200_fleet(&[8, 8, 0, 4]),
            &[],
            &[h200_quota("a", 8, true)],
        );
        assert!(plan.admit.is_empty(), "{:?}", admitted(&plan));
        assert_eq!(
            reason(&plan, "a-borrow"),
            Some(PendingReason::QuotaExceeded)
        );
        assert_eq!(reason(&plan, "b-2x8"), Some(PendingReason::InsufficientGpu));
    }

    #[test]
    fn cpu_limits_hold_cpu_only_jobs() {
        let cpu_job = |tenant: &str, id: &str, t: i64| {
            let mut p = pool("main", None, 1, 0);
            p["cpus"] = serde_json::json!(8.0);
            p["memory_gb"] = serde_json::json!(16.0);
            of(tenant, job(id, 0, t, vec![p]))
        };
        let queue = vec![cpu_job("a", "c-1", 1), cpu_job("a", "c-2", 2)];
        let mut q = TenantQuota::unlimited("a");
        q.cpu = Some(quota::CpuLimit {
            cpus: Some(12.0),
            memory_gb: None,
            borrow: false,
        });
        let fleet = snapshot(vec![node("cpu-0", None, 0, 0)]);
        let plan = plan_admissions(&queue, &fleet, &[], &[q]);
        assert_eq!(admitted(&plan), ["c-1"]);
        assert_eq!(
            message(&plan, "c-2"),
            "tenant a uses 8 of 12 CPUs for CPU-only jobs; this job needs 8"
        );
    }
}
