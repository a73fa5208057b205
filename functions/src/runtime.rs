//! What every binary builds once at startup: logging, stores, the shared state; plus ids, the
//! clock, and the tokio offload for capsule building.

use std::sync::Arc;

use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_core::submit::{BlockingFuture, BlockingTask, Offload, SubmitError, SubmitService};
use tuneplane_stores::{DynamoJobStore, EmbeddedJobStore, FsBlobStore, S3BlobStore, aws};

use crate::config::{Backend, Config};
use crate::state::AppState;

/// Startup failure of a binary.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A local store could not be opened.
    #[error("opening the local stores: {0}")]
    Store(#[from] tuneplane_core::store::StoreError),
}

pub use tuneplane_core::clock::now_ms;

/// `<prefix>-<20 lower-case hex>` from 80 random bits.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}-{}", hex::encode(random_bytes::<10>()))
}

/// A new job id (`j-` + 20 hex).
pub fn new_job_id() -> String {
    random_id("j")
}

/// Random bytes from the operating system, or a hard error: ids and secrets (API keys, console
/// sessions) are never made from anything guessable. Without the OS's randomness nothing can be
/// minted safely, so this panics (the request fails; a Lambda invocation reports the error)
/// rather than fall back to time or process ids.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if let Err(e) = getrandom::fill(&mut out) {
        panic!("no randomness from the operating system ({e}): refusing to mint ids or secrets");
    }
    out
}

pub use tuneplane_core::control::valid_id;

/// A new playground server key: 32 random bytes as hex.
pub fn new_server_key() -> String {
    hex::encode(random_bytes::<32>())
}

/// Runs capsule builds on tokio's blocking pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioOffload;

impl Offload for TokioOffload {
    fn run(&self, task: BlockingTask) -> BlockingFuture {
        Box::pin(async move {
            match tokio::task::spawn_blocking(task).await {
                Ok(result) => result,
                Err(e) => Err(SubmitError::InvalidRequest(format!(
                    "capsule build was interrupted: {e}"
                ))),
            }
        })
    }
}

/// Starts logging: JSON when configured, plain text otherwise; level from `RUST_LOG` (default info).
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: CloudWatch and redirected logs get plain text,
    // and NO_COLOR (any value) turns them off everywhere.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_target(false);
    // A second initialisation (tests) is harmless.
    let _ = if json {
        builder.json().without_time().try_init()
    } else {
        builder.without_time().try_init()
    };
}

/// The stores of the configured backend; AWS clients are built once here.
pub async fn stores(
    config: &Config,
) -> Result<(Arc<dyn JobStore>, Arc<dyn BlobStore>), StartupError> {
    match &config.backend {
        Backend::Aws { table, bucket } => {
            let sdk = aws::load_config().await;
            // A local endpoint (moto, the dev stack) needs path-style bucket addressing.
            let path_style = sdk.endpoint_url().is_some();
            let jobs = DynamoJobStore::new(aws::dynamodb_client(&sdk, None), table.clone());
            let blobs = S3BlobStore::new(aws::s3_client(&sdk, path_style), bucket.clone());
            Ok((Arc::new(jobs), Arc::new(blobs)))
        }
        Backend::Local {
            dir,
            blob_secret,
            blob_url,
        } => {
            let jobs = EmbeddedJobStore::open(dir.join("jobs"))?;
            let blobs = FsBlobStore::open(
                dir.join("blobs"),
                blob_secret.expose().as_bytes(),
                blob_url.clone(),
            )?;
            Ok((Arc::new(jobs), Arc::new(blobs)))
        }
    }
}

/// The shared state over the given stores.
pub fn state_with(
    config: &Config,
    jobs: Arc<dyn JobStore>,
    blobs: Arc<dyn BlobStore>,
) -> Arc<AppState> {
    let submit = SubmitService::new(
        jobs,
        blobs,
        config.submit.clone(),
        Arc::new(TokioOffload),
        new_job_id,
    );
    Arc::new(AppState {
        submit,
        webhooks: config.webhooks.clone(),
        event_senders: config.event_senders.clone(),
        clock: now_ms,
        new_id: random_id,
        playground_proxy: crate::routes::playground_proxy::PlaygroundProxy::new(
            config.playground_pod_networks.clone(),
        ),
        rate_limits: Arc::new(crate::rate::RateLimits::new(
            config.rate_per_key,
            config.rate_per_source,
        )),
        grant_key: config.grant_key.clone(),
    })
}

/// Parses the environment, initialises logging and builds the shared state.
pub async fn startup() -> Result<(Config, Arc<AppState>), StartupError> {
    let config = Config::from_env()?;
    init_tracing(config.json_logs);
    let (jobs, blobs) = stores(&config).await?;
    let state = state_with(&config, jobs, blobs);
    Ok((config, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_valid_and_distinct() {
        let a = new_job_id();
        let b = new_job_id();
        assert!(valid_id(&a) && valid_id(&b));
        assert_ne!(a, b);
        assert_eq!(a.len(), 22);
    }

    #[test]
    fn ids_with_path_characters_are_invalid() {
        for bad in ["", "../x", "A", "j/1", "j#1", &"a".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }
}
