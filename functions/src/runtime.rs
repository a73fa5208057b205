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

pub use crate::random::{new_job_id, new_server_key, random_bytes, random_id};
pub use tuneplane_core::control::valid_id;

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
        playground_proxy: crate::pod_network::PlaygroundProxy::new(
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
