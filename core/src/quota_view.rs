//! One tenant's quota next to what it uses and what the fleet has: the body of `GET /v1/quota`,
//! what `tuneplane quota` prints and what the console's capacity page shows under "Your team".
//!
//! Built from the tenant's stored [`TenantQuota`] (none = unlimited) and the capacity snapshot the
//! reconciler publishes (its `tenants` entry of this tenant, its series totals). Only the caller's
//! own entry is ever read: nothing here exposes another tenant's usage.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::capacity::CapacitySnapshot;
use crate::quota::{TenantQuota, TenantUsage};

/// What `note` says when no snapshot was published yet.
pub const NO_SNAPSHOT_NOTE: &str = "no capacity snapshot yet: the reconciler has not published one, so usage and fleet figures read 0 until it does";

/// One GPU series: the tenant's limit, what it holds and waits for, and the fleet's totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesQuotaView {
    /// GPU series.
    pub series: String,
    /// Most GPUs of the series the tenant may have admitted at once; `None` = unlimited.
    pub gpus_limit: Option<u32>,
    /// Whether the tenant may go above the limit on capacity nobody else's queued jobs can use.
    pub borrow: bool,
    /// GPUs the tenant's admitted (unfinished) jobs hold.
    pub admitted_gpus: u32,
    /// GPUs the tenant's queued jobs ask for.
    pub queued_gpus: u32,
    /// GPUs of the series in the fleet (0 when the fleet has none).
    pub fleet_total_gpus: u32,
    /// Free GPUs of the series on schedulable nodes.
    pub fleet_free_gpus: u32,
}

/// CPU-only jobs: the tenant's limits and what it holds and waits for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuQuotaView {
    /// Most CPU cores of CPU-only jobs admitted at once; `None` = unlimited.
    pub cpus_limit: Option<f64>,
    /// Most memory (GiB) of CPU-only jobs admitted at once; `None` = unlimited.
    pub memory_gb_limit: Option<f64>,
    /// Whether the tenant may go above these limits on idle capacity.
    pub borrow: bool,
    /// CPU cores the tenant's admitted CPU-only jobs hold.
    pub admitted_cpus: f64,
    /// Memory (GiB) the tenant's admitted CPU-only jobs hold.
    pub admitted_memory_gb: f64,
    /// CPU cores the tenant's queued CPU-only jobs ask for.
    pub queued_cpus: f64,
    /// Memory (GiB) the tenant's queued CPU-only jobs ask for.
    pub queued_memory_gb: f64,
    /// Free CPU cores CPU-only jobs may use in the fleet.
    pub fleet_free_cpus: f64,
    /// Free memory (GiB) CPU-only jobs may use in the fleet.
    pub fleet_free_memory_gb: f64,
}

impl CpuQuotaView {
    /// True when the tenant has a CPU limit or CPU-only jobs (worth a line of output).
    pub fn is_relevant(&self) -> bool {
        self.cpus_limit.is_some()
            || self.memory_gb_limit.is_some()
            || self.admitted_cpus > 0.0
            || self.queued_cpus > 0.0
            || self.admitted_memory_gb > 0.0
            || self.queued_memory_gb > 0.0
    }
}

/// The caller's quota, usage and queued demand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaView {
    /// Tenant of the API key that asked.
    pub tenant: String,
    /// Fair-share weight (1 unless an operator set another).
    pub weight: f64,
    /// Every series in the fleet, in the quota or in the tenant's jobs, by name.
    pub series: Vec<SeriesQuotaView>,
    /// CPU-only jobs.
    pub cpu: CpuQuotaView,
    /// Admitted jobs that have not finished.
    pub admitted_jobs: u32,
    /// Jobs waiting to be admitted.
    pub queued_jobs: u32,
    /// When the snapshot the usage comes from was taken; `None` before the first one.
    pub taken_at_ms: Option<u64>,
    /// Why figures may be missing (no snapshot yet), else `None`.
    pub note: Option<String>,
}

/// The view of `tenant` from its stored quota (`None` = unlimited) and the latest snapshot
/// (`None` = not published yet). Reads only `tenant`'s entry of the snapshot's `tenants`.
pub fn quota_view(
    tenant: &crate::ids::TenantId,
    quota: Option<&TenantQuota>,
    snapshot: Option<&CapacitySnapshot>,
) -> QuotaView {
    let unlimited = TenantQuota::unlimited(tenant);
    let quota = quota.unwrap_or(&unlimited);
    let none = TenantUsage::default();
    let usage = snapshot
        .and_then(|s| s.tenants.get(tenant.as_str()))
        .unwrap_or(&none);
    let mut names: BTreeSet<&str> = quota.series.keys().map(String::as_str).collect();
    names.extend(usage.admitted.gpus.keys().map(String::as_str));
    names.extend(usage.queued.gpus.keys().map(String::as_str));
    if let Some(s) = snapshot {
        names.extend(s.series.keys().map(String::as_str));
    }
    let series = names
        .into_iter()
        .map(|name| {
            let limit = quota.series.get(name);
            let fleet = snapshot.and_then(|s| s.series.get(name));
            SeriesQuotaView {
                series: name.to_owned(),
                gpus_limit: limit.map(|l| l.gpus),
                borrow: limit.is_some_and(|l| l.borrow),
                admitted_gpus: usage.admitted.gpus.get(name).copied().unwrap_or(0),
                queued_gpus: usage.queued.gpus.get(name).copied().unwrap_or(0),
                fleet_total_gpus: fleet.map_or(0, |f| f.total_gpus),
                fleet_free_gpus: fleet.map_or(0, |f| f.free_gpus),
            }
        })
        .collect();
    let cpu_limit = quota.cpu.as_ref();
    let cpu = CpuQuotaView {
        cpus_limit: cpu_limit.and_then(|c| c.cpus),
        memory_gb_limit: cpu_limit.and_then(|c| c.memory_gb),
        borrow: cpu_limit.is_some_and(|c| c.borrow),
        admitted_cpus: usage.admitted.cpus,
        admitted_memory_gb: usage.admitted.memory_gb,
        queued_cpus: usage.queued.cpus,
        queued_memory_gb: usage.queued.memory_gb,
        fleet_free_cpus: snapshot.map_or(0.0, |s| s.cpu.free_cpus),
        fleet_free_memory_gb: snapshot.map_or(0.0, |s| s.cpu.free_memory_gb),
    };
    QuotaView {
        tenant: tenant.to_string(),
        weight: quota.weight,
        series,
        cpu,
        admitted_jobs: usage.admitted_jobs,
        queued_jobs: usage.queued_jobs,
        taken_at_ms: snapshot.map(|s| s.taken_at_ms),
        note: snapshot.is_none().then(|| NO_SNAPSHOT_NOTE.to_owned()),
    }
}

/// `12 of 16 GPUs admitted, 8 queued` or `12 GPUs admitted (unlimited), 8 queued`: one series
/// against its limit, for people.
pub fn describe_series(s: &SeriesQuotaView) -> String {
    let held = match s.gpus_limit {
        Some(limit) => format!(
            "{} of {limit} GPUs admitted{}",
            s.admitted_gpus,
            if s.borrow {
                " (may borrow idle GPUs)"
            } else {
                ""
            }
        ),
        None => format!("{} GPUs admitted (unlimited)", s.admitted_gpus),
    };
    format!("{held}, {} queued", s.queued_gpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{CapacitySnapshot, NodeCapacity};
    use crate::quota::{CpuLimit, Demand};

    fn snapshot() -> CapacitySnapshot {
        let node = |name: &str, series: &str, used: u32| {
            NodeCapacity::ready(name, Some(series), 8, 64.0, 512.0).with_gpus_used(used)
        };
        let mut s = CapacitySnapshot::from_nodes(
            7,
            vec![
                node("h-0", "h200", 8),
                node("h-1", "h200", 4),
                node("l-0", "l40s", 0),
            ],
        );
        let usage = |series: &str, admitted: u32, queued: u32| TenantUsage {
            admitted: Demand {
                gpus: [(series.to_owned(), admitted)].into(),
                cpus: 2.0,
                memory_gb: 8.0,
            },
            admitted_jobs: 2,
            queued: Demand {
                gpus: [(series.to_owned(), queued)].into(),
                ..Demand::default()
            },
            queued_jobs: 1,
        };
        s.tenants.insert("team-a".into(), usage("h200", 12, 8));
        s.tenants.insert("team-b".into(), usage("a100", 40, 0));
        s
    }

    #[test]
    fn series_of_the_fleet_the_quota_and_the_jobs_are_listed_with_usage_against_the_limit() {
        let mut q = TenantQuota::unlimited(&"team-a".parse().unwrap());
        q.set_gpu_limit("h200", 16, false);
        q.set_gpu_limit("b200", 4, true);
        q.cpu = Some(CpuLimit {
            cpus: Some(32.0),
            memory_gb: None,
            borrow: false,
        });
        let snap = snapshot();
        let v = quota_view(&"team-a".parse().unwrap(), Some(&q), Some(&snap));
        let names: Vec<&str> = v.series.iter().map(|s| s.series.as_str()).collect();
        // team-b's a100 never shows: only the caller's own usage is read.
        assert_eq!(names, ["b200", "h200", "l40s"]);
        let h200 = &v.series[1];
        assert_eq!(
            (h200.gpus_limit, h200.admitted_gpus, h200.queued_gpus),
            (Some(16), 12, 8)
        );
        assert_eq!((h200.fleet_total_gpus, h200.fleet_free_gpus), (16, 4));
        assert_eq!(describe_series(h200), "12 of 16 GPUs admitted, 8 queued");
        assert!(v.series[0].borrow && v.series[0].fleet_total_gpus == 0);
        assert_eq!(v.series[2].gpus_limit, None);
        assert_eq!(
            describe_series(&v.series[2]),
            "0 GPUs admitted (unlimited), 0 queued"
        );
        assert_eq!(
            (v.cpu.cpus_limit, v.cpu.memory_gb_limit),
            (Some(32.0), None)
        );
        assert_eq!(v.cpu.admitted_cpus, 2.0);
        assert!(v.cpu.is_relevant());
        assert_eq!((v.admitted_jobs, v.queued_jobs), (2, 1));
        assert_eq!((v.taken_at_ms, v.note.as_deref()), (Some(7), None));
    }

    #[test]
    fn without_a_quota_or_a_snapshot_everything_is_unlimited_and_the_note_says_why_figures_are_zero()
     {
        let v = quota_view(&"team-c".parse().unwrap(), None, None);
        assert_eq!(v.weight, 1.0);
        assert!(v.series.is_empty());
        assert!(!v.cpu.is_relevant());
        assert_eq!(v.taken_at_ms, None);
        assert!(
            v.note
                .as_deref()
                .is_some_and(|n| n.contains("no capacity snapshot"))
        );
        // A tenant without jobs in a published snapshot sees the fleet's series, all unlimited.
        let snap = snapshot();
        let v = quota_view(&"team-c".parse().unwrap(), None, Some(&snap));
        assert_eq!(v.series.len(), 2);
        assert!(
            v.series
                .iter()
                .all(|s| s.gpus_limit.is_none() && s.admitted_gpus == 0)
        );
        assert_eq!(v.note, None);
    }
}
