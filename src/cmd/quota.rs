//! Quotas on the command line.
//!
//! - `tuneplane quota` (client command): the caller's quota, usage and queued demand per series,
//!   from `GET /v1/quota`.
//! - `tuneplane admin quota set|list|unset` (operator commands on the job store, like
//!   `admin create-key`): `set` merges into the tenant's record (a series given replaces that
//!   series' limit; `--cpus`/`--memory-gb` set those fields of the CPU limit and keep the other;
//!   `--weight` sets the fair-share weight), validates it and stores it; `unset` removes one
//!   series' limit, the CPU limit, or the whole record; `list` prints every record.

use std::process::ExitCode;

use anyhow::{Context, bail};
use tuneplane_core::audit::AuditAction;
use tuneplane_core::ids::TenantId;
use tuneplane_core::quota::{CpuLimit, TenantQuota};
use tuneplane_core::quota_view::QuotaView;
use tuneplane_core::store::JobStore;
use tuneplane_functions::runtime::now_ms;

use super::output::{age, print_table};
use super::store_access::{StoreArgs, with_store};
use crate::client::{Api, Output};

/// Subcommands of `admin quota`.
#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Set limits or the weight of a tenant (merged into its existing record).
    Set(SetArgs),
    /// List every tenant's quota.
    List(ListArgs),
    /// Remove one series' limit, the CPU limit, or the tenant's whole record.
    Unset(UnsetArgs),
}

/// Arguments of `admin quota set`.
#[derive(clap::Args, Debug)]
pub struct SetArgs {
    /// Tenant (as on its API keys).
    #[arg(long)]
    pub tenant: TenantId,
    /// GPU series whose limit to set (with --gpus); replaces that series' limit.
    #[arg(long)]
    pub series: Option<String>,
    /// Most GPUs of --series the tenant may have admitted at once.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Let the tenant go above the limit being set on capacity no other tenant's queued jobs
    /// can use: applies to --series, and to the CPU limit when --cpus/--memory-gb are given.
    #[arg(long)]
    pub borrow: Option<bool>,
    /// Most CPU cores of CPU-only jobs admitted at once (GPU jobs count under their GPU limit).
    #[arg(long, allow_negative_numbers = true)]
    pub cpus: Option<f64>,
    /// Most memory (GiB) of CPU-only jobs admitted at once.
    #[arg(long, allow_negative_numbers = true)]
    pub memory_gb: Option<f64>,
    /// Fair-share weight (default 1): a tenant of weight 2 is served as if it held half.
    #[arg(long, allow_negative_numbers = true)]
    pub weight: Option<f64>,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Arguments of `admin quota list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Output format: a table, or the stored records as JSON.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Arguments of `admin quota unset`.
#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("what").required(true).multiple(false))]
pub struct UnsetArgs {
    /// Tenant (as on its API keys).
    #[arg(long)]
    pub tenant: TenantId,
    /// Remove this series' GPU limit (the series becomes unlimited).
    #[arg(long, group = "what")]
    pub series: Option<String>,
    /// Remove the CPU-only limit.
    #[arg(long, group = "what")]
    pub cpu: bool,
    /// Remove the tenant's whole record: every limit, and the weight back to 1.
    #[arg(long, group = "what")]
    pub all: bool,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs an `admin quota` subcommand.
pub fn run_admin(command: AdminCommand) -> anyhow::Result<ExitCode> {
    match command {
        AdminCommand::Set(args) => with_store(&args.store, async |store, location| {
            let q = set(store, &args)
                .await
                .map_err(|e| anyhow::anyhow!("{e:#}\n(nothing was stored in the {location})"))?;
            eprintln!("stored the quota of tenant {} in the {location}", q.tenant);
            print_quotas(&[q]);
            Ok(ExitCode::SUCCESS)
        }),
        AdminCommand::List(args) => with_store(&args.store, async |store, location| {
            let quotas = store
                .list_quotas()
                .await
                .with_context(|| format!("listing quotas in the {location}"))?;
            if args.output == Output::Json {
                println!("{}", serde_json::to_string(&quotas)?);
            } else if quotas.is_empty() {
                println!(
                    "no quotas: every tenant is unlimited with weight 1 (set one with tuneplane admin quota set)"
                );
            } else {
                print_quotas(&quotas);
            }
            Ok(ExitCode::SUCCESS)
        }),
        AdminCommand::Unset(args) => with_store(&args.store, async |store, location| {
            let what = if let Some(s) = &args.series {
                Removal::Series(s.clone())
            } else if args.cpu {
                Removal::Cpu
            } else {
                Removal::All
            };
            let left = unset(store, &args.tenant, &what)
                .await
                .map_err(|e| anyhow::anyhow!("{e:#}\n(nothing was changed in the {location})"))?;
            match left {
                Some(q) => {
                    eprintln!("updated the quota of tenant {} in the {location}", q.tenant);
                    print_quotas(&[q]);
                }
                None => println!(
                    "tenant {} has no quota now: unlimited, weight 1",
                    args.tenant
                ),
            }
            Ok(ExitCode::SUCCESS)
        }),
    }
}

/// The tenant's record with `args` merged in (not stored). Every error names the flag and what
/// to do; the merged record is validated.
pub fn merge(existing: Option<TenantQuota>, args: &SetArgs) -> anyhow::Result<TenantQuota> {
    let mut q = existing.unwrap_or_else(|| TenantQuota::unlimited(&args.tenant));
    let cpu_given = args.cpus.is_some() || args.memory_gb.is_some();
    if args.series.is_none() && args.gpus.is_some() {
        bail!(
            "--gpus needs --series: say which series the limit is for, e.g. --series h200 --gpus {}",
            args.gpus.unwrap_or_default()
        );
    }
    if args.borrow.is_some() && args.series.is_none() && !cpu_given {
        bail!(
            "--borrow applies to the limit being set: add --series S (with --gpus N, or alone for an existing limit) or --cpus/--memory-gb"
        );
    }
    if args.series.is_none() && !cpu_given && args.weight.is_none() {
        bail!(
            "nothing to set: give --series S --gpus N, --cpus C, --memory-gb M (with --borrow true|false) or --weight W"
        );
    }
    if let Some(series) = &args.series {
        let gpus = match (args.gpus, q.series.get(series)) {
            (Some(g), _) => g,
            (None, Some(existing)) if args.borrow.is_some() => existing.gpus,
            (None, _) => bail!(
                "--series {series} needs --gpus N: the most {series} GPUs tenant {} may have admitted at once",
                args.tenant
            ),
        };
        q.set_gpu_limit(series, gpus, args.borrow.unwrap_or(false));
    }
    if cpu_given {
        let old = q.cpu.take().unwrap_or(CpuLimit {
            cpus: None,
            memory_gb: None,
            borrow: false,
        });
        q.cpu = Some(CpuLimit {
            cpus: args.cpus.or(old.cpus),
            memory_gb: args.memory_gb.or(old.memory_gb),
            borrow: args.borrow.unwrap_or(old.borrow),
        });
    }
    if let Some(w) = args.weight {
        q.weight = w;
    }
    q.tenant.clone_from(&args.tenant);
    if let Err(e) = q.validate() {
        let lines: Vec<String> = e.problems.iter().map(|p| format!("\n  {p}")).collect();
        bail!(
            "the quota of tenant {:?} is invalid:{}",
            args.tenant,
            lines.concat()
        );
    }
    q.updated_at_ms = now_ms();
    Ok(q)
}

/// Merges `args` into the tenant's stored record and stores it; returns what was stored.
pub async fn set(store: &dyn JobStore, args: &SetArgs) -> anyhow::Result<TenantQuota> {
    let existing = store.get_quota(&args.tenant).await?;
    let q = merge(existing, args)?;
    store.put_quota(&q).await?;
    let change = serde_json::to_value(&q).unwrap_or_default();
    super::store_access::audit(store, &q.tenant, AuditAction::QuotaSet, &q.tenant, change).await?;
    Ok(q)
}

/// What `unset` removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// One series' GPU limit.
    Series(String),
    /// The CPU-only limit.
    Cpu,
    /// The whole record.
    All,
}

/// Removes `what` from the tenant's record; returns what is left (`None` when the record was
/// deleted because nothing is left to limit).
pub async fn unset(
    store: &dyn JobStore,
    tenant: &TenantId,
    what: &Removal,
) -> anyhow::Result<Option<TenantQuota>> {
    let Some(mut q) = store.get_quota(tenant).await? else {
        bail!(
            "tenant {tenant:?} has no quota to remove (tuneplane admin quota list shows the tenants that have one)"
        );
    };
    let removed = match what {
        Removal::Series(s) => serde_json::json!({"removed": format!("series {s}")}),
        Removal::Cpu => serde_json::json!({"removed": "cpu"}),
        Removal::All => serde_json::json!({"removed": "all"}),
    };
    let left = unset_inner(store, &mut q, tenant, what).await?;
    super::store_access::audit(store, tenant, AuditAction::QuotaUnset, tenant, removed).await?;
    Ok(left)
}

async fn unset_inner(
    store: &dyn JobStore,
    q: &mut TenantQuota,
    tenant: &TenantId,
    what: &Removal,
) -> anyhow::Result<Option<TenantQuota>> {
    match what {
        Removal::Series(s) => {
            if q.series.remove(s).is_none() {
                let known: Vec<&str> = q.series.keys().map(String::as_str).collect();
                bail!(
                    "tenant {tenant} has no limit for series {s:?}; its series limits: {}",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                );
            }
        }
        Removal::Cpu => {
            if q.cpu.take().is_none() {
                bail!("tenant {tenant} has no CPU limit to remove");
            }
        }
        Removal::All => {
            store.delete_quota(tenant).await?;
            return Ok(None);
        }
    }
    if q.is_default() {
        store.delete_quota(tenant).await?;
        return Ok(None);
    }
    q.updated_at_ms = now_ms();
    store.put_quota(q).await?;
    Ok(Some(q.clone()))
}

use tuneplane_core::quantity::plain as number;

/// `h200=16 (borrow), l40s=8`, or `-`.
fn series_cell(q: &TenantQuota) -> String {
    if q.series.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = q
        .series
        .iter()
        .map(|(s, l)| format!("{s}={}{}", l.gpus, if l.borrow { " (borrow)" } else { "" }))
        .collect();
    parts.join(", ")
}

/// `64 CPUs, 256 GiB (borrow)`, or `-`.
fn cpu_cell(q: &TenantQuota) -> String {
    let Some(c) = &q.cpu else {
        return "-".into();
    };
    let mut parts = Vec::new();
    if let Some(n) = c.cpus {
        parts.push(format!("{} CPUs", number(n)));
    }
    if let Some(m) = c.memory_gb {
        parts.push(format!("{} GiB", number(m)));
    }
    format!(
        "{}{}",
        parts.join(", "),
        if c.borrow { " (borrow)" } else { "" }
    )
}

fn print_quotas(quotas: &[TenantQuota]) {
    let rows: Vec<Vec<String>> = quotas
        .iter()
        .map(|q| {
            vec![
                q.tenant.to_string(),
                number(q.weight),
                series_cell(q),
                cpu_cell(q),
                if q.updated_at_ms > 0 {
                    age(q.updated_at_ms)
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    print_table(
        &[
            "TENANT",
            "WEIGHT",
            "GPU LIMITS",
            "CPU-ONLY LIMITS",
            "UPDATED",
        ],
        &rows,
    );
}

/// `tuneplane quota`: the caller's quota, usage and queued demand per series.
pub async fn show(api: &Api, out: Output) -> anyhow::Result<ExitCode> {
    let Some(body) = api.get_or_print("/quota", out).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let v: QuotaView = serde_json::from_value(body).context("unexpected quota answer")?;
    let weight = if (v.weight - 1.0).abs() > f64::EPSILON {
        format!(" (fair-share weight {})", number(v.weight))
    } else {
        String::new()
    };
    let taken = v
        .taken_at_ms
        .map(|t| {
            format!(
                "; usage as of {}",
                age(i64::try_from(t).unwrap_or(i64::MAX))
            )
        })
        .unwrap_or_default();
    println!(
        "tenant {}{weight}: {} admitted job{}, {} queued{taken}",
        v.tenant,
        v.admitted_jobs,
        if v.admitted_jobs == 1 { "" } else { "s" },
        v.queued_jobs
    );
    if v.series.is_empty() {
        println!("no GPU series in the fleet, in your quota or in your jobs");
    } else {
        let rows: Vec<Vec<String>> = v
            .series
            .iter()
            .map(|s| {
                vec![
                    s.series.clone(),
                    s.gpus_limit
                        .map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
                    if s.gpus_limit.is_none() {
                        "-".into()
                    } else if s.borrow {
                        "yes".into()
                    } else {
                        "no".into()
                    },
                    s.admitted_gpus.to_string(),
                    s.queued_gpus.to_string(),
                    format!("{}/{}", s.fleet_free_gpus, s.fleet_total_gpus),
                ]
            })
            .collect();
        print_table(
            &[
                "SERIES",
                "LIMIT (GPUS)",
                "BORROW",
                "ADMITTED",
                "QUEUED",
                "FLEET FREE/TOTAL",
            ],
            &rows,
        );
    }
    let c = &v.cpu;
    if c.is_relevant() {
        let limit = |l: Option<f64>, unit: &str| {
            l.map_or_else(
                || format!("unlimited {unit}"),
                |n| format!("{} {unit}", number(n)),
            )
        };
        println!(
            "CPU-only jobs: {} CPUs / {} GiB admitted of {} / {}{}; {} CPUs / {} GiB queued; fleet free {} CPUs / {} GiB",
            number(c.admitted_cpus),
            number(c.admitted_memory_gb),
            limit(c.cpus_limit, "CPUs"),
            limit(c.memory_gb_limit, "GiB"),
            if c.borrow { " (may borrow)" } else { "" },
            number(c.queued_cpus),
            number(c.queued_memory_gb),
            number(c.fleet_free_cpus),
            number(c.fleet_free_memory_gb)
        );
    }
    if let Some(note) = &v.note {
        println!("note: {note}");
    }
    Ok(ExitCode::SUCCESS)
}
