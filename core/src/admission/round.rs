//! One planning round: admit a job where it fits now, or record why it waits and reserve the
//! nodes it would use once they drain.

use std::sync::Arc;

use crate::claimant::Claimant;
use crate::job::{JobRecord, PendingReason};
use crate::quota::{Over, OverKey};

use super::fasthash::FastMap;
use super::planner::{Planner, Shape, View};
use super::reasons::{self, ShortKey, shortage};
use super::{Admission, AdmissionPlan, PoolPlacement, Waiting};

/// One planning round: the planner, the plan being built and the message caches.
pub(super) struct Round<'c, 'q> {
    pub(super) planner: Planner<'c>,
    pub(super) plan: AdmissionPlan<'q>,
    behind_messages: Vec<Option<Arc<str>>>,
    spill_behind_messages: Vec<Option<Arc<str>>>,
    short_messages: FastMap<ShortKey<'q>, (PendingReason, Arc<str>)>,
    /// Quota messages, formatted once per tenant and limit state (a long queue of one tenant
    /// waits for the same reason).
    quota_messages: FastMap<(usize, Claimant, reasons::QuotaWait, OverKey<'q>), Arc<str>>,
}

impl<'c, 'q> Round<'c, 'q> {
    /// A round over `planner` for a queue of about `queued` jobs.
    pub(super) fn new(planner: Planner<'c>, queued: usize) -> Self {
        Round {
            planner,
            plan: AdmissionPlan {
                admit: Vec::new(),
                waiting: Vec::with_capacity(queued),
            },
            behind_messages: Vec::new(),
            spill_behind_messages: Vec::new(),
            short_messages: FastMap::default(),
            quota_messages: FastMap::default(),
        }
    }

    /// Records that `job` of tenant `t` waits on its quota (`over`); `borrowing`: it was
    /// considered as a borrower and found no idle capacity.
    pub(super) fn held_by_quota(
        &mut self,
        t: usize,
        job: &'q JobRecord,
        over: Over<'q>,
        wait: reasons::QuotaWait,
    ) {
        let kind = job.claimant();
        let message = self
            .quota_messages
            .entry((t, kind, wait, over.key()))
            .or_insert_with(|| reasons::quota(&over, &job.tenant, kind, wait).into())
            .clone();
        self.wait(job, PendingReason::QuotaExceeded, message);
    }

    /// Places `job` on open nodes and admits it if every pool fits now.
    pub(super) fn try_admit(&mut self, job: &'q JobRecord) -> bool {
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
            kind: job.claimant(),
            placements,
        });
        true
    }

    fn wait(&mut self, job: &'q JobRecord, reason: PendingReason, message: Arc<str>) {
        self.plan.waiting.push(Waiting {
            job_id: &job.id,
            kind: job.claimant(),
            reason,
            message,
        });
    }

    /// Admits `job` if it fits now; otherwise records why it waits and reserves the nodes it
    /// would use once they drain. Returns whether it was admitted.
    pub(super) fn consider(&mut self, job: &'q JobRecord) -> bool {
        if self.try_admit(job) {
            return true;
        }
        let pools = &job.spec.pools;
        let planner = &mut self.planner;
        if let Some(m) = planner.never_fits(pools) {
            self.wait(
                job,
                PendingReason::NoMatchingNode,
                reasons::never_fits(&m).into(),
            );
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
                        Arc::from(reasons::behind(&who, spill))
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
            planner.owners.push(String::from(&job.id));
        }
        false
    }
}
