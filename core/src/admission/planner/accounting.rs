//! Node accounting: what a machine may use of a node, taking and restoring resources with the
//! scopes' histograms and buckets kept current, reserving nodes, and what admitted jobs hold.

use super::super::Reservation;
use super::super::fasthash::FastMap;
use super::search::total_order_bits;
use super::{CPU_SCOPE, EPS, Free, Planner, Shape, View};

impl Planner<'_> {
    /// What a machine of `shape` may use of `f` on node `i`.
    pub(super) fn room(&self, i: usize, f: &Free, shape: &Shape) -> Free {
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
    pub(in crate::admission) fn fits_cpu_node(&self, shape: &Shape) -> bool {
        self.cpu_node_sizes
            .iter()
            .any(|&(c, m)| c + EPS >= shape.cpus && m + EPS >= shape.memory_gb)
    }

    pub(in crate::admission) fn fits(&self, i: usize, f: &Free, shape: &Shape) -> bool {
        let r = self.room(i, f, shape);
        r.gpus >= shape.gpus && r.cpus + EPS >= shape.cpus && r.memory_gb + EPS >= shape.memory_gb
    }

    /// Takes `shape` from node `i`, keeping the histograms current.
    pub(in crate::admission) fn take(&mut self, i: usize, shape: &Shape) {
        self.scopes[CPU_SCOPE].fits_all.clear();
        if let Some(s) = self.series_scope[i] {
            self.scopes[s].fits_all.clear();
        }
        let old = self.free[i];
        let f = &mut self.free[i];
        f.gpus = f.gpus.saturating_sub(shape.gpus);
        f.cpus = (f.cpus - shape.cpus).max(0.0);
        f.memory_gb = (f.memory_gb - shape.memory_gb).max(0.0);
        let after = f.gpus;
        self.rehist(i, old.gpus, after);
        self.refile_cpu_open(i, &old);
    }

    pub(super) fn restore(&mut self, i: usize, to: Free) {
        let old = self.free[i];
        self.free[i] = to;
        self.rehist(i, old.gpus, to.gpus);
        self.refile_cpu_open(i, &old);
    }

    /// Keeps an open GPU node's place in `cpu_open` current after its free resources changed
    /// from `old`.
    fn refile_cpu_open(&mut self, i: usize, old: &Free) {
        let new = self.free[i];
        if !self.gpu_node[i] || self.reserved[i].is_some() {
            return;
        }
        let (was, is) = (total_order_bits(old.cpus), total_order_bits(new.cpus));
        if old.gpus == new.gpus && was == is {
            return;
        }
        self.cpu_open[old.gpus as usize].remove(&(was, i));
        self.cpu_open[new.gpus as usize].insert((is, i));
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
            rebucket(&mut sc.by_free, &mut self.slot, i, before, after);
            if open {
                rebucket(&mut sc.open_by_free, &mut self.open_slot, i, before, after);
            }
        }
    }

    pub(super) fn reserve_node(&mut self, i: usize, owner: usize) {
        if self.reserved[i].is_none() {
            // `cpu_open` and `open_by_free` hold open nodes only.
            let gpus = self.free[i].gpus;
            if self.gpu_node[i] {
                let key = (total_order_bits(self.free[i].cpus), i);
                self.cpu_open[gpus as usize].remove(&key);
            }
            if let Some(s) = self.series_scope[i] {
                unbucket(
                    &mut self.scopes[s].open_by_free,
                    &mut self.open_slot,
                    i,
                    gpus,
                );
            }
        }
        self.reserved[i] = Some(owner);
        self.scopes[CPU_SCOPE].open -= 1;
        if let Some(s) = self.series_scope[i] {
            self.scopes[s].open_hist[self.free[i].gpus as usize] -= 1;
            self.scopes[s].open -= 1;
        }
    }

    /// Records that `job` holds `shape` on node `i` (admitted in this pass, or admitted and not
    /// bound yet), for the "held by" of later messages. A scope's text is built once per pass,
    /// when a message first needs it (rebuilding it after every admission cost a third of a long
    /// pass); jobs admitted after that are named from the next pass on.
    pub(in crate::admission) fn hold(&mut self, i: usize, job: &str, shape: Shape) {
        self.pass_holders.push((i, job.to_owned(), shape));
    }
}

/// Moves node `i` from the `by_free` bucket of `before` free GPUs to that of `after`, keeping the
/// positions in `slot` current (a swap-remove: no bucket is shifted).
fn rebucket(by_free: &mut [Vec<usize>], slot: &mut [usize], i: usize, before: u32, after: u32) {
    unbucket(by_free, slot, i, before);
    let to = &mut by_free[after as usize];
    slot[i] = to.len();
    to.push(i);
}

/// Takes node `i` out of the `by_free` bucket of `gpus` free GPUs (a swap-remove, the moved
/// node's position updated).
fn unbucket(by_free: &mut [Vec<usize>], slot: &mut [usize], i: usize, gpus: u32) {
    let from = &mut by_free[gpus as usize];
    let at = slot[i];
    from.swap_remove(at);
    if let Some(&moved) = from.get(at) {
        slot[moved] = at;
    }
}

/// Takes the resources of admitted-but-unbound machines from their planned nodes (or, for jobs
/// admitted without a recorded plan, from the best-fitting nodes).
pub(in crate::admission) fn hold_reservations(planner: &mut Planner, reservations: &[Reservation]) {
    let index: FastMap<&str, usize> = planner
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
