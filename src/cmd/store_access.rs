//! What every operator command shares: where the job store is (`--table` or `--data-dir`),
//! opening it on a runtime of its own, the operator as the actor of a change, its audit entry,
//! and issuing API keys (`admin create-key` and `admin keys rotate`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use tuneplane_core::audit::{Actor, AuditAction, AuditEntry, AuditSource};
use tuneplane_core::ids::TenantId;
use tuneplane_core::store::JobStore;
use tuneplane_core::submit::{SCOPE_ADMIN, SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, new_api_key};
use tuneplane_functions::runtime::{now_ms, random_bytes};

/// Where the job store is (shared by the admin commands).
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// DynamoDB table (production); takes precedence over --data-dir.
    #[arg(long, env = "TUNEPLANE_TABLE")]
    pub table: Option<String>,
    /// Data directory of the dev stack (embedded store under `<dir>/jobs`).
    #[arg(long, env = "TUNEPLANE_DATA_DIR", default_value = ".tuneplane-dev")]
    pub data_dir: PathBuf,
}

/// Opens the configured job store; returns it with a description for messages.
async fn open_store(args: &StoreArgs) -> anyhow::Result<(Arc<dyn JobStore>, String)> {
    Ok(match &args.table {
        Some(table) => {
            let sdk = tuneplane_stores::aws::load_config().await;
            let client = tuneplane_stores::aws::dynamodb_client(&sdk, None);
            let store = tuneplane_stores::DynamoJobStore::new(client, table.clone());
            (Arc::new(store), format!("DynamoDB table {table}"))
        }
        None => {
            let dir = args.data_dir.join("jobs");
            let store = tuneplane_stores::EmbeddedJobStore::open(&dir)
                .with_context(|| format!("opening the job store in {}", dir.display()))?;
            (Arc::new(store), format!("embedded store {}", dir.display()))
        }
    })
}

/// Runs the operator command `f` on a fresh single-threaded runtime with the job store `args`
/// configure and its description for messages (`DynamoDB table T`, `embedded store DIR`).
pub(crate) fn with_store<T>(
    args: &StoreArgs,
    f: impl AsyncFnOnce(&dyn JobStore, &str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(async {
            let (store, location) = open_store(args).await?;
            f(store.as_ref(), &location).await
        })
}

/// The operator running this command as the actor of its changes: `operator:<user>` (the
/// person behind `sudo`, else `$USER` or `$LOGNAME`, else `uid-<n>`), through the admin CLI, with
/// one fresh request id per command.
pub fn operator() -> &'static Actor {
    static ACTOR: std::sync::OnceLock<Actor> = std::sync::OnceLock::new();
    ACTOR.get_or_init(|| {
        let named = ["SUDO_USER", "USER", "LOGNAME"]
            .into_iter()
            .find_map(|var| {
                std::env::var(var).ok().filter(|u| {
                    !u.is_empty() && u.len() <= 64 && u.bytes().all(|b| b.is_ascii_graphic())
                })
            });
        let user = named.unwrap_or_else(|| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self")
                .map_or_else(|_| "unknown".into(), |m| format!("uid-{}", m.uid()))
        });
        Actor {
            key_id: format!("operator:{user}"),
            source: AuditSource::AdminCli,
            request_id: format!(
                "cli-{}",
                random_bytes::<8>()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        }
    })
}

/// Appends the audit entry of a change this admin command made.
pub async fn audit(
    store: &dyn JobStore,
    tenant: &TenantId,
    action: AuditAction,
    target: &str,
    change: serde_json::Value,
) -> anyhow::Result<()> {
    let entry = AuditEntry::new(operator(), tenant, action, target, change, now_ms());
    store.append_audit(&entry).await.with_context(|| {
        format!(
            "the change was made, but its audit entry ({} {target}) could not be written",
            action.as_str()
        )
    })
}

/// Checks the tenant and scopes, stores a new key in `store` and returns its secret; audited
/// as `key.create`.
pub async fn issue_key(
    store: &dyn JobStore,
    tenant: &TenantId,
    scopes: &[String],
    name: &str,
) -> anyhow::Result<String> {
    let (secret, record) = store_new_key(store, tenant, scopes, name).await?;
    let change = serde_json::json!({"name": record.name, "scopes": record.scopes});
    audit(store, tenant, AuditAction::KeyCreate, &record.id(), change).await?;
    Ok(secret)
}

/// [`issue_key`] without its audit entry (a rotation records one entry of its own).
pub async fn store_new_key(
    store: &dyn JobStore,
    tenant: &TenantId,
    scopes: &[String],
    name: &str,
) -> anyhow::Result<(String, tuneplane_core::store::ApiKeyRecord)> {
    let known = [SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, SCOPE_ADMIN];
    if let Some(bad) = scopes.iter().find(|s| !known.contains(&s.as_str())) {
        bail!("unknown scope {bad:?}; known: {}", known.join(", "));
    }
    let (secret, record) = new_api_key(random_bytes(), tenant, scopes.to_vec(), name, now_ms());
    store.put_api_key(&record).await?;
    Ok((secret, record))
}
