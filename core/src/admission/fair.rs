//! Fair share and quotas during a pass: what each tenant holds, its weighted dominant share
//! (the turn order of [`super::order`]'s rule 1) and where a job stands against its quota.

use std::collections::HashMap;

use crate::capacity::CapacitySnapshot;
use crate::job::JobRecord;
use crate::quota::{self, Demand, TenantQuota, Verdict};
use crate::spec::JobSpec;

use super::order::Sorted;
use super::planner::Planner;

/// Per tenant during a round: its quota, what it holds, its queued jobs and its share.
pub(super) struct Tenant<'q> {
    pub(super) quota: Option<&'q TenantQuota>,
    weight: f64,
    held: Demand,
    /// With a quota: the limit and the GPUs held, per series scope of the planner.
    limits: Vec<Option<quota::SeriesLimit>>,
    held_gpus: Vec<u32>,
    /// Weighted dominant share of `held`, recomputed when it changes.
    pub(super) share: f64,
    /// Indexes into the sorted queue keys: the next to consider, and the end of the tenant's run.
    pub(super) next: usize,
    pub(super) end: usize,
}

impl Tenant<'_> {
    /// Whether the tenant has queued jobs not considered yet.
    pub(super) fn waiting(&self) -> bool {
        self.next < self.end
    }
}

/// The tenants of `sorted` with their quotas (by the planner's series scopes), what their active
/// jobs hold and their shares.
pub(super) fn tenants<'a>(
    sorted: &Sorted,
    queue: &[JobRecord],
    planner: &Planner,
    quotas: &'a [TenantQuota],
    totals: &Totals,
) -> Vec<Tenant<'a>> {
    let quota_of: HashMap<&str, &TenantQuota> =
        quotas.iter().map(|q| (q.tenant.as_str(), q)).collect();
    let mut tenants: Vec<Tenant> = sorted
        .tenants
        .iter()
        .zip(&sorted.runs)
        .map(|(n, run)| {
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
                next: run.start,
                end: run.end,
            }
        })
        .collect();
    for &(t, k) in &sorted.holding {
        hold(&mut tenants[t], planner, &queue[k].spec, totals);
    }
    tenants
}

/// The tenant's weighted dominant share: its largest fraction of any resource of the fleet
/// (GPUs of each series, CPUs and memory of CPU-only jobs), divided by its weight.
pub(super) fn dominant_share(held: &Demand, weight: f64, totals: &Totals) -> f64 {
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
pub(super) fn hold(tenant: &mut Tenant, planner: &Planner, spec: &JobSpec, totals: &Totals) {
    tenant.held.add_spec(spec);
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
pub(super) fn quota_verdict<'s>(
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
pub(super) struct Totals<'c> {
    gpus: HashMap<&'c str, u32>,
    cpus: f64,
    memory_gb: f64,
}

impl<'c> Totals<'c> {
    pub(super) fn of(capacity: &'c CapacitySnapshot) -> Self {
        Totals {
            gpus: capacity
                .series
                .iter()
                .map(|(s, c)| (s.as_str(), c.total_gpus))
                .collect(),
            cpus: capacity.cpu.total_cpus,
            memory_gb: capacity.cpu.total_memory_gb,
        }
    }
}
