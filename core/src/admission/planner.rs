//! The planner: free resources per node over one pass, placing machines on distinct nodes,
//! reserving the nodes a waiting job would use, and remembering failures so a long queue is
//! answered without scanning nodes again.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::capacity::{CapacitySnapshot, GpuShare};
use crate::quantity::plain;
use crate::spec::Pool;

use super::Reservation;

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

/// When a scan of a scope stops.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Once this many nodes fit (first fit: any will do).
    FirstFit(u32),
    /// Once this many nodes fit and no node left can rank before them by best fit (a series'
    /// bucket of fewer free GPUs is done); every node of the CPU scope is visited.
    Best(u32),
}

/// A remembered failure: placing `shape` × `machines` failed in this scope and view, so every
/// shape that covers it with at least as many machines fails too.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    pub(super) shape: Shape,
    pub(super) machines: u32,
    pub(super) counts: Counts,
}

/// Failures remembered per scope and view; bounded, so a queue of endless distinct shapes costs
/// a scan per job rather than a growing list.
const MAX_FAILURES: usize = 48;

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
pub(super) struct Planner<'c> {
    capacity: &'c CapacitySnapshot,
    /// Index into `capacity.nodes` of each schedulable node.
    cap_index: Vec<usize>,
    /// Position of each node of a series in its scope's `by_free` bucket.
    slot: Vec<usize>,
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
    pub(super) fn fits_cpu_node(&self, shape: &Shape) -> bool {
        self.cpu_node_sizes
            .iter()
            .any(|&(c, m)| c + EPS >= shape.cpus && m + EPS >= shape.memory_gb)
    }

    pub(super) fn fits(&self, i: usize, f: &Free, shape: &Shape) -> bool {
        let r = self.room(i, f, shape);
        r.gpus >= shape.gpus && r.cpus + EPS >= shape.cpus && r.memory_gb + EPS >= shape.memory_gb
    }

    /// Takes `shape` from node `i`, keeping the histograms current.
    pub(super) fn take(&mut self, i: usize, shape: &Shape) {
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
    /// fit onto `fitting`; stops as `stop` says. The one scan behind every placement question.
    fn scan(
        &self,
        scope: usize,
        shape: &Shape,
        view: View,
        stop: Stop,
        fitting: &mut Vec<usize>,
    ) -> Counts {
        let limit = match stop {
            Stop::FirstFit(l) => Some(l),
            Stop::Best(_) => None,
        };
        let mut counts = Counts::default();
        let sc = &self.scopes[scope];
        // Returns true once `limit` nodes fit.
        let visit = |i: usize, counts: &mut Counts, fitting: &mut Vec<usize>| -> bool {
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
                if visit(i, &mut counts, fitting) {
                    break;
                }
            }
        } else {
            // A series only through the buckets of nodes with enough free GPUs: a nearly full
            // series is not walked node by node for every waiting job.
            let from = (shape.gpus as usize).min(sc.by_free.len());
            'buckets: for bucket in &sc.by_free[from..] {
                for &i in bucket {
                    if visit(i, &mut counts, fitting) {
                        break 'buckets;
                    }
                }
                // Buckets go up in free GPUs, which is what best fit ranks first: once `best`
                // nodes fit, no node of a later bucket can be among the best.
                if let Stop::Best(best) = stop
                    && counts.all >= best
                {
                    break;
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
        let counts = self.scan(scope, shape, view, Stop::Best(count), &mut candidates);
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
    pub(super) fn fits_unreserved<'p>(
        &mut self,
        pools: &'p [Pool],
    ) -> Result<Option<usize>, Misfit<'p>> {
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
            let counts = self.scan(
                scope,
                &shape,
                View::All,
                Stop::FirstFit(machines),
                &mut fitting,
            );
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
            let counts = self.scan(scope, &shape, view, Stop::FirstFit(pool.nodes), &mut taken);
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
    pub(super) fn place<'p>(
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
    pub(super) fn never_fits<'p>(&mut self, pools: &'p [Pool]) -> Option<Misfit<'p>> {
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
    pub(super) fn reserve(&mut self, pools: &[Pool], owner: usize) -> bool {
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
                // Most GPUs first: u32::MAX - gpus orders as Reverse(gpus).
                (false, u32::MAX - r.gpus, -r.cpus)
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
    pub(super) fn hold(&mut self, i: usize, job: &str, shape: Shape) {
        self.pass_holders.push((i, job.to_owned(), shape));
    }

    pub(super) fn holders(&mut self, scope: usize, resource: usize) -> String {
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
            let _ = write!(text, "{sep}{job} ({} {unit})", plain(*amount));
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
/// (a flag, then a count, then a number by `f64::total_cmp`), ties broken by node index, in that
/// order. Each key is computed once and packed into integers that order the same way, so the
/// selection compares plain numbers (comparing through the key closure was a fifth of a long pass).
fn best_nodes(
    candidates: Vec<usize>,
    count: usize,
    key: impl Fn(usize) -> (bool, u32, f64),
) -> Vec<usize> {
    let mut keyed: Vec<(u64, u64, usize)> = candidates
        .into_iter()
        .map(|i| {
            let (flag, n, x) = key(i);
            (
                (u64::from(flag) << 32) | u64::from(n),
                total_order_bits(x),
                i,
            )
        })
        .collect();
    if count == 1 {
        // One node: the least key, no selection.
        return keyed.iter().min().map(|k| k.2).into_iter().collect();
    }
    if count < keyed.len() {
        if count > 0 {
            keyed.select_nth_unstable(count - 1);
        }
        keyed.truncate(count);
    }
    keyed.sort_unstable();
    keyed.into_iter().map(|k| k.2).collect()
}

/// `x`'s bits mapped so that unsigned comparison orders as `f64::total_cmp`.
fn total_order_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

/// Why a pool did not fit: the pool and how many nodes passed each test.
pub(super) struct Misfit<'a> {
    pub(super) pool: &'a Pool,
    pub(super) counts: Counts,
}

/// Takes the resources of admitted-but-unbound machines from their planned nodes (or, for jobs
/// admitted without a recorded plan, from the best-fitting nodes).
pub(super) fn hold_reservations(planner: &mut Planner, reservations: &[Reservation]) {
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
    use super::*;
    use crate::capacity::NodeCapacity;
    use proptest::prelude::*;

    /// What `best_nodes` must return: every candidate sorted by the key compared field by field
    /// (the number by `total_cmp`), then by index, and the first `count` kept.
    fn reference(
        mut candidates: Vec<usize>,
        count: usize,
        key: impl Fn(usize) -> (bool, u32, f64),
    ) -> Vec<usize> {
        candidates.sort_by(|a, b| {
            let (ka, kb) = (key(*a), key(*b));
            ka.0.cmp(&kb.0)
                .then(ka.1.cmp(&kb.1))
                .then(ka.2.total_cmp(&kb.2))
                .then(a.cmp(b))
        });
        candidates.truncate(count);
        candidates
    }

    /// A best-fit pick that stops after the bucket of free GPUs where enough nodes fit chooses
    /// exactly the nodes, in the order, that ranking every fitting node of the scope would.
    #[test]
    fn a_best_fit_pick_that_stops_early_chooses_what_a_whole_scan_would() {
        let mut seed = 0x2545_F491_4F6C_DD1D_u64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut picked = 0;
        for round in 0..300 {
            let nodes: Vec<NodeCapacity> = (0..40)
                .map(|i| NodeCapacity {
                    name: format!("n{i:02}"),
                    series: Some(["a", "b"][rnd(2) as usize].into()),
                    gpus: 8,
                    gpus_capacity: 8,
                    gpus_used: rnd(9) as u32,
                    cpus: 64.0,
                    cpus_used: rnd(64) as f64,
                    memory_gb: 512.0,
                    memory_gb_used: rnd(512) as f64,
                    ready: true,
                    ..NodeCapacity::default()
                })
                .collect();
            let cap = CapacitySnapshot::from_nodes(0, nodes);
            let mut p = Planner::new(&cap);
            // Takes and reservations, so that free GPUs and the open view vary.
            for _ in 0..rnd(20) {
                let i = rnd(p.free.len() as u64) as usize;
                let taken = Shape {
                    gpus: rnd(4) as u32,
                    cpus: rnd(8) as f64,
                    memory_gb: rnd(64) as f64,
                    cpu_only: false,
                };
                p.take(i, &taken);
            }
            for _ in 0..rnd(6) {
                let i = rnd(p.free.len() as u64) as usize;
                if p.reserved[i].is_none() {
                    p.reserve_node(i, 0);
                }
            }
            let shape = Shape {
                gpus: 1 + rnd(8) as u32,
                cpus: rnd(40) as f64,
                memory_gb: rnd(300) as f64,
                cpu_only: false,
            };
            let count = 1 + rnd(6) as u32;
            for scope in 1..p.scopes.len() {
                for view in [View::Open, View::All] {
                    p.begin();
                    let got = p.pick(scope, &shape, count, view).ok();
                    let fitting: Vec<usize> = p.scopes[scope]
                        .nodes
                        .iter()
                        .copied()
                        .filter(|&i| !(view == View::Open && p.reserved[i].is_some()))
                        .filter(|&i| p.fits(i, &p.free[i], &shape))
                        .collect();
                    let want = (fitting.len() >= count as usize).then(|| {
                        reference(fitting, count as usize, |i| {
                            let r = p.room(i, &p.free[i], &shape);
                            (shape.cpu_only && p.gpu_node[i], r.gpus, r.cpus)
                        })
                    });
                    assert_eq!(got, want, "round {round}, scope {scope}, {view:?}");
                    picked += usize::from(got.is_some());
                }
            }
        }
        assert!(
            picked > 100,
            "only {picked} picks found nodes: the check says little"
        );
    }

    proptest! {
        #[test]
        fn total_order_bits_order_as_total_cmp(a in any::<f64>(), b in any::<f64>()) {
            prop_assert_eq!(total_order_bits(a).cmp(&total_order_bits(b)), a.total_cmp(&b));
        }

        /// Packed keys choose the same nodes in the same order as comparing the keys themselves,
        /// ties (many nodes share a key) included.
        #[test]
        fn best_nodes_choose_as_the_plain_comparison(
            keys in prop::collection::vec((any::<bool>(), 0u32..4, prop::sample::select(vec![-8.0, -0.0, 0.0, 0.5, 4.0, 96.0, f64::INFINITY])), 0..60),
            count in 0usize..70,
        ) {
            let key = |i: usize| keys[i];
            let candidates: Vec<usize> = (0..keys.len()).rev().collect();
            prop_assert_eq!(
                best_nodes(candidates.clone(), count, key),
                reference(candidates, count, key)
            );
        }
    }
}
