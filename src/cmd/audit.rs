//! `tuneplane admin audit`: the audit trail of every tenant (or one), read from the job store
//! directly. Entries are appended by the API, the console, the triggers and the admin commands;
//! nothing in the product edits or deletes them.

use std::process::ExitCode;

use anyhow::{Context, bail};
use tuneplane_core::audit::{AUDIT_LIST_LIMIT, AuditEntry, AuditQuery};
use tuneplane_core::quota::valid_tenant;
use tuneplane_functions::routes::audit::parse_time;
use tuneplane_functions::runtime::now_ms;

use super::admin::{StoreArgs, with_store};
use super::output::{age, print_table};
use crate::client::Output;

/// Arguments of `admin audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Only this tenant's entries (default: every tenant's).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Entries made since: a duration back from now (30m, 12h, 1d, 2w), an RFC 3339 time or
    /// epoch milliseconds.
    #[arg(long, default_value = "1d")]
    pub since: String,
    /// Entries made before this time (same forms; default now).
    #[arg(long)]
    pub until: Option<String>,
    /// At most this many, the newest kept (1 to 1000).
    #[arg(long, default_value_t = AUDIT_LIST_LIMIT)]
    pub limit: usize,
    /// Output format: a table, or the entries as JSON.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// The listing `args` ask for, checked.
pub fn query_of(args: &AuditArgs, now: i64) -> anyhow::Result<AuditQuery> {
    if let Some(t) = &args.tenant {
        if !valid_tenant(t) {
            bail!("--tenant {t:?}: use 1-40 lower-case letters, digits and '-'");
        }
    }
    if !(1..=AUDIT_LIST_LIMIT).contains(&args.limit) {
        bail!("--limit {}: give 1 to {AUDIT_LIST_LIMIT}", args.limit);
    }
    let since = parse_time(&args.since, now).map_err(|e| anyhow::anyhow!("--since: {e}"))?;
    let until = args
        .until
        .as_deref()
        .map(|u| parse_time(u, now).map_err(|e| anyhow::anyhow!("--until: {e}")))
        .transpose()?;
    Ok(AuditQuery {
        tenant: args.tenant.clone(),
        since_ms: Some(since),
        until_ms: until,
        limit: args.limit,
    })
}

fn print_entries(entries: &[AuditEntry]) {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                age(e.at_ms),
                e.tenant.clone(),
                e.action.as_str().to_owned(),
                e.target.clone(),
                e.actor.key_id.clone(),
                e.actor.source.as_str().to_owned(),
                e.actor.request_id.clone(),
            ]
        })
        .collect();
    print_table(
        &[
            "AGE", "TENANT", "ACTION", "TARGET", "ACTOR", "SOURCE", "REQUEST",
        ],
        &rows,
    );
}

/// Runs `admin audit`.
pub fn run(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let query = query_of(args, now_ms())?;
    with_store(&args.store, async |store, location| {
        let entries = store
            .list_audit(&query)
            .await
            .with_context(|| format!("reading the audit trail in the {location}"))?;
        if args.output == Output::Json {
            println!("{}", serde_json::to_string(&entries)?);
        } else if entries.is_empty() {
            println!("no audit entries since {} in the {location}", args.since);
        } else {
            print_entries(&entries);
        }
        Ok(ExitCode::SUCCESS)
    })
}
