//! The victim search: the set of candidates whose stop makes a waiting job fit at the least lost
//! work.
//!
//! A set is ranked by [`Key`]: GPU-seconds lost, then the fewest victims, the lowest priorities,
//! the most recently started. The search first builds a set greedily (cheapest candidates until
//! the job fits, then drops every victim the fit does not need), then, when there are at most
//! [`EXACT_UP_TO`] candidates, runs a branch and bound over every subset seeded with it: a branch
//! ends as soon as its set fits (adding victims only costs more), costs at least the best set, or
//! could not fit even with every remaining candidate. The bound spends at most
//! `search_budget` fit checks; past it the best set so far stands. With more candidates the
//! greedy set is taken (`BENCHMARKS.md` measures both).

use std::cmp::Reverse;

use crate::job::{JobRecord, PoolPlacement};

use super::{Candidate, Nodes, PreemptionRules, Room};

/// Most candidates the exact search ranks every subset of.
pub(super) const EXACT_UP_TO: usize = 24;

/// The rank of a set of victims: lower is better.
pub(super) type Key = (u64, usize, i64, Reverse<i64>);

/// The rank of `set` (indexes into `pool`).
pub(super) fn key(pool: &[Candidate], set: &[usize]) -> Key {
    let mut k: Key = (0, set.len(), 0, Reverse(0));
    for &i in set {
        let c = &pool[i];
        k.0 = k.0.saturating_add(c.cost);
        k.2 = k.2.saturating_add(i64::from(c.job.spec.priority));
        k.3 = Reverse(k.3.0.saturating_add(c.job.running_at_ms.unwrap_or(0)));
    }
    k
}

/// Fit checks against the nodes as they would be without a set of victims.
pub(super) struct Fit<'a, 'q, 'c> {
    nodes: &'a Nodes<'c>,
    job: &'q JobRecord,
    pool: &'a [Candidate<'q>],
    /// Scratch: free room per node with the set's holdings given back.
    room: Vec<Room>,
    pub(super) checks: usize,
}

impl<'a, 'q, 'c> Fit<'a, 'q, 'c> {
    pub(super) fn new(nodes: &'a Nodes<'c>, job: &'q JobRecord, pool: &'a [Candidate<'q>]) -> Self {
        Fit {
            nodes,
            job,
            pool,
            room: Vec::with_capacity(nodes.free.len()),
            checks: 0,
        }
    }

    /// Where the job goes once `set` (and `more`) are gone, if it fits.
    pub(super) fn place(&mut self, set: &[usize], more: &[usize]) -> Option<Vec<PoolPlacement>> {
        self.checks += 1;
        self.room.clear();
        self.room.extend_from_slice(&self.nodes.free);
        for &k in set.iter().chain(more) {
            for (i, r) in &self.pool[k].held {
                self.room[*i].add(r);
            }
        }
        self.nodes.place(&self.job.spec.pools, &self.room)
    }
}

/// The cheapest set of `cands` (indexes into `pool`) whose stop makes `job` fit, and where it
/// then goes. `allowed` must hold for the set and for every subset of it (a limit adding victims
/// can only break); `enough` must hold for the set (a limit adding victims can only help).
pub(super) fn cheapest(
    nodes: &Nodes,
    job: &JobRecord,
    pool: &[Candidate],
    cands: &[usize],
    allowed: &dyn Fn(&[usize]) -> bool,
    enough: &dyn Fn(&[usize]) -> bool,
    rules: &PreemptionRules,
) -> Option<(Vec<usize>, Vec<PoolPlacement>)> {
    // Only candidates holding something on a node one of the job's pools may use.
    let mut cands: Vec<usize> = cands
        .iter()
        .copied()
        .filter(|&k| {
            pool[k]
                .held
                .iter()
                .any(|(i, _)| job.spec.pools.iter().any(|p| nodes.in_scope(*i, p)))
        })
        .collect();
    if cands.is_empty() {
        return None;
    }
    cands.sort_by_key(|&k| {
        let c = &pool[k];
        (
            c.cost,
            c.job.spec.priority,
            Reverse(c.job.running_at_ms.unwrap_or(0)),
            c.job.id.as_str(),
        )
    });
    let mut fit = Fit::new(nodes, job, pool);
    // Not even every candidate together (limits aside) makes room: nothing to search.
    if !enough(&cands) || fit.place(&cands, &[]).is_none() {
        return None;
    }

    // Greedy, node by node first: the nodes whose own victims free a machine's room most
    // cheaply, taken in that order until the job fits; then, if a limit still wants more,
    // cheapest candidates first. Then drop what the fit does not need.
    let mut best: Option<(Key, Vec<usize>, Vec<PoolPlacement>)> = None;
    let mut set: Vec<usize> = Vec::new();
    let mut chosen = vec![false; pool.len()];
    for victims in by_node(nodes, job, pool, &cands) {
        let added: Vec<usize> = victims.into_iter().filter(|&k| !chosen[k]).collect();
        set.extend_from_slice(&added);
        if !allowed(&set) {
            set.truncate(set.len() - added.len());
            continue;
        }
        for &k in &added {
            chosen[k] = true;
        }
        if enough(&set)
            && let Some(placed) = fit.place(&set, &[])
        {
            best = Some((key(pool, &set), set.clone(), placed));
            break;
        }
    }
    if best.is_none() {
        for &k in &cands {
            if chosen[k] {
                continue;
            }
            set.push(k);
            if !allowed(&set) {
                set.pop();
                continue;
            }
            chosen[k] = true;
            if enough(&set)
                && let Some(placed) = fit.place(&set, &[])
            {
                best = Some((key(pool, &set), set.clone(), placed));
                break;
            }
        }
    }
    if let Some((_, chosen, _)) = best.clone() {
        let mut set = chosen;
        for at in (0..set.len()).rev() {
            let k = set.remove(at);
            match enough(&set).then(|| fit.place(&set, &[])).flatten() {
                Some(placed) if !set.is_empty() => {
                    best = Some((key(pool, &set), set.clone(), placed))
                }
                _ => set.insert(at, k),
            }
        }
    }

    if cands.len() <= EXACT_UP_TO {
        let mut bb = Bound {
            fit,
            pool,
            cands: &cands,
            allowed,
            enough,
            budget: rules.search_budget,
            best,
        };
        let mut set = Vec::new();
        bb.dfs(0, &mut set);
        best = bb.best;
    }
    best.map(|(_, set, placed)| (set, placed))
}

/// Per in-scope node where the job's largest machine does not fit yet, the cheapest victims
/// holding on it (of `cands`, in cost order) whose stop makes that machine fit there, cheapest
/// node first. Nodes where no set of its victims is enough are left out.
fn by_node(nodes: &Nodes, job: &JobRecord, pool: &[Candidate], cands: &[usize]) -> Vec<Vec<usize>> {
    let Some(largest) = job.spec.pools.iter().max_by(|a, b| {
        (a.gpus_per_node, a.cpus, a.memory_gb)
            .partial_cmp(&(b.gpus_per_node, b.cpus, b.memory_gb))
            .unwrap_or(std::cmp::Ordering::Equal)
    }) else {
        return Vec::new();
    };
    // `cands` is in cost order: so is each node's list.
    let mut on: std::collections::HashMap<usize, Vec<usize>> = std::collections::HashMap::new();
    for &k in cands {
        for (i, _) in &pool[k].held {
            if nodes.in_scope(*i, largest) {
                on.entry(*i).or_default().push(k);
            }
        }
    }
    let mut found: Vec<(u64, usize, Vec<usize>)> = Vec::new();
    for (i, ks) in on {
        let mut room = nodes.free[i];
        let mut cost = 0_u64;
        let mut taken = Vec::new();
        for k in ks {
            if nodes.fits(i, &room, largest) {
                break;
            }
            for (j, r) in &pool[k].held {
                if *j == i {
                    room.add(r);
                }
            }
            cost = cost.saturating_add(pool[k].cost);
            taken.push(k);
        }
        if !taken.is_empty() && nodes.fits(i, &room, largest) {
            found.push((cost, i, taken));
        }
    }
    found.sort_by_key(|(cost, i, taken)| (*cost, taken.len(), *i));
    found.into_iter().map(|(_, _, taken)| taken).collect()
}

struct Bound<'a, 'q, 'c> {
    fit: Fit<'a, 'q, 'c>,
    pool: &'a [Candidate<'q>],
    cands: &'a [usize],
    allowed: &'a dyn Fn(&[usize]) -> bool,
    enough: &'a dyn Fn(&[usize]) -> bool,
    budget: usize,
    best: Option<(Key, Vec<usize>, Vec<PoolPlacement>)>,
}

impl Bound<'_, '_, '_> {
    fn dfs(&mut self, at: usize, set: &mut Vec<usize>) {
        if self.fit.checks >= self.budget {
            return;
        }
        if !set.is_empty()
            && (self.enough)(set)
            && let Some(placed) = self.fit.place(set, &[])
        {
            let k = key(self.pool, set);
            if self.best.as_ref().is_none_or(|(b, ..)| k < *b) {
                self.best = Some((k, set.clone(), placed));
            }
            return;
        }
        if at == self.cands.len() {
            return;
        }
        // Any larger set costs at least this much and has one more victim.
        let here = key(self.pool, set);
        if let Some((b, ..)) = &self.best
            && (here.0, here.1 + 1) > (b.0, b.1)
        {
            return;
        }
        // Could it fit with every candidate still to decide?
        let rest = &self.cands[at..];
        let mut all = set.clone();
        all.extend_from_slice(rest);
        if !(self.enough)(&all) || self.fit.place(set, rest).is_none() {
            return;
        }
        let k = self.cands[at];
        set.push(k);
        if (self.allowed)(set) {
            self.dfs(at + 1, set);
        }
        set.pop();
        self.dfs(at + 1, set);
    }
}
