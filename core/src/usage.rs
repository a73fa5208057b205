//! GPU, CPU and memory usage per tenant, series and day, counted from the job records
//! themselves: every attempt (failed and requeued ones included, kept in `attempts`) holds its
//! pools' resources from its admission until it ended, and the current attempt until it ends (or
//! until now while it runs). The job record is the ledger: nothing else has to be written for a
//! usage figure to be exact, and a crash anywhere loses none.
//!
//! Intervals are cut at UTC midnight, so a job running across days counts in each; a query
//! window cuts them too. Figures are seconds of resource held: `gpu_seconds` = GPUs × seconds,
//! `cpu_seconds` = CPUs × seconds, `memory_gb_seconds` = GiB × seconds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::JobRecord;
use crate::spec::Pool;

/// The series name of usage on CPU-only pools.
pub const CPU_ONLY: &str = "cpu";

const DAY_MS: i64 = 86_400_000;

/// What one job held on one series on one day (a slice of its attempts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// The job's tenant.
    pub tenant: String,
    /// The job (or playground).
    pub job_id: crate::ids::JobId,
    /// The GPU series, or [`CPU_ONLY`].
    pub series: String,
    /// The UTC day (`2026-12-04`).
    pub day: String,
    /// GPUs × seconds.
    pub gpu_seconds: f64,
    /// CPUs × seconds.
    pub cpu_seconds: f64,
    /// GiB × seconds.
    pub memory_gb_seconds: f64,
}

/// The held interval of each attempt of `job` as `[from, to)` in ms: from admission until it
/// ended, the current one until `now_ms` when it has not ended. An attempt never admitted held
/// nothing.
pub fn held_intervals(job: &JobRecord, now_ms: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = job
        .attempts
        .iter()
        .filter_map(|a| Some((a.admitted_at_ms?, a.finished_at_ms)))
        .collect();
    if let Some(from) = job.admitted_at_ms {
        out.push((from, job.finished_at_ms.unwrap_or(now_ms)));
    }
    out.retain(|(from, to)| to > from);
    out
}

/// The resources one pool holds: (GPUs, CPUs, GiB) over all its nodes.
fn pool_size(pool: &Pool) -> (f64, f64, f64) {
    let nodes = f64::from(pool.nodes);
    (
        nodes * f64::from(pool.gpus_per_node),
        nodes * pool.cpus,
        nodes * pool.memory_gb,
    )
}

/// `YYYY-MM-DD` of the UTC day starting at `day_start_ms`.
pub fn day_name(day_start_ms: i64) -> String {
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = day_start_ms.div_euclid(DAY_MS) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Every slice of `job` inside `[from_ms, to_ms)`, cut at UTC midnights, one per series and day.
/// An array child's slices carry its parent's id: a report by job shows an array as one line with
/// its children summed.
pub fn job_slices(job: &JobRecord, from_ms: i64, to_ms: i64, now_ms: i64) -> Vec<Slice> {
    let job_id = job
        .array_child()
        .map_or_else(|| job.id.clone(), |c| c.parent.clone());
    let mut acc: BTreeMap<(String, i64), (f64, f64, f64)> = BTreeMap::new();
    for (start, end) in held_intervals(job, now_ms) {
        let (start, end) = (start.max(from_ms), end.min(to_ms));
        let mut t = start;
        while t < end {
            let day = t.div_euclid(DAY_MS) * DAY_MS;
            let cut = (day + DAY_MS).min(end);
            let secs = (cut - t) as f64 / 1000.0;
            for pool in &job.spec.pools {
                let series = pool.series.clone().unwrap_or_else(|| CPU_ONLY.to_owned());
                let (g, c, m) = pool_size(pool);
                let e = acc.entry((series, day)).or_default();
                e.0 += g * secs;
                e.1 += c * secs;
                e.2 += m * secs;
            }
            t = cut;
        }
    }
    acc.into_iter()
        .map(|((series, day), (g, c, m))| Slice {
            tenant: job.tenant.to_string(),
            job_id: job_id.clone(),
            series,
            day: day_name(day),
            gpu_seconds: g,
            cpu_seconds: c,
            memory_gb_seconds: m,
        })
        .collect()
}

/// How a usage report groups its slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// Per tenant and series.
    Series,
    /// Per tenant, day and series.
    Day,
    /// Per tenant, job and series.
    Job,
}

impl GroupBy {
    /// Parses `series`, `day` or `job`; the error names the choices.
    pub fn parse(text: &str) -> Result<GroupBy, String> {
        match text {
            "series" => Ok(GroupBy::Series),
            "day" => Ok(GroupBy::Day),
            "job" => Ok(GroupBy::Job),
            other => Err(format!(
                "{other:?} is not a grouping; give series, day or job"
            )),
        }
    }
}

/// One row of a usage report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The tenant.
    pub tenant: String,
    /// The series, or [`CPU_ONLY`].
    pub series: String,
    /// The day, when grouped by day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<String>,
    /// The job, when grouped by job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// GPU-hours.
    pub gpu_hours: f64,
    /// GPUs × seconds.
    pub gpu_seconds: f64,
    /// CPUs × seconds.
    pub cpu_seconds: f64,
    /// GiB × seconds.
    pub memory_gb_seconds: f64,
    /// GPU-hours × the series' price per GPU-hour, when prices are configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

/// Rows of `slices` grouped by `group_by`, in (tenant, day or job, series) order, with costs
/// from `prices` (per GPU-hour per series) when it names the series.
pub fn report(slices: &[Slice], group_by: GroupBy, prices: &BTreeMap<String, f64>) -> Vec<Row> {
    let mut acc: BTreeMap<(String, String, String), (f64, f64, f64)> = BTreeMap::new();
    for s in slices {
        let middle = match group_by {
            GroupBy::Series => String::new(),
            GroupBy::Day => s.day.clone(),
            GroupBy::Job => s.job_id.to_string(),
        };
        let e = acc
            .entry((s.tenant.clone(), middle, s.series.clone()))
            .or_default();
        e.0 += s.gpu_seconds;
        e.1 += s.cpu_seconds;
        e.2 += s.memory_gb_seconds;
    }
    acc.into_iter()
        .map(|((tenant, middle, series), (g, c, m))| {
            let gpu_hours = g / 3600.0;
            Row {
                cost: prices.get(&series).map(|p| gpu_hours * p),
                day: (group_by == GroupBy::Day).then(|| middle.clone()),
                job_id: (group_by == GroupBy::Job).then_some(middle),
                tenant,
                series,
                gpu_hours,
                gpu_seconds: g,
                cpu_seconds: c,
                memory_gb_seconds: m,
            }
        })
        .collect()
}

/// Totals of `rows` (GPU-seconds, CPU-seconds, GiB-seconds, cost when any row has one).
pub fn totals(rows: &[Row]) -> serde_json::Value {
    let sum = |f: fn(&Row) -> f64| rows.iter().map(f).sum::<f64>();
    let cost: Option<f64> = rows
        .iter()
        .any(|r| r.cost.is_some())
        .then(|| rows.iter().filter_map(|r| r.cost).sum());
    serde_json::json!({
        "gpu_hours": sum(|r| r.gpu_hours),
        "gpu_seconds": sum(|r| r.gpu_seconds),
        "cpu_seconds": sum(|r| r.cpu_seconds),
        "memory_gb_seconds": sum(|r| r.memory_gb_seconds),
        "cost": cost,
    })
}

/// The slices of a playground inside `[from_ms, to_ms)`: its GPUs and its pod's requests from
/// its admission until it was reclaimed (or now), per UTC day; `job_id` is the playground's id.
pub fn playground_slices(
    pg: &crate::store::PlaygroundRecord,
    from_ms: i64,
    to_ms: i64,
    now_ms: i64,
) -> Vec<Slice> {
    use crate::render::playground::{REQUEST_CPUS, REQUEST_MEMORY_GB};
    let Some((start, end)) = pg.held(now_ms) else {
        return Vec::new();
    };
    // Playground ids (`pg-` and hex) keep the id rule, as the admission's stand-in requires; one
    // that did not was never admitted and held nothing.
    let Ok(job_id) = crate::ids::JobId::parse(pg.id.as_str()) else {
        return Vec::new();
    };
    let (mut t, end) = (start.max(from_ms), end.min(to_ms));
    let mut out = Vec::new();
    while t < end {
        let day = t.div_euclid(DAY_MS) * DAY_MS;
        let cut = (day + DAY_MS).min(end);
        let secs = (cut - t) as f64 / 1000.0;
        out.push(Slice {
            tenant: pg.tenant.to_string(),
            job_id: job_id.clone(),
            series: pg.series.clone(),
            day: day_name(day),
            gpu_seconds: f64::from(pg.gpus) * secs,
            cpu_seconds: f64::from(REQUEST_CPUS) * secs,
            memory_gb_seconds: f64::from(REQUEST_MEMORY_GB) * secs,
        });
        t = cut;
    }
    out
}

/// Every slice of `tenant`'s jobs and playgrounds (live and retired) inside `[from_ms, to_ms)`,
/// the jobs read page by page from the tenant's job listing (every job of the tenant: a long run
/// submitted long ago may still hold GPUs).
pub async fn tenant_slices(
    jobs: &dyn crate::store::JobStore,
    tenant: &crate::ids::TenantId,
    from_ms: i64,
    to_ms: i64,
    now_ms: i64,
) -> crate::store::Result<Vec<Slice>> {
    let mut query = crate::store::JobQuery {
        state: None,
        limit: 1000,
        cursor: None,
    };
    let mut out = Vec::new();
    loop {
        let page = jobs.list_jobs(tenant, &query).await?;
        for job in page.items.iter().filter(|j| j.submitted_at_ms < to_ms) {
            out.extend(job_slices(job, from_ms, to_ms, now_ms));
        }
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    let live = jobs.list_playgrounds().await?;
    let retired = jobs.list_retired_playgrounds(tenant).await?;
    for pg in live.iter().filter(|p| p.tenant == *tenant).chain(&retired) {
        out.extend(playground_slices(pg, from_ms, to_ms, now_ms));
    }
    Ok(out)
}

/// Every tenant the store knows (its API keys' and quotas' tenants), sorted.
pub async fn known_tenants(
    jobs: &dyn crate::store::JobStore,
) -> crate::store::Result<Vec<crate::ids::TenantId>> {
    let mut tenants: std::collections::BTreeSet<crate::ids::TenantId> = jobs
        .list_api_keys()
        .await?
        .into_iter()
        .map(|k| k.tenant)
        .collect();
    tenants.extend(jobs.list_quotas().await?.into_iter().map(|q| q.tenant));
    Ok(tenants.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Attempt, Failure, FailureReason, JobRecord};
    use crate::spec::JobSpec;

    fn spec(pools: &[(Option<&str>, u32, u32, f64, f64)]) -> JobSpec {
        let pools: Vec<serde_json::Value> = pools
            .iter()
            .enumerate()
            .map(|(i, (series, nodes, gpus, cpus, mem))| {
                serde_json::json!({"name": format!("p{i}"), "series": series, "nodes": nodes,
                    "gpus_per_node": gpus, "cpus": cpus, "memory_gb": mem})
            })
            .collect();
        let json = serde_json::json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": pools, "deadlines": {"pre_running_seconds": 60,
            "run_seconds": 600}, "priority": 0, "labels": {}, "namespace": "ns",
            "platform_version": "0"
        });
        serde_json::from_value(json).expect("test spec")
    }

    fn job(pools: &[(Option<&str>, u32, u32, f64, f64)]) -> JobRecord {
        JobRecord::new_queued(
            "j1".parse().unwrap(),
            "acme".parse().unwrap(),
            spec(pools),
            "ab",
            0,
        )
    }

    const D: i64 = DAY_MS;

    #[test]
    fn a_playground_counts_from_its_admission_to_its_reclaim_per_day() {
        let mut pg = crate::store::PlaygroundRecord::requested(
            "pg-1",
            "acme".parse().unwrap(),
            "m",
            "l40s",
            2,
            0,
            0,
        );
        assert!(
            playground_slices(&pg, 0, 3 * D, 3 * D).is_empty(),
            "never admitted"
        );
        pg.node = Some("l40s-0".into());
        pg.admitted_at_ms = Some(D - 3_600_000);
        pg.ended_at_ms = Some(D + 1_800_000);
        let slices = playground_slices(&pg, 0, 3 * D, 3 * D);
        let got: Vec<(&str, f64, f64)> = slices
            .iter()
            .map(|s| (s.day.as_str(), s.gpu_seconds, s.cpu_seconds))
            .collect();
        assert_eq!(
            got,
            vec![
                ("1970-01-01", 2.0 * 3600.0, 4.0 * 3600.0),
                ("1970-01-02", 2.0 * 1800.0, 4.0 * 1800.0)
            ]
        );
        assert_eq!(slices[0].job_id, "pg-1");
        assert_eq!(slices[0].series, "l40s");
        // A live one counts until now; the window cuts both ends.
        pg.ended_at_ms = None;
        let live = playground_slices(&pg, D, 3 * D, D + 60_000);
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].gpu_seconds, 2.0 * 60.0);
    }

    #[test]
    fn days_are_named_in_utc() {
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(1_796_083_200_000), "2026-12-01");
        assert_eq!(day_name(951_782_400_000), "2000-02-29");
    }

    #[test]
    fn every_attempt_counts_from_admission_to_its_end_and_the_current_one_until_now() {
        let mut j = job(&[(Some("h200"), 2, 8, 32.0, 256.0), (None, 1, 0, 4.0, 16.0)]);
        // A failed first attempt held 100 s; a requeued second never admitted; the third runs.
        for (n, admitted, finished) in [(1, Some(1_000), 101_000), (2, None, 200_000)] {
            j.attempts.push(Attempt {
                number: n,
                admitted_at_ms: admitted,
                running_at_ms: None,
                finished_at_ms: finished,
                workload_name: None,
                logs_key: None,
                placements: Vec::new(),
                failure: Failure::new(FailureReason::EntrypointFailed, "exit 1"),
            });
        }
        j.admitted_at_ms = Some(300_000);
        assert_eq!(
            held_intervals(&j, 350_000),
            vec![(1_000, 101_000), (300_000, 350_000)]
        );
        let slices = job_slices(&j, 0, i64::MAX, 350_000);
        let h200 = slices.iter().find(|s| s.series == "h200").unwrap();
        assert_eq!(h200.gpu_seconds, 16.0 * 150.0);
        assert_eq!(h200.cpu_seconds, 64.0 * 150.0);
        let cpu = slices.iter().find(|s| s.series == CPU_ONLY).unwrap();
        assert_eq!(
            (cpu.gpu_seconds, cpu.cpu_seconds, cpu.memory_gb_seconds),
            (0.0, 600.0, 2400.0)
        );
        // Finished: counted until then, not until now.
        j.finished_at_ms = Some(310_000);
        let done = job_slices(&j, 0, i64::MAX, 999_999_999);
        assert_eq!(done[0].gpu_seconds + done[1].gpu_seconds, 16.0 * 110.0);
    }

    #[test]
    fn a_run_across_midnight_counts_on_each_day_and_a_window_cuts_it() {
        let mut j = job(&[(Some("l40s"), 1, 1, 1.0, 1.0)]);
        j.admitted_at_ms = Some(D - 3_600_000);
        j.finished_at_ms = Some(D + 7_200_000);
        let s = job_slices(&j, 0, i64::MAX, 0);
        let days: Vec<(&str, f64)> = s.iter().map(|s| (s.day.as_str(), s.gpu_seconds)).collect();
        assert_eq!(days, vec![("1970-01-01", 3600.0), ("1970-01-02", 7200.0)]);
        let cut = job_slices(&j, D, D + 3_600_000, 0);
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].gpu_seconds, 3600.0);
        assert!(job_slices(&j, 2 * D, 3 * D, 0).is_empty());
    }

    #[test]
    fn an_array_childs_usage_is_reported_under_its_parent() {
        let mut j = job(&[(Some("l40s"), 1, 1, 1.0, 1.0)]);
        j.admitted_at_ms = Some(0);
        j.finished_at_ms = Some(10_000);
        j.array = Some(crate::array::ArrayRole::Child(crate::array::ArrayChild {
            parent: "j-sweep".parse().unwrap(),
            index: 3,
        }));
        let s = job_slices(&j, 0, i64::MAX, 0);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].job_id, "j-sweep");
        assert_eq!(s[0].gpu_seconds, 10.0);
    }

    #[test]
    fn reports_group_and_price_and_totals_add_up() {
        let slice = |tenant: &str, job: &str, series: &str, day: &str, g: f64| Slice {
            tenant: tenant.into(),
            job_id: job.parse().unwrap(),
            series: series.into(),
            day: day.into(),
            gpu_seconds: g,
            cpu_seconds: 1.0,
            memory_gb_seconds: 2.0,
        };
        let slices = vec![
            slice("acme", "j1", "h200", "2026-12-01", 3600.0),
            slice("acme", "j2", "h200", "2026-12-02", 7200.0),
            slice("acme", "j2", "cpu", "2026-12-02", 0.0),
            slice("beta", "j3", "h200", "2026-12-01", 3600.0),
        ];
        let prices: BTreeMap<String, f64> = [("h200".to_owned(), 4.0)].into();
        let by_series = report(&slices, GroupBy::Series, &prices);
        assert_eq!(by_series.len(), 3);
        assert_eq!(
            (by_series[1].series.as_str(), by_series[1].gpu_hours),
            ("h200", 3.0)
        );
        assert_eq!(by_series[1].cost, Some(12.0));
        assert_eq!(by_series[0].cost, None, "no price for cpu");
        let by_day = report(&slices, GroupBy::Day, &BTreeMap::new());
        assert_eq!(by_day.len(), 4);
        assert_eq!(by_day[0].day.as_deref(), Some("2026-12-01"));
        let by_job = report(&slices, GroupBy::Job, &BTreeMap::new());
        assert_eq!(
            by_job
                .iter()
                .filter(|r| r.job_id.as_deref() == Some("j2"))
                .count(),
            2
        );
        let t = totals(&by_series);
        assert_eq!(t["gpu_hours"], 4.0);
        assert_eq!(t["cost"], 16.0);
        assert_eq!(totals(&by_day)["cost"], serde_json::Value::Null);
        assert!(
            GroupBy::parse("week")
                .unwrap_err()
                .contains("series, day or job")
        );
    }
}
