//! `tuneplane-reconciler`: builds config, clients and stores, then runs the loop beside the metrics
//! server until SIGTERM/SIGINT (releasing the Lease so a standby takes over at once).
//!
//! Every setting comes from the typed [`Config`] (stores and log format included: see
//! `config::process`): `TUNEPLANE_TABLE` + `TUNEPLANE_BUCKET` select DynamoDB + S3 (region,
//! credentials and `AWS_ENDPOINT_URL` from the SDK's chain); otherwise `TUNEPLANE_DATA_DIR` selects
//! the embedded store and filesystem blobs (`TUNEPLANE_BLOB_SECRET`, `TUNEPLANE_BLOB_URL`), as in
//! `tuneplane dev`.

use std::sync::Arc;

use anyhow::{Context, bail};
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_reconciler::config::StoreSettings;
use tuneplane_reconciler::config::process::{ENV_BUCKET, ENV_DATA_DIR, ENV_TABLE};
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::{Config, Reconciler};
use tuneplane_stores::{DynamoJobStore, EmbeddedJobStore, FsBlobStore, S3BlobStore};

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn stores(config: &Config) -> anyhow::Result<(Arc<dyn JobStore>, Arc<dyn BlobStore>)> {
    match &config.stores {
        Some(StoreSettings::Aws {
            table,
            bucket,
            path_style,
        }) => {
            let sdk = tuneplane_stores::aws::load_config().await;
            let dynamo = tuneplane_stores::aws::dynamodb_client(&sdk, None);
            let s3 = tuneplane_stores::aws::s3_client(&sdk, *path_style);
            Ok((
                Arc::new(DynamoJobStore::new(dynamo, table.clone())),
                Arc::new(S3BlobStore::new(s3, bucket.clone())),
            ))
        }
        Some(StoreSettings::Embedded {
            dir,
            blob_secret,
            blob_url,
        }) => {
            let shown = dir.display();
            let jobs =
                EmbeddedJobStore::open(dir).with_context(|| format!("{ENV_DATA_DIR}={shown}"))?;
            let blobs = FsBlobStore::open(
                dir.join("blobs"),
                blob_secret.clone().into_bytes(),
                blob_url.clone(),
            )
            .with_context(|| format!("{ENV_DATA_DIR}={shown}"))?;
            Ok((Arc::new(jobs), Arc::new(blobs)))
        }
        None => bail!("set {ENV_TABLE} and {ENV_BUCKET} (AWS) or {ENV_DATA_DIR} (embedded stores)"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    init_tracing(config.json_logs);
    // Archives are written in the temporary directory; a crash can leave one there (on the
    // Deployment's emptyDir, which outlives a container restart).
    let leftovers = tuneplane_reconciler::logs::remove_leftover_scratch();
    if leftovers > 0 {
        tracing::info!(leftovers, "removed archive files an earlier process left");
    }
    let (jobs, blobs) = stores(&config).await?;
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
