//! `tuneplane admin`: operator commands that act on the job store directly, not through the API.
//!
//! `admin create-key --tenant T` makes an API key: the secret is printed once (stdout) and only
//! its SHA-256 is stored, with the tenant and scopes. The store is the dev stack's embedded store
//! (`--data-dir`, default `.tuneplane-dev`) or DynamoDB (`--table`, with the usual AWS
//! environment for region, credentials and `AWS_ENDPOINT_URL`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use tuneplane_core::store::JobStore;
use tuneplane_core::submit::{SCOPE_ADMIN, SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, new_api_key};
use tuneplane_functions::runtime::{now_ms, random_bytes, valid_id};

/// Subcommands of `admin`.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Create an API key for a tenant and print its secret (shown once, stored hashed).
    CreateKey(CreateKeyArgs),
}

/// Arguments of `admin create-key`.
#[derive(clap::Args, Debug)]
pub struct CreateKeyArgs {
    /// Tenant the key acts for (lower-case letters, digits and '-').
    #[arg(long)]
    pub tenant: String,
    /// Scopes to grant (repeatable): jobs:read, jobs:write, admin.
    #[arg(long = "scope", default_values = [SCOPE_JOBS_READ, SCOPE_JOBS_WRITE])]
    pub scopes: Vec<String>,
    /// A label for the key (shown in logs, never the secret).
    #[arg(long, default_value = "cli")]
    pub name: String,
    /// DynamoDB table (production); takes precedence over --data-dir.
    #[arg(long, env = "TUNEPLANE_TABLE")]
    pub table: Option<String>,
    /// Data directory of the dev stack (embedded store under `<dir>/jobs`).
    #[arg(long, env = "TUNEPLANE_DATA_DIR", default_value = ".tuneplane-dev")]
    pub data_dir: PathBuf,
}

/// Runs an `admin` subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::CreateKey(args) => create_key(&args),
    }
}

/// Checks the tenant and scopes, stores a new key in `store` and returns its secret.
pub async fn issue_key(
    store: &dyn JobStore,
    tenant: &str,
    scopes: &[String],
    name: &str,
) -> anyhow::Result<String> {
    if !valid_id(tenant) || tenant.len() > 40 {
        bail!("tenant {tenant:?}: use 1-40 lower-case letters, digits and '-'");
    }
    let known = [SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, SCOPE_ADMIN];
    if let Some(bad) = scopes.iter().find(|s| !known.contains(&s.as_str())) {
        bail!("unknown scope {bad:?}; known: {}", known.join(", "));
    }
    let (secret, record) = new_api_key(random_bytes(), tenant, scopes.to_vec(), name, now_ms());
    store.put_api_key(&record).await?;
    Ok(secret)
}

fn create_key(args: &CreateKeyArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (store, location): (Arc<dyn JobStore>, String) = match &args.table {
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
        };
        let secret = issue_key(store.as_ref(), &args.tenant, &args.scopes, &args.name)
            .await
            .with_context(|| format!("creating the key in the {location}"))?;
        eprintln!(
            "created key {:?} for tenant {} with scopes {} in the {location}; the secret is shown only now:",
            args.name,
            args.tenant,
            args.scopes.join(", ")
        );
        println!("{secret}");
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use tuneplane_core::submit::authenticate;

    use super::*;

    #[tokio::test]
    async fn created_key_authenticates_as_its_tenant_with_its_scopes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store =
            tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let scopes = vec![SCOPE_JOBS_READ.to_owned()];
        let secret = issue_key(&store, "acme", &scopes, "ci")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let header = format!("Bearer {secret}");
        let principal = authenticate(&store, Some(&header))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(principal.tenant, "acme");
        assert_eq!(principal.scopes, scopes);
        assert!(principal.require(SCOPE_JOBS_WRITE).is_err());
    }

    #[tokio::test]
    async fn bad_tenant_or_scope_is_refused_before_anything_is_stored() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store =
            tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let ok = vec![SCOPE_JOBS_READ.to_owned()];
        assert!(issue_key(&store, "Acme Corp", &ok, "x").await.is_err());
        let bad = vec!["root".to_owned()];
        assert!(issue_key(&store, "acme", &bad, "x").await.is_err());
    }
}
