//! Preemption planning: which running jobs stop so that a waiting job gets what it is owed
//! (docs/design.md §8, "Preemption"). Pure: the reconciler runs it after [`super::plan_admissions`]
//! on the same snapshot, and carries it out (a notice on each victim, the waiting job admitted onto
//! the victims' nodes).
//!
//! A waiting job may preempt by one of two rules, tried in this order:
//!
//! 1. **Reclaim.** Its tenant is within its quota for every GPU series the job needs (a limit
//!    is a guarantee as well as a cap), and the job waits for GPUs, CPU or memory. Victims are
//!    jobs of other tenants that hold more of the series than their own limit (none: 0), never so
//!    many that such a tenant drops below its limit.
//! 2. **Priority.** Victims are its own tenant's jobs of lower priority, when the job waits for
//!    nodes or for its tenant's quota: enough of them that it then fits within the quota and on
//!    nodes.
//!
//! Either way only whole, running, preemptible jobs that ran at least
//! [`PreemptionRules::min_run_ms`] of their current attempt are victims, and only as many as make
//! the waiting job fit on concrete nodes of its series (each machine on its own node, as the
//! planner places them): among the sets that fit, the one that loses the least work, GPUs ×
//! seconds since each victim's newest complete checkpoint (since its attempt began running when it
//! has none), then the fewest victims, the lowest priorities, the most recently started
//! ([`search`]). Playgrounds neither preempt nor are preempted.

mod search;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use crate::capacity::{CapacitySnapshot, GpuShare};
use crate::job::{JobRecord, JobState, PendingReason, PoolPlacement};
use crate::preemption::{PreemptNotice, PreemptionRule};
use crate::quota::TenantQuota;
use crate::spec::Pool;

use super::{AdmissionPlan, Reservation};

/// The settings preemption runs with.
#[derive(Debug, Clone, Copy)]
pub struct PreemptionRules {
    /// The decision's time (Unix ms).
    pub now_ms: i64,
    /// A job is preempted only after its current attempt ran this long
    /// (`TUNEPLANE_PREEMPTION_MIN_RUN_SECONDS`).
    pub min_run_ms: i64,
    /// Most waiting jobs that preempt in one pass.
    pub max_per_pass: usize,
    /// Most fit checks one waiting job's exact search may spend; past it the best set found so
    /// far is taken (always one that fits).
    pub search_budget: usize,
}

impl PreemptionRules {
    /// The default minimum run time: ten minutes (README, "Sharing the fleet", says why).
    pub const DEFAULT_MIN_RUN_SECONDS: u64 = 600;

    /// Rules at `now_ms` with the defaults.
    pub fn at(now_ms: i64) -> PreemptionRules {
        PreemptionRules {
            now_ms,
            min_run_ms: i64::try_from(Self::DEFAULT_MIN_RUN_SECONDS * 1000).unwrap_or(i64::MAX),
            max_per_pass: 8,
            search_budget: 20_000,
        }
    }
}

/// A job's newest complete checkpoint, as the reconciler found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSeen {
    /// Its folder name.
    pub name: String,
    /// When its marker was written (Unix ms).
    pub completed_at_ms: i64,
}

/// One victim and what it is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    /// The job to stop.
    pub job_id: crate::ids::JobId,
    /// The notice written on its record.
    pub notice: PreemptNotice,
}

/// One waiting job admitted by preempting others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// The waiting job: admitted now onto `placements`.
    pub job_id: crate::ids::JobId,
    /// Why.
    pub rule: PreemptionRule,
    /// The jobs it stops.
    pub victims: Vec<Victim>,
    /// Where each of its pools goes (nodes the victims free, and free ones).
    pub placements: Vec<PoolPlacement>,
    /// GPU-seconds the victims lose at most (the choice's cost).
    pub lost_gpu_seconds: u64,
}

/// Reasons a waiting job may preempt for.
fn waits_for_room(reason: PendingReason) -> bool {
    matches!(
        reason,
        PendingReason::InsufficientGpu
            | PendingReason::InsufficientCpu
            | PendingReason::InsufficientMemory
    )
}

/// The running jobs preemption may stop now (preemptible, running long enough, not a
/// playground, no notice yet) that some waiting job of `plan` could take by a rule: jobs of
/// tenants above their limit of a series a waiting job within its own limit needs (reclaim), and
/// jobs of a waiting job's own tenant of lower priority (priority). Empty when no waiting job
/// could preempt at all, as in a fleet without quotas and priorities. The reconciler looks up only
/// these jobs' checkpoints.
pub fn preemption_candidates<'q>(
    queue: &'q [JobRecord],
    plan: &AdmissionPlan<'_>,
    quotas: &[TenantQuota],
    rules: &PreemptionRules,
) -> Vec<&'q JobRecord> {
    let waiting: HashMap<&str, PendingReason> = plan
        .waiting
        .iter()
        .filter(|w| waits_for_room(w.reason) || w.reason == PendingReason::QuotaExceeded)
        .map(|w| (w.job_id, w.reason))
        .collect();
    if waiting.is_empty() {
        return Vec::new();
    }
    // One walk over the queue: the waiting jobs, the possible victims, and (only with quotas)
    // what each tenant holds.
    let quota_of: HashMap<&str, &TenantQuota> =
        quotas.iter().map(|q| (q.tenant.as_str(), q)).collect();
    let mut held = Held::default();
    let mut eligible_jobs: Vec<&JobRecord> = Vec::new();
    let mut waiters: Vec<(&JobRecord, PendingReason)> = Vec::new();
    for j in queue {
        if !quotas.is_empty() && matches!(j.state, JobState::Admitted | JobState::Running) {
            held.add(j, 1);
        }
        if eligible(j, rules) {
            eligible_jobs.push(j);
        } else if let Some(reason) = waiting.get(j.id.as_str()) {
            waiters.push((j, *reason));
        }
    }
    if eligible_jobs.is_empty() {
        return Vec::new();
    }
    // Series some waiting job within its limit may reclaim; per tenant, the highest priority
    // that waits (its lower-priority jobs are candidates).
    let mut reclaim: HashSet<&str> = HashSet::new();
    let mut top: HashMap<&str, i32> = HashMap::new();
    for (job, reason) in waiters {
        if job.state != JobState::Queued || !job.claimant().preempts() || job.stop_requested {
            continue;
        }
        let needs = need(job);
        let within = !needs.is_empty()
            && needs.iter().all(|(s, g)| {
                limit(&quota_of, &job.tenant, s)
                    .is_some_and(|l| held.get(&job.tenant, s).saturating_add(*g) <= l)
            });
        if within && waits_for_room(reason) {
            reclaim.extend(needs.iter().map(|(s, _)| *s));
        }
        let p = top.entry(job.tenant.as_str()).or_insert(i32::MIN);
        *p = (*p).max(job.spec.priority);
    }
    eligible_jobs
        .into_iter()
        .filter(|c| {
            let by_priority = top
                .get(c.tenant.as_str())
                .is_some_and(|p| c.spec.priority < *p);
            let by_reclaim = c.spec.pools.iter().any(|p| {
                p.series.as_deref().is_some_and(|s| {
                    reclaim.contains(s)
                        && held.get(&c.tenant, s) > limit(&quota_of, &c.tenant, s).unwrap_or(0)
                })
            });
            by_priority || by_reclaim
        })
        .collect()
}

/// Whether `job` may be a victim now.
fn eligible(job: &JobRecord, rules: &PreemptionRules) -> bool {
    job.state == JobState::Running
        && job.spec.preemptible
        && job.preempt.is_none()
        && job.claimant().preempts()
        && job
            .running_at_ms
            .is_some_and(|r| rules.now_ms.saturating_sub(r) >= rules.min_run_ms)
}

/// Free resources of a node, or what a job holds on it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Room {
    pub(super) gpus: u32,
    pub(super) cpus: f64,
    pub(super) memory_gb: f64,
}

impl Room {
    pub(super) fn add(&mut self, o: &Room) {
        self.gpus = self.gpus.saturating_add(o.gpus);
        self.cpus += o.cpus;
        self.memory_gb += o.memory_gb;
    }

    fn take(&mut self, o: &Room) {
        self.gpus = self.gpus.saturating_sub(o.gpus);
        self.cpus = (self.cpus - o.cpus).max(0.0);
        self.memory_gb = (self.memory_gb - o.memory_gb).max(0.0);
    }

    fn of(pool: &Pool) -> Room {
        Room {
            gpus: pool.gpus_per_node,
            cpus: pool.cpus,
            memory_gb: pool.memory_gb,
        }
    }
}

const EPS: f64 = 1e-9;

/// The schedulable nodes with what is free on each after this pass's admissions.
pub(super) struct Nodes<'c> {
    pub(super) names: Vec<&'c str>,
    series: Vec<Option<&'c str>>,
    gpu_node: Vec<bool>,
    pub(super) free: Vec<Room>,
    share: GpuShare,
    index: HashMap<&'c str, usize>,
}

impl<'c> Nodes<'c> {
    pub(super) fn new(capacity: &'c CapacitySnapshot) -> Nodes<'c> {
        let mut n = Nodes {
            names: Vec::new(),
            series: Vec::new(),
            gpu_node: Vec::new(),
            free: Vec::new(),
            share: capacity.gpu_share,
            index: HashMap::new(),
        };
        for node in capacity.nodes.iter().filter(|n| n.schedulable()) {
            n.index.insert(node.name.as_str(), n.names.len());
            n.names.push(node.name.as_str());
            n.series.push(node.series.as_deref());
            n.gpu_node.push(node.gpus > 0);
            n.free.push(Room {
                gpus: node.free_gpus(),
                cpus: (node.cpus - node.cpus_used).max(0.0),
                memory_gb: (node.memory_gb - node.memory_gb_used).max(0.0),
            });
        }
        n
    }

    /// Takes what `pools` hold on the nodes of `placements`.
    fn take_placed(&mut self, pools: &[Pool], placements: &[PoolPlacement]) {
        for p in placements {
            let Some(pool) = pools.iter().find(|q| q.name == p.pool) else {
                continue;
            };
            for name in &p.nodes {
                if let Some(&i) = self.index.get(name.as_str()) {
                    self.free[i].take(&Room::of(pool));
                }
            }
        }
    }

    /// Whether a machine of `pool` fits `room` on node `i` (a CPU-only machine on a GPU node
    /// leaves each free GPU its share, as the planner does).
    pub(super) fn fits(&self, i: usize, room: &Room, pool: &Pool) -> bool {
        let (cpus, memory_gb) = if pool.series.is_none() && self.gpu_node[i] {
            self.share
                .cpu_job_room(room.gpus, room.cpus, room.memory_gb)
        } else {
            (room.cpus, room.memory_gb)
        };
        room.gpus >= pool.gpus_per_node
            && cpus + EPS >= pool.cpus
            && memory_gb + EPS >= pool.memory_gb
    }

    /// Whether node `i` may host a machine of `pool` at all (its series; any node for CPU-only
    /// machines).
    pub(super) fn in_scope(&self, i: usize, pool: &Pool) -> bool {
        match pool.series.as_deref() {
            Some(s) => self.series[i] == Some(s),
            None => true,
        }
    }

    /// Places every pool of a job on distinct nodes of `room` (largest machines first, each on
    /// the tightest node that fits; CPU-only machines on CPU nodes first), or `None`.
    pub(super) fn place(&self, pools: &[Pool], room: &[Room]) -> Option<Vec<PoolPlacement>> {
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by(|&a, &b| {
            let (p, q) = (&pools[a], &pools[b]);
            (q.gpus_per_node, q.cpus, q.memory_gb)
                .partial_cmp(&(p.gpus_per_node, p.cpus, p.memory_gb))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut used = vec![false; room.len()];
        let mut out: Vec<Option<PoolPlacement>> = vec![None; pools.len()];
        for k in order {
            let pool = &pools[k];
            let mut nodes = Vec::new();
            for _ in 0..pool.nodes {
                let best = (0..room.len())
                    .filter(|&i| !used[i] && self.in_scope(i, pool) && self.fits(i, &room[i], pool))
                    .min_by(|&a, &b| {
                        let key = |i: usize| (self.gpu_node[i], room[i].gpus, room[i].cpus);
                        key(a)
                            .partial_cmp(&key(b))
                            .unwrap_or(std::cmp::Ordering::Equal)
                    })?;
                used[best] = true;
                nodes.push(self.names[best].to_owned());
            }
            out[k] = Some(PoolPlacement {
                pool: pool.name.clone(),
                nodes,
            });
        }
        out.into_iter().collect()
    }
}

/// A possible victim: the job, what it holds per node, and what stopping it costs.
pub(super) struct Candidate<'q> {
    pub(super) job: &'q JobRecord,
    /// Node index and what the job's pods hold there.
    pub(super) held: Vec<(usize, Room)>,
    /// GPUs of the job per series.
    pub(super) gpus: Vec<(&'q str, u32)>,
    /// GPUs × lost seconds.
    pub(super) cost: u64,
    pub(super) lost_seconds: u64,
    pub(super) weight: u32,
    pub(super) checkpoint: Option<String>,
}

impl<'q> Candidate<'q> {
    fn new(
        job: &'q JobRecord,
        held: Vec<(usize, Room)>,
        checkpoint: Option<&CheckpointSeen>,
        now_ms: i64,
    ) -> Candidate<'q> {
        let mut gpus: Vec<(&str, u32)> = Vec::new();
        let mut weight = 0_u32;
        for p in &job.spec.pools {
            let g = p.nodes.saturating_mul(p.gpus_per_node);
            // A CPU-only machine weighs as one GPU: stopping it loses work too.
            weight = weight.saturating_add(if p.series.is_some() { g } else { p.nodes });
            if let Some(s) = p.series.as_deref() {
                match gpus.iter_mut().find(|(n, _)| *n == s) {
                    Some((_, n)) => *n = n.saturating_add(g),
                    None => gpus.push((s, g)),
                }
            }
        }
        let started = job.running_at_ms.unwrap_or(now_ms);
        // A checkpoint older than this attempt's start was resumed from: the attempt's own work
        // began at its start.
        let since = checkpoint.map_or(started, |c| c.completed_at_ms.max(started));
        let name = checkpoint.map(|c| c.name.clone());
        let lost_seconds = u64::try_from(now_ms.saturating_sub(since).max(0) / 1000).unwrap_or(0);
        Candidate {
            job,
            held,
            gpus,
            cost: lost_seconds.saturating_mul(u64::from(weight)),
            lost_seconds,
            weight,
            checkpoint: name,
        }
    }

    pub(super) fn gpus_of(&self, series: &str) -> u32 {
        self.gpus
            .iter()
            .find(|(s, _)| *s == series)
            .map_or(0, |(_, g)| *g)
    }
}

/// What each tenant holds through the active (admitted, running) jobs and this pass's
/// admissions: GPUs per series, and the CPUs and memory of CPU-only jobs (what CPU limits cap).
#[derive(Default)]
struct Held<'q> {
    gpus: HashMap<(&'q str, &'q str), u32>,
    cpu_only: HashMap<&'q str, (f64, f64)>,
}

impl<'q> Held<'q> {
    fn add(&mut self, job: &'q JobRecord, sign: i64) {
        for p in &job.spec.pools {
            let Some(s) = p.series.as_deref() else {
                continue;
            };
            let g = i64::from(p.nodes.saturating_mul(p.gpus_per_node));
            let e = self.gpus.entry((job.tenant.as_str(), s)).or_insert(0);
            *e = u32::try_from((i64::from(*e) + sign * g).max(0)).unwrap_or(u32::MAX);
        }
        if job.spec.is_cpu_only() {
            let (cpus, memory) = cpu_only_need(job);
            let f = if sign < 0 { -1.0 } else { 1.0 };
            let e = self
                .cpu_only
                .entry(job.tenant.as_str())
                .or_insert((0.0, 0.0));
            e.0 = (e.0 + f * cpus).max(0.0);
            e.1 = (e.1 + f * memory).max(0.0);
        }
    }

    fn get(&self, tenant: &str, series: &str) -> u32 {
        self.gpus.get(&(tenant, series)).copied().unwrap_or(0)
    }

    fn cpu_only(&self, tenant: &str) -> (f64, f64) {
        self.cpu_only.get(tenant).copied().unwrap_or((0.0, 0.0))
    }
}

/// CPUs and memory (GiB) of a CPU-only job's machines.
fn cpu_only_need(job: &JobRecord) -> (f64, f64) {
    job.spec.pools.iter().fold((0.0, 0.0), |(c, m), p| {
        let n = f64::from(p.nodes);
        (c + n * p.cpus, m + n * p.memory_gb)
    })
}

/// Whether `tenant`, holding `held` of CPU-only work, may add `want` under `quota`'s CPU limits.
fn cpu_within(quota: Option<&&TenantQuota>, held: (f64, f64), want: (f64, f64)) -> bool {
    let Some(limit) = quota.and_then(|q| q.cpu.as_ref()) else {
        return true;
    };
    limit.cpus.is_none_or(|l| held.0 + want.0 <= l + EPS)
        && limit.memory_gb.is_none_or(|l| held.1 + want.1 <= l + EPS)
}

/// GPUs a job needs per series.
fn need(job: &JobRecord) -> Vec<(&str, u32)> {
    let mut out: Vec<(&str, u32)> = Vec::new();
    for p in &job.spec.pools {
        if let Some(s) = p.series.as_deref() {
            let g = p.nodes.saturating_mul(p.gpus_per_node);
            match out.iter_mut().find(|(n, _)| *n == s) {
                Some((_, n)) => *n = n.saturating_add(g),
                None => out.push((s, g)),
            }
        }
    }
    out
}

fn limit(quotas: &HashMap<&str, &TenantQuota>, tenant: &str, series: &str) -> Option<u32> {
    quotas
        .get(tenant)
        .and_then(|q| q.gpu_limit(series))
        .map(|l| l.gpus)
}

/// Plans preemptions after `plan` (made by [`super::plan_admissions`] from the same `queue`,
/// `capacity`, `reservations` and `quotas`): for waiting jobs in the plan's order, at most
/// `rules.max_per_pass` of them, the victims each one needs and where it then goes.
/// `checkpoints` gives a job's newest complete checkpoint (`None`: it has none).
pub fn plan_preemptions(
    queue: &[JobRecord],
    capacity: &CapacitySnapshot,
    reservations: &[Reservation],
    quotas: &[TenantQuota],
    plan: &AdmissionPlan<'_>,
    checkpoints: &dyn Fn(&JobRecord) -> Option<CheckpointSeen>,
    rules: &PreemptionRules,
) -> Vec<Preemption> {
    let mut out = Vec::new();
    let candidates = preemption_candidates(queue, plan, quotas, rules);
    if candidates.is_empty() {
        return out;
    }
    let by_id: HashMap<&str, &JobRecord> = queue.iter().map(|j| (j.id.as_str(), j)).collect();

    // What is free after this pass: reservations of admitted-but-unbound machines and this
    // pass's admissions taken.
    let mut nodes = Nodes::new(capacity);
    for r in reservations {
        let room = Room {
            gpus: r.gpus,
            cpus: r.cpus,
            memory_gb: r.memory_gb,
        };
        for name in r.nodes.iter().take(r.machines as usize) {
            if let Some(&i) = nodes.index.get(name.as_str()) {
                nodes.free[i].take(&room);
            }
        }
    }
    let mut held = Held::default();
    for j in queue
        .iter()
        .filter(|j| matches!(j.state, JobState::Admitted | JobState::Running))
    {
        held.add(j, 1);
    }
    for a in &plan.admit {
        if let Some(j) = by_id.get(a.job_id.as_str()) {
            nodes.take_placed(&j.spec.pools, &a.placements);
            held.add(j, 1);
        }
    }

    // What each candidate's pods hold, node by node (the snapshot's holders are its live pods).
    let wanted: HashSet<&str> = candidates.iter().map(|j| j.id.as_str()).collect();
    let mut holdings: HashMap<&str, Vec<(usize, Room)>> = HashMap::new();
    for node in capacity.nodes.iter().filter(|n| n.schedulable()) {
        let Some(&i) = nodes.index.get(node.name.as_str()) else {
            continue;
        };
        for h in &node.holders {
            if let Some(id) = wanted.get(h.job_id.as_str()) {
                holdings.entry(id).or_default().push((
                    i,
                    Room {
                        gpus: h.gpus,
                        cpus: h.cpus,
                        memory_gb: h.memory_gb,
                    },
                ));
            }
        }
    }
    let pool: Vec<Candidate> = candidates
        .into_iter()
        .filter_map(|j| {
            let h = holdings.remove(j.id.as_str())?;
            Some(Candidate::new(j, h, checkpoints(j).as_ref(), rules.now_ms))
        })
        .collect();
    let quota_of: HashMap<&str, &TenantQuota> =
        quotas.iter().map(|q| (q.tenant.as_str(), q)).collect();
    let mut taken: HashSet<crate::ids::JobId> = HashSet::new();

    for w in &plan.waiting {
        if out.len() >= rules.max_per_pass {
            break;
        }
        let Some(job) = by_id.get(w.job_id).copied() else {
            continue;
        };
        if job.state != JobState::Queued || !job.claimant().preempts() || job.stop_requested {
            continue;
        }
        let needs = need(job);
        let mut found = None;
        // 1. Reclaim: the tenant is within its limit of every series the job needs.
        let within = !needs.is_empty()
            && needs.iter().all(|(s, g)| {
                limit(&quota_of, &job.tenant, s)
                    .is_some_and(|l| held.get(&job.tenant, s).saturating_add(*g) <= l)
            });
        if within && waits_for_room(w.reason) {
            let cands: Vec<usize> = (0..pool.len())
                .filter(|&k| {
                    let c = &pool[k];
                    !taken.contains(&c.job.id)
                        && c.job.tenant != job.tenant
                        && needs.iter().any(|(s, _)| {
                            c.gpus_of(s) > 0
                                && held.get(&c.job.tenant, s)
                                    > limit(&quota_of, &c.job.tenant, s).unwrap_or(0)
                        })
                })
                .collect();
            let allowed = |set: &[usize]| {
                // No tenant is taken below its own limit in a series the job needs.
                let mut by_tenant: HashMap<(&str, &str), u32> = HashMap::new();
                for &k in set {
                    let c = &pool[k];
                    for (s, _) in &needs {
                        *by_tenant.entry((c.job.tenant.as_str(), s)).or_insert(0) += c.gpus_of(s);
                    }
                }
                by_tenant.iter().all(|((t, s), g)| {
                    let h = held.get(t, s);
                    let l = limit(&quota_of, t, s).unwrap_or(0);
                    h >= l && *g <= h - l
                })
            };
            found = search::cheapest(&nodes, job, &pool, &cands, &allowed, &|_| true, rules)
                .map(|(set, placements)| (PreemptionRule::Reclaim, set, placements));
        }
        // 2. Priority: the tenant's own jobs of lower priority.
        if found.is_none() && (waits_for_room(w.reason) || w.reason == PendingReason::QuotaExceeded)
        {
            let cands: Vec<usize> = (0..pool.len())
                .filter(|&k| {
                    let c = &pool[k];
                    !taken.contains(&c.job.id)
                        && c.job.tenant == job.tenant
                        && c.job.spec.priority < job.spec.priority
                })
                .collect();
            // Within the tenant's limits once the victims are gone: GPUs per series, and the
            // CPU limits when the job is CPU-only.
            let quota_ok = |set: &[usize]| {
                // A borrowing tenant may swap its own work for work of a higher priority but
                // never hold more above its limit than it does now.
                let gpus_ok = needs.iter().all(|(s, g)| {
                    let Some(l) = quota_of
                        .get(job.tenant.as_str())
                        .and_then(|q| q.gpu_limit(s))
                    else {
                        return true;
                    };
                    let freed: u32 = set.iter().map(|&k| pool[k].gpus_of(s)).sum();
                    let now = held.get(&job.tenant, s);
                    let after = now.saturating_sub(freed).saturating_add(*g);
                    after <= l.gpus || (l.borrow && after <= now)
                });
                if !gpus_ok || !job.spec.is_cpu_only() {
                    return gpus_ok;
                }
                let (mut cpus, mut memory) = held.cpu_only(&job.tenant);
                for &k in set {
                    if pool[k].job.spec.is_cpu_only() {
                        let (c, m) = cpu_only_need(pool[k].job);
                        cpus -= c;
                        memory -= m;
                    }
                }
                cpu_within(
                    quota_of.get(job.tenant.as_str()),
                    (cpus.max(0.0), memory.max(0.0)),
                    cpu_only_need(job),
                )
            };
            found = search::cheapest(&nodes, job, &pool, &cands, &|_| true, &quota_ok, rules)
                .map(|(set, placements)| (PreemptionRule::Priority, set, placements));
        }
        let Some((rule, set, placements)) = found else {
            continue;
        };
        // Carry it out on the pass's books: the victims' resources go back, the job's are taken.
        let mut victims = Vec::new();
        let mut lost = 0_u64;
        for &k in &set {
            let c = &pool[k];
            for (i, r) in &c.held {
                nodes.free[*i].add(r);
            }
            held.add(c.job, -1);
            taken.insert(c.job.id.clone());
            lost = lost.saturating_add(c.cost);
            let series = needs
                .iter()
                .find(|(s, _)| c.gpus_of(s) > 0)
                .map(|(s, _)| (*s).to_owned());
            victims.push(Victim {
                job_id: c.job.id.clone(),
                notice: PreemptNotice {
                    rule,
                    at_ms: rules.now_ms,
                    attempt: c.job.attempt,
                    lost_seconds: c.lost_seconds,
                    gpus: c.weight,
                    checkpoint: c.checkpoint.clone(),
                    series,
                },
            });
        }
        nodes.take_placed(&job.spec.pools, &placements);
        held.add(job, 1);
        out.push(Preemption {
            job_id: job.id.clone(),
            rule,
            victims,
            placements,
            lost_gpu_seconds: lost,
        });
    }
    out
}
