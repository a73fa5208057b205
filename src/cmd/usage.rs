//! `tuneplane usage` (the caller's tenant, through the API) and `tuneplane admin usage` (every
//! tenant, from the job store): GPU-hours, CPU- and memory-seconds per series, day or job,
//! counted from the job records (every attempt from its admission to its end).

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;
use tuneplane_core::ids::TenantId;
use tuneplane_core::usage::{GroupBy, Row, known_tenants, report, tenant_slices, totals};
use tuneplane_functions::routes::audit::parse_time;
use tuneplane_functions::runtime::now_ms;

use super::output::print_table;
use super::store_access::{StoreArgs, with_store};
use crate::client::{Api, Output};

/// Arguments of `tuneplane usage`.
#[derive(clap::Args, Debug, Clone)]
pub struct UsageArgs {
    /// Window start: a duration back from now (12h, 7d, 2w), an RFC 3339 time or epoch ms.
    #[arg(long, default_value = "7d")]
    pub since: String,
    /// Window end (same forms; default now).
    #[arg(long)]
    pub until: Option<String>,
    /// Rows per `series`, `day` or `job`.
    #[arg(long, default_value = "series")]
    pub group_by: String,
}

/// Arguments of `tuneplane admin usage`.
#[derive(clap::Args, Debug)]
pub struct AdminUsageArgs {
    /// Only this tenant (default: every tenant the store has keys or quotas for).
    #[arg(long)]
    pub tenant: Option<TenantId>,
    /// The window and grouping.
    #[command(flatten)]
    pub window: UsageArgs,
    /// Output format: a table, JSON or CSV.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
    /// Price of a GPU-hour per series for a cost column, JSON (`{"h200": 4.5}`).
    #[arg(long, env = "TUNEPLANE_GPU_PRICES")]
    pub prices: Option<String>,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Minimal query-string escaping: unreserved characters as they are, every other byte `%XX`.
fn escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The API path of the report `args` ask for.
pub fn path_of(args: &UsageArgs) -> anyhow::Result<String> {
    GroupBy::parse(&args.group_by).map_err(|e| anyhow::anyhow!("--group-by: {e}"))?;
    let mut path = format!(
        "/usage?from={}&group_by={}",
        escape(&args.since),
        escape(&args.group_by)
    );
    if let Some(u) = &args.until {
        path.push_str(&format!("&to={}", escape(u)));
    }
    Ok(path)
}

fn hours(v: f64) -> String {
    format!("{v:.2}")
}

fn print_rows(rows: &[Row], group_by: GroupBy, csv: bool) {
    let middle = match group_by {
        GroupBy::Series => None,
        GroupBy::Day => Some("DAY"),
        GroupBy::Job => Some("JOB"),
    };
    let priced = rows.iter().any(|r| r.cost.is_some());
    let mut headers = vec!["TENANT"];
    headers.extend(middle);
    headers.extend(["SERIES", "GPU-HOURS", "CPU-HOURS", "GIB-HOURS"]);
    if priced {
        headers.push("COST");
    }
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut line = vec![r.tenant.clone()];
            if let Some(m) = r.day.clone().or_else(|| r.job_id.clone()) {
                line.push(m);
            }
            line.extend([
                r.series.clone(),
                hours(r.gpu_hours),
                hours(r.cpu_seconds / 3600.0),
                hours(r.memory_gb_seconds / 3600.0),
            ]);
            if priced {
                line.push(r.cost.map(|c| format!("{c:.2}")).unwrap_or_default());
            }
            line
        })
        .collect();
    if csv {
        println!("{}", headers.join(",").to_ascii_lowercase());
        for l in lines {
            println!("{}", l.join(","));
        }
    } else {
        print_table(&headers, &lines);
    }
}

/// Runs `tuneplane usage`.
pub async fn usage(api: &Api, out: Output, args: UsageArgs) -> anyhow::Result<ExitCode> {
    let path = path_of(&args)?;
    let body: Value = api.get(&path).await?;
    if out == Output::Json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Row> =
        serde_json::from_value(body["rows"].clone()).context("unexpected usage answer")?;
    let group_by = GroupBy::parse(&args.group_by).map_err(anyhow::Error::msg)?;
    if rows.is_empty() && out != Output::Csv {
        println!("no usage since {}", args.since);
    } else {
        print_rows(&rows, group_by, out == Output::Csv);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `tuneplane admin usage`.
pub fn admin_usage(args: &AdminUsageArgs) -> anyhow::Result<ExitCode> {
    let now = now_ms();
    let w = &args.window;
    let group_by = GroupBy::parse(&w.group_by).map_err(|e| anyhow::anyhow!("--group-by: {e}"))?;
    let from = parse_time(&w.since, now).map_err(|e| anyhow::anyhow!("--since: {e}"))?;
    let to = match &w.until {
        None => now,
        Some(u) => parse_time(u, now).map_err(|e| anyhow::anyhow!("--until: {e}"))?,
    };
    if to <= from {
        bail!("--until: the window's end must be after its start (--since)");
    }
    let prices: BTreeMap<String, f64> = match &args.prices {
        None => BTreeMap::new(),
        Some(json) => tuneplane_functions::config::parse_gpu_prices(json)
            .map_err(|e| anyhow::anyhow!("--prices: {e}"))?,
    };
    with_store(&args.store, async |store, location| {
        let tenants = match &args.tenant {
            Some(t) => vec![t.clone()],
            None => known_tenants(store)
                .await
                .with_context(|| format!("listing tenants in the {location}"))?,
        };
        let mut slices = Vec::new();
        for tenant in &tenants {
            slices.extend(
                tenant_slices(store, tenant, from, to, now)
                    .await
                    .with_context(|| format!("reading {tenant}'s jobs in the {location}"))?,
            );
        }
        let rows = report(&slices, group_by, &prices);
        if args.output == Output::Json {
            let body = serde_json::json!({
                "from_ms": from, "to_ms": to, "group_by": group_by,
                "totals": totals(&rows), "rows": rows,
            });
            println!("{body}");
        } else if rows.is_empty() && args.output != Output::Csv {
            println!("no usage since {} in the {location}", w.since);
        } else {
            print_rows(&rows, group_by, args.output == Output::Csv);
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_path_escapes_times_and_checks_the_grouping() {
        let args = UsageArgs {
            since: "2026-12-01T00:00:00+01:00".into(),
            until: Some("1d".into()),
            group_by: "day".into(),
        };
        assert_eq!(
            path_of(&args).unwrap(),
            "/usage?from=2026-12-01T00%3A00%3A00%2B01%3A00&group_by=day&to=1d"
        );
        let bad = UsageArgs {
            group_by: "week".into(),
            ..args
        };
        let e = path_of(&bad).unwrap_err().to_string();
        assert!(
            e.contains("--group-by") && e.contains("series, day or job"),
            "{e}"
        );
    }
}
