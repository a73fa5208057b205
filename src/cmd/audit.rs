//! `tuneplane admin audit`: the audit trail of every tenant (or one), read from the job store
//! directly. Entries are appended by the API, the console, the triggers and the admin commands;
//! nothing in the product edits or deletes them.

use std::process::ExitCode;

use anyhow::{Context, bail};
use tuneplane_core::audit::{AUDIT_LIST_LIMIT, AuditEntry, AuditQuery};
use tuneplane_core::ids::TenantId;
use tuneplane_functions::routes::audit::parse_time;
use tuneplane_functions::runtime::now_ms;

use super::output::{age, print_table};
use super::store_access::{StoreArgs, with_store};
use crate::client::Output;

/// Arguments of `admin audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Only this tenant's entries (default: every tenant's).
    #[arg(long)]
    pub tenant: Option<TenantId>,
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
                e.tenant.to_string(),
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

#[cfg(test)]
mod tests {
    use tuneplane_core::audit::{AuditAction, AuditSource};
    use tuneplane_core::store::prelude::*;
    use tuneplane_core::submit::SCOPE_JOBS_READ;
    use tuneplane_stores::EmbeddedJobStore;

    use super::super::store_access::{StoreArgs, issue_key, operator};
    use super::super::{keys, quota};
    use super::*;

    fn args(since: &str, tenant: Option<&str>, limit: usize) -> AuditArgs {
        AuditArgs {
            tenant: tenant.map(|t| TenantId::parse(t).expect("a tenant")),
            since: since.into(),
            until: None,
            limit,
            output: Output::Json,
            store: StoreArgs {
                table: None,
                data_dir: ".".into(),
            },
        }
    }

    #[tokio::test]
    async fn every_admin_change_is_audited_once_as_the_operator_through_the_cli() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedJobStore::open(dir.path()).unwrap();
        let scopes = vec![SCOPE_JOBS_READ.to_owned()];
        issue_key(&store, &"acme".parse().unwrap(), &scopes, "ci")
            .await
            .unwrap();
        issue_key(&store, &"acme".parse().unwrap(), &scopes, "ops")
            .await
            .unwrap();
        let listed = store.list_api_keys().await.unwrap();
        let (first, second) = (listed[0].id(), listed[1].id());
        keys::revoke(&store, &first).await.unwrap();
        // Revoking it again changes nothing: no entry.
        keys::revoke(&store, &first).await.unwrap();
        keys::rotate(&store, &second).await.unwrap();
        let set = quota::SetArgs {
            tenant: "acme".parse().unwrap(),
            series: Some("h200".into()),
            gpus: Some(8),
            borrow: None,
            cpus: None,
            memory_gb: None,
            weight: Some(2.0),
            store: StoreArgs {
                table: None,
                data_dir: ".".into(),
            },
        };
        quota::set(&store, &set).await.unwrap();
        quota::unset(&store, &"acme".parse().unwrap(), &quota::Removal::All)
            .await
            .unwrap();

        let entries = store
            .list_audit(&query_of(&args("1d", None, 1000), now_ms()).unwrap())
            .await
            .unwrap();
        let actions: Vec<AuditAction> = entries.iter().map(|e| e.action).collect();
        assert_eq!(
            actions,
            vec![
                AuditAction::KeyCreate,
                AuditAction::KeyCreate,
                AuditAction::KeyRevoke,
                AuditAction::KeyRotate,
                AuditAction::QuotaSet,
                AuditAction::QuotaUnset,
            ]
        );
        assert_eq!(entries[2].target, first);
        assert_eq!(entries[3].target, second);
        assert_eq!(entries[4].change["weight"], 2.0);
        for e in &entries {
            assert_eq!(e.tenant, "acme");
            assert_eq!(e.actor.source, AuditSource::AdminCli);
            assert_eq!(e.actor.key_id, operator().key_id);
            assert!(e.actor.key_id.starts_with("operator:"), "{e:?}");
        }
        // Another tenant's listing is empty.
        let other = query_of(&args("1d", Some("globex"), 1000), now_ms()).unwrap();
        assert!(store.list_audit(&other).await.unwrap().is_empty());
    }

    #[test]
    fn bad_arguments_name_the_flag_and_what_to_give() {
        let now = now_ms();
        let e = query_of(&args("yesterday", None, 10), now)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--since:") && e.contains("RFC 3339"), "{e}");
        // The tenant is checked as the command line is read, by its type.
        #[derive(clap::Parser, Debug)]
        struct Line {
            #[command(flatten)]
            audit: AuditArgs,
        }
        let e = <Line as clap::Parser>::try_parse_from(["audit", "--tenant", "Acme Corp"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--tenant")
                && e.contains("\"Acme Corp\" is not a valid tenant name: use 1-40"),
            "{e}"
        );
        let e = query_of(&args("1d", None, 0), now).unwrap_err().to_string();
        assert!(e.starts_with("--limit 0"), "{e}");
        let q = query_of(&args("2h", Some("acme"), 5), now).unwrap();
        assert_eq!(q.since_ms, Some(now - 7_200_000));
        assert_eq!(q.limit, 5);
    }
}
