//! The placement search: one scan behind every question (first fit or best fit over a scope's
//! nodes), placing a job's pools on distinct nodes, and reserving the nodes a waiting job would
//! use so that later, smaller jobs do not take them.

use super::memo::MAX_FAILURES;
use super::{CPU_SCOPE, Counts, EPS, Free, Planner, Shape, View};
use crate::spec::Pool;

/// When a scan of a scope stops.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Once this many nodes fit (first fit: any will do).
    FirstFit(u32),
    /// Once this many nodes fit and no node left can rank before them by best fit (a series'
    /// bucket of fewer free GPUs is done); every node of the CPU scope is visited.
    Best(u32),
}

impl Planner<'_> {
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
        match stop {
            Stop::Best(best) if scope == CPU_SCOPE && view == View::Open => {
                // Open nodes: best fit ranks CPU nodes, then GPU nodes by fewest free GPUs, then
                // by fewest CPUs left to the machine, which grow with the node's free CPUs (the
                // order of `cpu_open`). Once `best` nodes fit, a node with more CPUs left than
                // every fitting one so far, and every node after it, cannot be among the best.
                // Every open node is visited when fewer fit, so the counts of a misfit are whole.
                for &i in &sc.nodes[..self.cpu_nodes] {
                    visit(i, &mut counts, fitting);
                }
                let cpus_left = |i: usize| self.room(i, &self.free[i], shape).cpus;
                let mut most = f64::NEG_INFINITY;
                'open: for bucket in &self.cpu_open {
                    if counts.all >= best {
                        break;
                    }
                    for &(_, i) in bucket {
                        if counts.all >= best && cpus_left(i) > most {
                            break 'open;
                        }
                        if visit(i, &mut counts, fitting) {
                            break 'open;
                        }
                        if fitting.last() == Some(&i) {
                            most = most.max(cpus_left(i));
                        }
                    }
                }
            }
            _ if scope == CPU_SCOPE => {
                // Every node, CPU nodes first: for first fit, which nodes fit first decides the
                // answer; the buckets hold open nodes only, so best fit over every node walks
                // them all.
                for &i in &sc.nodes {
                    if visit(i, &mut counts, fitting) {
                        break;
                    }
                }
            }
            _ => {
                // A series only through the buckets of nodes with enough free GPUs: a nearly full
                // series is not walked node by node for every waiting job.
                // Best fit of open nodes walks the open buckets, past no reserved node (it
                // ranks what it finds: the order within a bucket does not matter to it, as it
                // does to first fit).
                let buckets = match (view, stop) {
                    (View::Open, Stop::Best(_)) => &sc.open_by_free,
                    _ => &sc.by_free,
                };
                let from = (shape.gpus as usize).min(buckets.len());
                'buckets: for bucket in &buckets[from..] {
                    if limit.is_none() {
                        // Best fit keeps every fitting node: room for the bucket at once.
                        fitting.reserve(bucket.len());
                    }
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
        }
        counts
    }

    /// Picks `count` distinct nodes of `scope` (not marked taken) for machines of `shape`, best fit
    /// first (fewest free GPUs, then fewest free CPUs; CPU nodes before GPU nodes for CPU-only
    /// machines) to keep large blocks whole.
    pub(super) fn pick(
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
    pub(in crate::admission) fn fits_unreserved<'p>(
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
    pub(in crate::admission) fn place<'p>(
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
    pub(in crate::admission) fn never_fits<'p>(&mut self, pools: &'p [Pool]) -> Option<Misfit<'p>> {
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

    /// The nodes of `scope` a reservation for `count` machines of `shape` chooses among: open,
    /// not marked taken, and large enough when idle. Enough of them that the `count` closest to
    /// fitting now (most free GPUs first) are among them, or every such node when fewer fit.
    /// A scope is not walked node by node for every waiting job: CPU-only machines reserve CPU
    /// nodes only, which lead the CPU scope; a series is walked by its open buckets of free GPUs, most
    /// first, up to the bucket where enough nodes fit.
    pub(super) fn reserve_candidates(&self, scope: usize, shape: &Shape, count: u32) -> Vec<usize> {
        let ok = |n: usize| {
            self.reserved[n].is_none() && !self.marked(n) && self.fits(n, &self.idle[n], shape)
        };
        let sc = &self.scopes[scope];
        if scope == CPU_SCOPE {
            return sc.nodes[..self.cpu_nodes]
                .iter()
                .copied()
                .filter(|&n| ok(n))
                .collect();
        }
        let mut candidates = Vec::new();
        for bucket in sc.open_by_free.iter().rev() {
            // Room for the whole bucket at once: growing by doubling was a twentieth of a pass.
            candidates.reserve(bucket.len());
            candidates.extend(bucket.iter().copied().filter(|&n| ok(n)));
            if candidates.len() >= count as usize {
                break;
            }
        }
        candidates
    }

    /// Reserves for `owner` the nodes `pools` would use once they drain: per pool, open nodes
    /// whose idle size fits, closest to fitting now first. All or nothing. A CPU-only machine
    /// reserves CPU nodes only: a reservation on a GPU node would keep its free GPUs from the GPU
    /// jobs behind it while the CPU job waits for CPU that GPU jobs go first for.
    pub(in crate::admission) fn reserve(&mut self, pools: &[Pool], owner: usize) -> bool {
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
            let candidates = self.reserve_candidates(scope, &shape, pool.nodes);
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
}

/// The pools with their index and machine shape, largest machines (most GPUs per node) first,
/// ties in pool order.
pub(super) fn largest_first(pools: &[Pool]) -> impl Iterator<Item = (usize, &Pool, Shape)> {
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
pub(super) fn best_nodes(
    candidates: Vec<usize>,
    count: usize,
    key: impl Fn(usize) -> (bool, u32, f64),
) -> Vec<usize> {
    let packed = |i: usize| {
        let (flag, n, x) = key(i);
        (
            (u64::from(flag) << 32) | u64::from(n),
            total_order_bits(x),
            i,
        )
    };
    if count <= FEW {
        return least_few(&candidates, count, packed);
    }
    let mut keyed: Vec<(u64, u64, usize)> = candidates.into_iter().map(packed).collect();
    if count < keyed.len() {
        keyed.select_nth_unstable(count - 1);
        keyed.truncate(count);
    }
    keyed.sort_unstable();
    keyed.into_iter().map(|k| k.2).collect()
}

/// Up to this many nodes [`best_nodes`] keeps in one pass ([`least_few`]).
const FEW: usize = 16;

/// The `count` least packed keys of `candidates`, in order, by one pass that keeps them sorted:
/// most placements and reservations want a few nodes of hundreds, and keying every candidate
/// into a vector and selecting among them was a fifth of a long pass.
fn least_few(
    candidates: &[usize],
    count: usize,
    packed: impl Fn(usize) -> (u64, u64, usize),
) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    let mut top: Vec<(u64, u64, usize)> = Vec::with_capacity(count + 1);
    for &i in candidates {
        let k = packed(i);
        if top.len() == count {
            if k >= top[count - 1] {
                continue;
            }
            top.pop();
        }
        let at = top.partition_point(|t| *t < k);
        top.insert(at, k);
    }
    top.into_iter().map(|k| k.2).collect()
}

/// `x`'s bits mapped so that unsigned comparison orders as `f64::total_cmp`.
pub(in crate::admission) fn total_order_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

/// Why a pool did not fit: the pool and how many nodes passed each test.
pub(in crate::admission) struct Misfit<'a> {
    pub(in crate::admission) pool: &'a Pool,
    pub(in crate::admission) counts: Counts,
}
