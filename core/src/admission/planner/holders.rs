//! The "held by" text of a misfit's message: who holds the GPUs, CPUs or memory of a scope.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{CPU_SCOPE, Planner};
use crate::quantity::plain;

impl Planner<'_> {
    /// "held by j-a (16 GPUs), j-b (8 GPUs)" for the nodes of `scope`, by `resource`
    /// (0 GPUs, 1 CPUs, 2 memory); empty when nobody holds any.
    pub(in crate::admission) fn holders(&mut self, scope: usize, resource: usize) -> String {
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
