//! `tuneplane-reconciler`: builds config, clients and stores, then runs the loop beside the metrics
//! server until SIGTERM/SIGINT (releasing the Lease so a standby takes over at once).
//!
//! Stores: `TUNEPLANE_TABLE` + `TUNEPLANE_BUCKET` select DynamoDB + S3 (region, credentials and
//! `AWS_ENDPOINT_URL` from the SDK's chain); otherwise `TUNEPLANE_DATA_DIR` selects the embedded
//! store and filesystem blobs (`TUNEPLANE_BLOB_SECRET`, `TUNEPLANE_BLOB_URL`), as in `tuneplane dev`.

use std::sync::Arc;

use anyhow::{Context, bail};
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::{Config, Reconciler};
use tuneplane_stores::{DynamoJobStore, EmbeddedJobStore, FsBlobStore, S3BlobStore};

/// DynamoDB table name.
const ENV_TABLE: &str = "TUNEPLANE_TABLE";
/// S3 bucket name.
const ENV_BUCKET: &str = "TUNEPLANE_BUCKET";
/// Embedded store directory (one-machine stack).
const ENV_DATA_DIR: &str = "TUNEPLANE_DATA_DIR";
/// Signing secret of the filesystem blob store.
const ENV_BLOB_SECRET: &str = "TUNEPLANE_BLOB_SECRET";
/// Base URL of the filesystem blob server.
const ENV_BLOB_URL: &str = "TUNEPLANE_BLOB_URL";
/// `json` (default) or `text` log lines.
const ENV_LOG_FORMAT: &str = "TUNEPLANE_LOG_FORMAT";

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if std::env::var(ENV_LOG_FORMAT).as_deref() == Ok("text") {
        builder.init();
    } else {
        builder.json().init();
    }
}

async fn stores() -> anyhow::Result<(Arc<dyn JobStore>, Arc<dyn BlobStore>)> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let Some(table) = var(ENV_TABLE) {
        let bucket = var(ENV_BUCKET)
            .with_context(|| format!("{ENV_BUCKET} must be set with {ENV_TABLE}"))?;
        let sdk = tuneplane_stores::aws::load_config().await;
        let dynamo = tuneplane_stores::aws::dynamodb_client(&sdk, None);
        let s3 = tuneplane_stores::aws::s3_client(&sdk, std::env::var("AWS_ENDPOINT_URL").is_ok());
        return Ok((
            Arc::new(DynamoJobStore::new(dynamo, table)),
            Arc::new(S3BlobStore::new(s3, bucket)),
        ));
    }
    let Some(dir) = var(ENV_DATA_DIR) else {
        bail!("set {ENV_TABLE} and {ENV_BUCKET} (AWS) or {ENV_DATA_DIR} (embedded stores)");
    };
    let secret = var(ENV_BLOB_SECRET)
        .with_context(|| format!("{ENV_BLOB_SECRET} must be set with {ENV_DATA_DIR}"))?;
    let url = var(ENV_BLOB_URL)
        .with_context(|| format!("{ENV_BLOB_URL} must be set with {ENV_DATA_DIR}"))?;
    let jobs = EmbeddedJobStore::open(&dir).with_context(|| format!("{ENV_DATA_DIR}={dir}"))?;
    let blobs = FsBlobStore::open(
        std::path::Path::new(&dir).join("blobs"),
        secret.into_bytes(),
        url,
    )
    .with_context(|| format!("{ENV_DATA_DIR}={dir}"))?;
    Ok((Arc::new(jobs), Arc::new(blobs)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let config = Config::from_env()?;
    // Archives are written in the temporary directory; a crash can leave one there (on the
    // Deployment's emptyDir, which outlives a container restart).
    let leftovers = tuneplane_reconciler::logs::remove_leftover_scratch();
    if leftovers > 0 {
        tracing::info!(leftovers, "removed archive files an earlier process left");
    }
    let (jobs, blobs) = stores().await?;
    let kube_config = kube::Config::infer()
        .await
        .context("Kubernetes client configuration")?;
    let client = kube::Client::try_from(tuneplane_reconciler::kube_io::client_config(kube_config))
        .context("Kubernetes client")?;
    let metrics = Arc::new(Metrics::default());
    let reconciler = Reconciler::new(config.clone(), client, jobs, blobs, metrics.clone()).await?;
    let server = tokio::spawn(tuneplane_reconciler::metrics::serve(
        config.metrics_addr,
        metrics,
        config.metrics_token.clone(),
    ));
    let shutdown = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "no SIGTERM handler");
                    std::future::pending::<()>().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    tracing::info!(identity = %config.identity, namespace = %config.namespace, "reconciler starting");
    reconciler.run_until(shutdown).await?;
    server.abort();
    Ok(())
}
