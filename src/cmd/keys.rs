//! `tuneplane admin keys list|revoke|rotate`: the lifecycle of API keys, on the job store
//! directly (the embedded store of `--data-dir`, or DynamoDB with `--table`).
//!
//! Keys are named by their id (`k-` and the first 16 hex digits of the secret's SHA-256, see
//! [`ApiKeyRecord::id`]); the secret is never shown again after creation. A revoked key is
//! refused on its next request, by the API and the console alike (every request reads the key
//! record; nothing caches it), and its console sessions end with it. Revoked records stay in the
//! store so that `list` shows when a key was revoked.

use std::process::ExitCode;

use anyhow::{Context, bail};
use tuneplane_core::ids::TenantId;
use tuneplane_core::store::{ApiKeyChange, ApiKeyRecord, JobStore};
use tuneplane_functions::runtime::now_ms;

use super::output::{age, print_table};
use super::store_access::{StoreArgs, audit, store_new_key, with_store};
use crate::client::Output;
use tuneplane_core::audit::AuditAction;

/// Subcommands of `admin keys`.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// List API keys (id, tenant, name, scopes, age, status); secrets are never shown.
    List(ListArgs),
    /// Revoke a key: its API calls get 401 and its console sessions end at once.
    Revoke(KeyArgs),
    /// Replace a key: create a new one with the same tenant, scopes and name, print its secret
    /// once, then revoke the old one.
    Rotate(KeyArgs),
}

/// Arguments of `admin keys list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Only keys of this tenant.
    #[arg(long)]
    pub tenant: Option<TenantId>,
    /// Output format: a table, or the stored records as JSON (with their ids).
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Arguments of `admin keys revoke` and `rotate`.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    /// The key's id from `admin keys list` (`k-` and 16 hex digits), or its full SHA-256.
    pub id: String,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// The one key `id` names among `keys`: its id, or its full hash.
pub fn find_key<'a>(keys: &'a [ApiKeyRecord], id: &str) -> anyhow::Result<&'a ApiKeyRecord> {
    let id = id.trim();
    let well_formed = id
        .strip_prefix("k-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        || (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()));
    if !well_formed {
        bail!(
            "key id {id:?}: give the id from `tuneplane admin keys list` (k- and 16 hex digits) or the key's SHA-256"
        );
    }
    let id = id.to_ascii_lowercase();
    keys.iter()
        .find(|k| k.id() == id || k.key_sha256 == id)
        .with_context(|| {
            format!("no API key has id {id}; `tuneplane admin keys list` shows the ids")
        })
}

fn status(key: &ApiKeyRecord) -> String {
    match key.revoked_at_ms {
        None => "active".into(),
        Some(at) => format!("revoked {} ago", age(at)),
    }
}

fn print_keys(keys: &[ApiKeyRecord]) {
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                k.id(),
                k.tenant.to_string(),
                k.name.clone(),
                k.scopes.join(","),
                age(k.created_at_ms),
                status(k),
            ]
        })
        .collect();
    print_table(&["ID", "TENANT", "NAME", "SCOPES", "AGE", "STATUS"], &rows);
}

/// Revokes the key `id` names; returns the stored record and whether it was active until now.
pub async fn revoke(store: &dyn JobStore, id: &str) -> anyhow::Result<(ApiKeyRecord, bool)> {
    let keys = store.list_api_keys().await?;
    let key = find_key(&keys, id)?;
    let was_active = key.is_active();
    let stored = revoke_record(store, key).await?;
    if was_active {
        audit(
            store,
            &stored.tenant,
            AuditAction::KeyRevoke,
            &stored.id(),
            serde_json::json!({"name": stored.name}),
        )
        .await?;
    }
    Ok((stored, was_active))
}

async fn revoke_record(store: &dyn JobStore, key: &ApiKeyRecord) -> anyhow::Result<ApiKeyRecord> {
    store
        .update_api_key(&key.key_sha256, ApiKeyChange::Revoke { at_ms: now_ms() })
        .await?
        .with_context(|| format!("key {} disappeared while it was being revoked", key.id()))
}

/// Creates a key like the one `id` names and then revokes that one; returns the new secret and
/// the old record. A revoked key cannot be rotated (nothing is created).
pub async fn rotate(store: &dyn JobStore, id: &str) -> anyhow::Result<(String, ApiKeyRecord)> {
    let keys = store.list_api_keys().await?;
    let old = find_key(&keys, id)?;
    if !old.is_active() {
        bail!(
            "key {} is revoked; create a new key with `tuneplane admin create-key --tenant {}`",
            old.id(),
            old.tenant
        );
    }
    // The new key exists before the old one stops working, so a client can switch without a gap.
    let (secret, new) = store_new_key(store, &old.tenant, &old.scopes, &old.name).await?;
    let old = revoke_record(store, old).await.with_context(|| {
        format!(
            "the new key was created, but revoking {} failed: run `tuneplane admin keys revoke {}`",
            old.id(),
            old.id()
        )
    })?;
    let change = serde_json::json!({"new_key": new.id(), "name": new.name, "scopes": new.scopes});
    audit(
        store,
        &old.tenant,
        AuditAction::KeyRotate,
        &old.id(),
        change,
    )
    .await?;
    Ok((secret, old))
}

/// Runs an `admin keys` subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List(args) => with_store(&args.store, async |store, location| {
            let mut keys = store
                .list_api_keys()
                .await
                .with_context(|| format!("listing API keys in the {location}"))?;
            keys.retain(|k| args.tenant.as_ref().is_none_or(|t| &k.tenant == t));
            keys.sort_by(|a, b| (&a.tenant, a.created_at_ms).cmp(&(&b.tenant, b.created_at_ms)));
            if args.output == Output::Json {
                let docs: Vec<serde_json::Value> = keys
                    .iter()
                    .map(|k| {
                        let mut doc = serde_json::to_value(k).unwrap_or_default();
                        doc["id"] = k.id().into();
                        doc
                    })
                    .collect();
                println!("{}", serde_json::to_string(&docs)?);
            } else if keys.is_empty() {
                println!("no API keys (create one with tuneplane admin create-key --tenant T)");
            } else {
                print_keys(&keys);
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Revoke(args) => with_store(&args.store, async |store, location| {
            let (key, was_active) = revoke(store, &args.id)
                .await
                .map_err(|e| anyhow::anyhow!("{e:#}\n(nothing was changed in the {location})"))?;
            if was_active {
                println!(
                    "revoked key {} ({:?} of tenant {}) in the {location}: its API calls get 401 and its console sessions end from now on",
                    key.id(),
                    key.name,
                    key.tenant
                );
            } else {
                println!("key {} was already revoked; nothing changed", key.id());
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Rotate(args) => with_store(&args.store, async |store, location| {
            let (secret, old) = rotate(store, &args.id)
                .await
                .with_context(|| format!("rotating key {} in the {location}", args.id))?;
            eprintln!(
                "created a new key for tenant {} with scopes {} and revoked {}; the new secret is shown only now:",
                old.tenant,
                old.scopes.join(", "),
                old.id()
            );
            println!("{secret}");
            Ok(ExitCode::SUCCESS)
        }),
    }
}

#[cfg(test)]
mod tests {
    use tuneplane_core::submit::{SCOPE_JOBS_READ, SubmitError, authenticate};
    use tuneplane_stores::EmbeddedJobStore;

    use super::super::store_access::issue_key;
    use super::*;
    use tuneplane_core::store::prelude::*;

    fn store() -> (tempfile::TempDir, EmbeddedJobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedJobStore::open(dir.path()).unwrap();
        (dir, store)
    }

    async fn auth(store: &EmbeddedJobStore, secret: &str) -> Result<String, SubmitError> {
        authenticate(store, Some(&format!("Bearer {secret}")))
            .await
            .map(|p| p.tenant.into_string())
    }

    #[tokio::test]
    async fn rotation_issues_a_working_key_and_revokes_the_old_one() {
        let (_dir, store) = store();
        let scopes = vec![SCOPE_JOBS_READ.to_owned()];
        let old = issue_key(&store, &"acme".parse().unwrap(), &scopes, "ci")
            .await
            .unwrap();
        let id = ApiKeyRecord {
            key_sha256: tuneplane_core::store::hash_api_key(&old),
            tenant: "acme".parse().unwrap(),
            scopes: Vec::new(),
            name: String::new(),
            created_at_ms: 0,
            revoked_at_ms: None,
            session_epoch: 0,
        }
        .id();
        let (new, revoked) = rotate(&store, &id).await.unwrap();
        assert_eq!(revoked.id(), id);
        assert_eq!(auth(&store, &new).await.ok().as_deref(), Some("acme"));
        assert!(matches!(
            auth(&store, &old).await,
            Err(SubmitError::Unauthenticated)
        ));
        // The new key keeps the old one's scopes and name; both records are listed.
        let keys = store.list_api_keys().await.unwrap_or_default();
        assert_eq!(keys.len(), 2);
        assert!(keys.iter().all(|k| k.scopes == scopes && k.name == "ci"));
        // A revoked key cannot be rotated, and nothing is created trying.
        assert!(rotate(&store, &id).await.is_err());
        assert_eq!(store.list_api_keys().await.unwrap_or_default().len(), 2);
    }

    #[test]
    fn ids_must_be_well_formed_and_name_one_key() {
        let key = ApiKeyRecord {
            key_sha256: "ab".repeat(32),
            tenant: "acme".parse().unwrap(),
            scopes: Vec::new(),
            name: "ci".into(),
            created_at_ms: 0,
            revoked_at_ms: None,
            session_epoch: 0,
        };
        let keys = [key];
        assert!(find_key(&keys, "k-abababababababab").is_ok());
        assert!(find_key(&keys, &"AB".repeat(32)).is_ok());
        let missing = find_key(&keys, "k-0000000000000000")
            .err()
            .map(|e| e.to_string());
        assert!(missing.is_some_and(|m| m.contains("admin keys list")));
        for bad in ["", "k-abab", "tp_secret", "k-zzzzzzzzzzzzzzzz"] {
            assert!(find_key(&keys, bad).is_err(), "{bad:?}");
        }
    }
}
