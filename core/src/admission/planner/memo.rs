//! Failures remembered per scope and view: placing a shape × machines failed, so every shape
//! that covers it with at least as many machines fails too, without a scan.

use super::{Counts, Planner, Scope, Shape, View};

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
pub(super) const MAX_FAILURES: usize = 48;

impl Planner<'_> {
    /// A remembered failure that `shape` × `machines` covers, if any.
    pub(super) fn known_failure(
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

    pub(super) fn remember(
        &mut self,
        scope: usize,
        view: View,
        shape: Shape,
        machines: u32,
        counts: Counts,
    ) {
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
}
