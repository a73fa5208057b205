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
//!    GPU by default), so CPU work never makes free GPUs unusable.
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
    /// Pool name.
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
            pass_holders: Vec::new(),
        };
        let max_gpus = capacity.nodes.iter().map(|n| n.gpus).max().unwrap_or(0) as usize;
        let scope = || Scope {
            nodes: Vec::new(),
            open_hist: vec![0; max_gpus + 1],
            all_hist: vec![0; max_gpus + 1],
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
            p.scopes[CPU_SCOPE].nodes.push(i);
            p.scopes[CPU_SCOPE].open += 1;
            if let Some(s) = s {
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
        for &i in &self.scopes[scope].nodes {
            if (view == View::Open && self.reserved[i].is_some()) || self.marked(i) {
                continue;
            }
            let r = self.room(i, &self.free[i], shape);
            if r.gpus < shape.gpus {
                continue;
            }
            counts.gpus += 1;
            if r.cpus + EPS < shape.cpus {
                continue;
            }
            counts.gpus_cpus += 1;
            if r.memory_gb + EPS < shape.memory_gb {
                continue;
            }
            counts.all += 1;
            fitting.push(i);
            if limit.is_some_and(|l| counts.all >= l) {
                break;
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
        let key = |i: usize| {
            let r = self.room(i, &self.free[i], shape);
            (shape.cpu_only && self.gpu_node[i], r.gpus, r.cpus)
        };
        let order = |a: &usize, b: &usize| {
            let (ka, kb) = (key(*a), key(*b));
            ka.0.cmp(&kb.0)
                .then(ka.1.cmp(&kb.1))
                .then(ka.2.total_cmp(&kb.2))
                .then(a.cmp(b))
        };
        candidates.select_nth_unstable_by(count as usize - 1, order);
        candidates.truncate(count as usize);
        candidates.sort_unstable_by(order);
        Ok(candidates)
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
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by_key(|i| std::cmp::Reverse(pools[*i].gpus_per_node));
        self.begin();
        let mut taken_any = false;
        let mut undo: Vec<(usize, Free)> = Vec::new();
        let mut placed: Vec<Vec<usize>> = vec![Vec::new(); pools.len()];
        for i in order {
            let pool = &pools[i];
            let shape = Shape::of(pool);
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
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by_key(|i| std::cmp::Reverse(pools[*i].gpus_per_node));
        for i in order {
            let pool = &pools[i];
            let shape = Shape::of(pool);
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
    /// whose idle size fits, closest to fitting now first. All or nothing.
    fn reserve(&mut self, pools: &[Pool], owner: usize) -> bool {
        self.begin();
        let mut chosen_all: Vec<usize> = Vec::new();
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by_key(|i| std::cmp::Reverse(pools[*i].gpus_per_node));
        for i in order {
            let pool = &pools[i];
            let shape = Shape::of(pool);
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
            let mut candidates: Vec<usize> = self.scopes[scope]
                .nodes
                .iter()
                .copied()
                .filter(|&n| {
                    self.reserved[n].is_none()
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
            // Closest to fitting now: most free GPUs, then CPUs (as the machine sees them);
            // CPU-only machines keep to CPU nodes when they can.
            let key = |n: usize| {
                let r = self.room(n, &self.free[n], &shape);
                (
                    shape.cpu_only && self.gpu_node[n],
                    std::cmp::Reverse(r.gpus),
                    r.cpus,
                )
            };
            let order = |a: &usize, b: &usize| {
                let (ka, kb) = (key(*a), key(*b));
                ka.0.cmp(&kb.0)
                    .then(ka.1.cmp(&kb.1))
                    .then(kb.2.total_cmp(&ka.2))
                    .then(a.cmp(b))
            };
            let want = pool.nodes as usize;
            if want > 0 && want < candidates.len() {
                candidates.select_nth_unstable_by(want - 1, order);
                candidates.truncate(want);
            }
            candidates.sort_unstable_by(order);
            for n in candidates.into_iter().take(pool.nodes as usize) {
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
            (
                reason,
                resource,
                short.to_owned(),
                format!(
                    "pool {}: needs {} node(s) with {}, {} available (GPU nodes keep {} CPUs and {} GiB per free GPU for GPU jobs)",
                    p.name,
                    p.nodes,
                    describe(p),
                    c.all,
                    trim(planner.share.cpus),
                    trim(planner.share.memory_gb)
                ),
            )
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
                if self.behind_messages.len() <= k {
                    self.behind_messages.resize(k + 1, None);
                }
                let message = self.behind_messages[k]
                    .get_or_insert_with(|| {
                        let who = o.map_or_else(
                            || "earlier jobs".to_owned(),
                            |o| format!("job {}", planner.owners[o]),
                        );
                        Arc::from(format!(
                            "waiting behind {who} (served first by priority, submission order or fair share), which holds the nodes this job would use until they drain"
                        ))
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
#[path = "admission_tests.rs"]
mod tests;
