//! The one-machine stack behind `tuneplane dev` and `tuneplane demo`.
//!
//! One process runs every part of the platform, each talking to the next over the same protocols
//! as in production: the `/v1` HTTP API (the Lambda router, served by axum) on the embedded job store
//! and the filesystem blob store (whose presigned URLs are served under `/blobs` on the same port),
//! kubesim in execution mode (pods really run on this machine) and the reconciler talking to kubesim
//! over HTTP through a real kube client. State lives in the data directory and survives restarts.
//!
//! With a kubeconfig ([`ClusterChoice::Real`]) the reconciler works against that cluster instead
//! (the control plane of `scripts/k8s-up.sh`, or a kind cluster with KubeRay): the stack applies
//! the reconciler's ServiceAccount and RBAC from `infra/kustomize` with the kubeconfig's (admin)
//! credentials, then the reconciler authenticates with a TokenRequest token of that ServiceAccount,
//! so it has exactly the permissions a deployment has.

mod args;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tuneplane_core::constants::DEFAULT_NAMESPACE;
use tuneplane_core::fleet::Fleet;
use tuneplane_core::render::CapsuleDelivery;
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, new_api_key};
use tuneplane_kubesim::{KubeSim, Scenario, SimConfig};
use tuneplane_stores::embedded::EmbeddedJobStore;
use tuneplane_stores::fs_blob::FsBlobStore;

pub use args::{DevArgs, run, webhook_sources};

/// Tenant of the key the stack creates.
pub const DEFAULT_TENANT: &str = "default";
/// Image whose pull the simulated kubelet fails (the `bad-image` example uses it).
pub const UNPULLABLE_IMAGE: &str = "registry.invalid/tuneplane/does-not-exist:0.0";
/// Largest code upload the dev blob server accepts.
const MAX_UPLOAD_BYTES: u64 = 2 << 30;

/// What to start.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// State lives here (created if missing).
    pub data_dir: PathBuf,
    /// API port on 127.0.0.1 (0 picks a free one).
    pub port: u16,
    /// The simulated fleet.
    pub fleet: Fleet,
    /// Really run pods on this machine (off: simulated durations and outcomes).
    pub execute: bool,
    /// Images the simulated kubelet cannot pull.
    pub unpullable_images: Vec<String>,
    /// Reconciler pass interval.
    pub pass_interval: Duration,
    /// Where jobs and blobs live.
    pub backend: Backend,
    /// Which cluster the reconciler works against.
    pub cluster: ClusterChoice,
    /// Webhook sources as the JSON of `TUNEPLANE_WEBHOOKS` (`--webhooks FILE`), with where it
    /// came from for error messages; `None` serves no webhook sources.
    pub webhooks: Option<WebhookSources>,
    /// How Ray pods get the capsule (presigned URL, or an init container onto a shared volume).
    pub capsule_delivery: CapsuleDelivery,
    /// Serve the blob URLs pods fetch over HTTPS with this certificate (embedded backend only).
    pub blob_tls: Option<BlobTls>,
    /// The reconciler's minimum run time before a job may be preempted, overriding
    /// `TUNEPLANE_PREEMPTION_MIN_RUN_SECONDS` (`None`: that variable, or its default).
    pub preemption_min_run: Option<Duration>,
}

/// The certificate of the HTTPS blob endpoint (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobTls {
    /// Certificate chain for IP 127.0.0.1.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// The webhook configuration of the stack: the JSON of `TUNEPLANE_WEBHOOKS` and its origin.
#[derive(Clone)]
pub struct WebhookSources {
    /// `{"<source>": {"secret", "tenant", "scheme", "template"?}}`.
    pub json: String,
    /// Where it was read (a file path, or the variable), named in errors.
    pub origin: String,
}

impl std::fmt::Debug for WebhookSources {
    // The JSON holds secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSources")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The cluster of the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterChoice {
    /// kubesim in this process, with the options' fleet (the default).
    Simulated,
    /// A real cluster reached through this (admin) kubeconfig; its own nodes are the fleet.
    Real {
        /// Kubeconfig path.
        kubeconfig: PathBuf,
    },
}

/// The stores of the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Embedded job store and filesystem blobs in the data dir (the default).
    Embedded,
    /// DynamoDB and S3 through the AWS SDK (`AWS_ENDPOINT_URL` points at a local endpoint in tests);
    /// the table and bucket are created if missing.
    Aws {
        /// Table name.
        table: String,
        /// Bucket name.
        bucket: String,
    },
}

/// A running stack. Dropping it does not stop it; call [`Stack::shutdown`].
pub struct Stack {
    /// Base URL of the API (`http://127.0.0.1:PORT`).
    pub api_url: String,
    /// API key of the `default` tenant.
    pub api_key: String,
    /// Names of the configured webhook sources (`POST /v1/webhooks/<name>`).
    pub webhook_sources: Vec<String>,
    /// Kubeconfig for kubectl against the cluster (the simulated one's, or the one given).
    pub kubeconfig: PathBuf,
    /// Base of the presigned blob URLs pods get, when they differ from the API's (HTTPS).
    pub pod_blob_url: Option<String>,
    /// The job store (shared with the API and the reconciler).
    pub jobs: Arc<dyn JobStore>,
    /// The blob store.
    pub blobs: Arc<dyn BlobStore>,
    /// The simulated cluster (`None` against a real cluster).
    pub sim: Option<KubeSim>,
    /// Keeps the reconciler's ServiceAccount token fresh (real clusters only).
    _token: Option<tuneplane_reconciler::access::TokenRefresher>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Where this stack's pods run (execution mode): what it ends when it stops.
    exec_dir: Option<PathBuf>,
}

fn random<const N: usize>() -> anyhow::Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(b)
}

/// Reads `path`, or writes `make()` into it first (so restarts keep secrets and keys).
fn persisted(
    path: &Path,
    make: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<(String, bool)> {
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => Ok((s.trim().to_string(), false)),
        _ => {
            let value = make()?;
            std::fs::write(path, &value)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok((value, true))
        }
    }
}

/// The reconciler settings the stack takes from its options and from the environment, validated
/// as the reconciler does: the API rate limit (`TUNEPLANE_KUBE_QPS`, `TUNEPLANE_KUBE_BURST`) and
/// preemption (`TUNEPLANE_PREEMPTION`, `TUNEPLANE_PREEMPTION_MIN_RUN_SECONDS`).
fn reconciler_config(opts: &StackOptions) -> anyhow::Result<tuneplane_reconciler::Config> {
    use tuneplane_reconciler::config::{
        ENV_KUBE_BURST, ENV_KUBE_QPS, ENV_PREEMPTION, ENV_PREEMPTION_MIN_RUN,
    };
    let from_env = tuneplane_reconciler::Config::from_lookup(|k| {
        [
            ENV_KUBE_QPS,
            ENV_KUBE_BURST,
            ENV_PREEMPTION,
            ENV_PREEMPTION_MIN_RUN,
        ]
        .contains(&k)
        .then(|| std::env::var(k).ok())
        .flatten()
    })?;
    Ok(tuneplane_reconciler::Config {
        pass_interval: opts.pass_interval,
        kube_qps: from_env.kube_qps,
        kube_burst: from_env.kube_burst,
        preemption: from_env.preemption,
        preemption_min_run: opts
            .preemption_min_run
            .unwrap_or(from_env.preemption_min_run),
        ..tuneplane_reconciler::Config::default()
    })
}

/// The console's session key, kept in `dir` so that sessions survive a restart of the stack.
fn console_keys(dir: &Path) -> anyhow::Result<tuneplane_functions::console::ConsoleKeys> {
    let (secret, _) = persisted(&dir.join("console-secret"), || Ok(hex(&random::<32>()?)))?;
    Ok(tuneplane_functions::console::ConsoleKeys {
        session: tuneplane_functions::console::session::SessionKey::from_secret(secret.as_bytes()),
    })
}

impl Stack {
    /// Starts every part; returns once the API answers.
    pub async fn start(opts: StackOptions) -> anyhow::Result<Stack> {
        let dir = &opts.data_dir;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the data dir {}", dir.display()))?;
        let dir = dir.canonicalize()?;
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], opts.port)))
            .await
            .with_context(|| {
                format!(
                    "cannot listen on 127.0.0.1:{} (is another stack running? try --port)",
                    opts.port
                )
            })?;
        let api_url = format!("http://{}", listener.local_addr()?);
        // Against a real cluster, pods reach the API and the blob server through the node
        // agent's relay of their own 127.0.0.1 ports, which never relays a port a pod listens on
        // itself (Ray's 8080, 8265, 6379, ...): whatever `--port` is, pods get a second listener
        // of the same app on a port the kernel picks from its ephemeral range, where no pod's
        // own port is. kubesim's pods run on this machine and use `api_url` itself.
        let pod_listener = match &opts.cluster {
            ClusterChoice::Real { .. } => Some(
                tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
                    .await
                    .context("cannot listen on 127.0.0.1 for the pods' endpoint")?,
            ),
            ClusterChoice::Simulated => None,
        };
        let pod_url = match &pod_listener {
            Some(l) => format!("http://{}", l.local_addr()?),
            None => api_url.clone(),
        };

        let (secret, _) = persisted(&dir.join("blob-secret"), || Ok(hex(&random::<32>()?)))?;
        let (jobs, blobs, fs_blobs) = stores(&opts.backend, &dir, &secret, &pod_url).await?;
        // The blob store the reconciler signs pods' URLs with: the HTTPS endpoint's, if any.
        let (pod_blobs, tls_blobs) = match (&opts.blob_tls, &fs_blobs) {
            (None, _) => (blobs.clone(), None),
            (Some(_), None) => bail!(
                "--blob-tls-cert serves the embedded blob store; with S3 the pods fetch from S3 itself"
            ),
            (Some(tls), Some(_)) => {
                let config = tuneplane_stores::blob_tls::server_config(&tls.cert, &tls.key)
                    .map_err(|e| anyhow::anyhow!("--blob-tls-cert: {e}"))?;
                let tcp = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
                    .await
                    .context("cannot listen for the HTTPS blob endpoint on 127.0.0.1")?;
                let base = format!("https://{}/blobs", tcp.local_addr()?);
                let store = FsBlobStore::open(dir.join("blobs"), secret.as_bytes(), base.clone())?;
                let listener = tuneplane_stores::blob_tls::TlsListener::new(tcp, config)?;
                let pod_blobs: Arc<dyn BlobStore> = Arc::new(store.clone());
                (pod_blobs, Some((listener, store, base)))
            }
        };
        let api_key = default_key(&dir, jobs.as_ref()).await?;
        // Parsed before anything starts, so a bad webhooks file fails startup cleanly.
        // Against the real test tier the API reaches playground pods on the node agent's pod
        // network (network namespaces on this machine's bridge); kubesim's pods are no hosts.
        let pod_networks = match &opts.cluster {
            ClusterChoice::Real { .. } => Some(TEST_TIER_POD_NETWORK),
            ClusterChoice::Simulated => None,
        };
        // Jobs' attempt grants (outputs and checkpoints): one key for the API and the reconciler,
        // kept with the data so a restarted stack honours the grants it handed out.
        let (grant_key, _) = persisted(&dir.join("grant-key"), || Ok(hex(&random::<32>()?)))?;
        let fn_config = functions_config(
            &dir,
            &secret,
            &pod_url,
            &grant_key,
            opts.webhooks.as_ref(),
            pod_networks,
        )?;
        let webhook_sources: Vec<String> = fn_config.webhooks.keys().cloned().collect();

        let mut rc = reconciler_config(&opts)?;
        let (sim, kube_config, kubeconfig, token) = match &opts.cluster {
            ClusterChoice::Simulated => {
                let sim = start_sim(&opts, &dir, &rc).await?;
                let kubeconfig = dir.join("kubeconfig");
                sim.write_kubeconfig(&kubeconfig, DEFAULT_NAMESPACE)?;
                let config = kube::Config::new(sim.url().parse().context("kubesim URL")?);
                (Some(sim), config, kubeconfig, None)
            }
            ClusterChoice::Real { kubeconfig } => {
                let (config, token) = real_cluster(kubeconfig, &dir).await?;
                (None, config, kubeconfig.clone(), Some(token))
            }
        };
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();

        // The API and the blob server on one port.
        let state =
            tuneplane_functions::runtime::state_with(&fn_config, jobs.clone(), blobs.clone());
        let console = console_keys(&dir)?;
        // Every change the API accepts (a submission, a stop, a playground) wakes the reconciler's
        // pass loop, so that the change is acted on at once rather than at the next pass interval:
        // one process holds both, which a deployment (Lambda and a Deployment) does not.
        let accepted = Arc::new(tokio::sync::Notify::new());
        let mut app = tuneplane_functions::app::router_with_console(state, console).layer(
            axum::middleware::from_fn_with_state(accepted.clone(), wake_on_accepted_change),
        );
        if let Some(fs_blobs) = fs_blobs {
            app = app.nest(
                "/blobs",
                tuneplane_stores::blob_server::router(fs_blobs, MAX_UPLOAD_BYTES),
            );
        }
        if let Some(l) = pod_listener {
            tasks.push(serve_until(
                l,
                app.clone(),
                stopped.clone(),
                "pods' API endpoint",
            ));
        }
        tasks.push(serve_until(listener, app, stopped.clone(), "API server"));
        let pod_blob_url = match tls_blobs {
            Some((listener, store, base)) => {
                let app = axum::Router::new().nest(
                    "/blobs",
                    tuneplane_stores::blob_server::router(store, MAX_UPLOAD_BYTES),
                );
                let what = "HTTPS blob endpoint";
                tasks.push(serve_until(listener, app, stopped.clone(), what));
                Some(base)
            }
            None => None,
        };

        // The reconciler, through a real kube client over HTTP.
        let client =
            kube::Client::try_from(tuneplane_reconciler::kube_io::client_config(kube_config))?;
        rc.render.gpu_passthrough = true;
        rc.render.delivery = opts.capsule_delivery;
        rc.identity = format!("dev-{}", std::process::id());
        rc.metrics_addr = SocketAddr::from(([127, 0, 0, 1], 0));
        // Pods reach the API on their own 127.0.0.1 (kubesim runs them here; the real tier's
        // node agent relays each pod's loopback ports to the host's: `pod_url`).
        rc.render.api_url = Some(pod_url.clone());
        // Callbacks may go to a receiver on this machine, and their links point at this API.
        rc.callbacks.allow_loopback = true;
        rc.callbacks.public_url = Some(api_url.clone());
        rc.render.grant_key = Some(
            tuneplane_core::grant::GrantKey::parse(&grant_key)
                .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("grant-key").display()))?,
        );
        let metrics = Arc::new(tuneplane_reconciler::metrics::Metrics::default());
        let reconciler =
            tuneplane_reconciler::Reconciler::new(rc, client, jobs.clone(), pod_blobs, metrics)
                .await
                .context("cannot start the reconciler")?;
        let (wake, mut s) = (reconciler.ctx().wake.clone(), stopped.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = accepted.notified() => wake.notify_one(),
                    _ = s.wait_for(|v| *v) => break,
                }
            }
        }));
        let mut s = stopped.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = s.wait_for(|v| *v).await;
            };
            if let Err(e) = reconciler.run_until(shutdown).await {
                tracing::error!(error = %e, "reconciler stopped");
            }
        }));

        let stack = Stack {
            api_url,
            api_key,
            webhook_sources,
            kubeconfig,
            pod_blob_url,
            jobs,
            blobs,
            sim,
            _token: token,
            stop,
            tasks,
            exec_dir: opts.execute.then(|| dir.join("exec")),
        };
        stack.wait_healthy().await?;
        Ok(stack)
    }

    async fn wait_healthy(&self) -> anyhow::Result<()> {
        let url = format!("{}/v1/healthz", self.api_url);
        for _ in 0..100 {
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the API did not answer at {url}")
    }

    /// Stops the API and the reconciler and waits for them.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        // Jobs' processes (execution mode) end with the stack, children included; another
        // stack in this process keeps its own.
        if let Some(dir) = &self.exec_dir {
            tuneplane_kubesim::exec::kill_all(dir);
        }
    }
}

/// Serves `app` on `listener` until `stopped` turns true (open requests finish first).
fn serve_until<L>(
    listener: L,
    app: axum::Router,
    mut stopped: watch::Receiver<bool>,
    what: &'static str,
) -> JoinHandle<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|v| *v).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "{what} stopped");
        }
    })
}

/// kubesim over the options' fleet, in execution mode unless turned off.
async fn start_sim(
    opts: &StackOptions,
    dir: &Path,
    rc: &tuneplane_reconciler::Config,
) -> anyhow::Result<KubeSim> {
    let scenario = Scenario {
        image_pull_failures: opts.unpullable_images.clone(),
        ..Scenario::default()
    };
    // The reconciler's own namespace (its Lease lives there) exists from the start.
    let mut namespaces = SimConfig::default().namespaces;
    namespaces.push(rc.namespace.clone());
    KubeSim::start(SimConfig {
        fleet: Some(opts.fleet.clone()),
        namespaces,
        scenario,
        exec_dir: opts.execute.then(|| dir.join("exec")),
        ..SimConfig::default()
    })
    .await
    .context("cannot start the simulated cluster")
}

/// The reconciler's client configuration for a real cluster: the kubeconfig's credentials apply
/// the reconciler's ServiceAccount and RBAC (`infra/kustomize`), then the reconciler uses a token
/// of that ServiceAccount (renewed in the background).
async fn real_cluster(
    kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<(kube::Config, tuneplane_reconciler::access::TokenRefresher)> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read the kubeconfig {}", kubeconfig.display()))?;
    let admin =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("cannot use the kubeconfig {}", kubeconfig.display()))?;
    let server = admin.cluster_url.to_string();
    tuneplane_reconciler::access::service_account_config(&admin, &dir.join("reconciler.token"))
        .await
        .with_context(|| {
            format!(
                "cannot set up the reconciler's ServiceAccount on {server} (the kubeconfig needs rights to create namespaces, RBAC and tokens)"
            )
        })
}

type Stores = (Arc<dyn JobStore>, Arc<dyn BlobStore>, Option<FsBlobStore>);

/// The stores of `backend`; the filesystem blob store is returned again so its server can be mounted.
async fn stores(
    backend: &Backend,
    dir: &Path,
    secret: &str,
    api_url: &str,
) -> anyhow::Result<Stores> {
    match backend {
        Backend::Embedded => {
            let jobs: Arc<dyn JobStore> = Arc::new(EmbeddedJobStore::open(dir.join("jobs"))?);
            let fs = FsBlobStore::open(
                dir.join("blobs"),
                secret.as_bytes(),
                format!("{api_url}/blobs"),
            )?;
            Ok((jobs, Arc::new(fs.clone()), Some(fs)))
        }
        Backend::Aws { table, bucket } => {
            use tuneplane_stores::{aws, dynamo, s3};
            let sdk = aws::load_config().await;
            let path_style = sdk.endpoint_url().is_some();
            let ddb = aws::dynamodb_client(&sdk, None);
            dynamo::table::create_table(&ddb, table)
                .await
                .with_context(|| format!("cannot create table {table}"))?;
            let blobs = s3::S3BlobStore::new(aws::s3_client(&sdk, path_style), bucket.clone());
            blobs
                .ensure_bucket()
                .await
                .with_context(|| format!("cannot create bucket {bucket}"))?;
            Ok((
                Arc::new(dynamo::DynamoJobStore::new(ddb, table.clone())),
                Arc::new(blobs),
                None,
            ))
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `default` tenant's key: created on first start, kept in the data dir afterwards. A kept
/// key that was revoked (`tuneplane admin keys revoke`) or is no longer in the store is replaced
/// by a new one, so the banner never shows a key the API refuses.
async fn default_key(dir: &Path, jobs: &dyn JobStore) -> anyhow::Result<String> {
    let path = dir.join("api-key");
    if let Ok(key) = std::fs::read_to_string(&path)
        && !key.trim().is_empty()
    {
        let key = key.trim().to_string();
        let stored = jobs
            .get_api_key(&tuneplane_core::store::hash_api_key(&key))
            .await
            .context("cannot read the dev API key's record")?;
        match stored {
            Some(record) if record.revoked_at_ms.is_none() => return Ok(key),
            Some(_) => eprintln!(
                "the dev API key in {} was revoked: making a new one",
                path.display()
            ),
            None => eprintln!(
                "the dev API key in {} is not in the store: making a new one",
                path.display()
            ),
        }
    }
    let scopes = vec![SCOPE_JOBS_READ.to_string(), SCOPE_JOBS_WRITE.to_string()];
    let (secret, record) = new_api_key(
        random::<20>()?,
        &DEFAULT_TENANT.parse()?,
        scopes,
        "dev",
        tuneplane_reconciler::now_ms(),
    );
    jobs.put_api_key(&record)
        .await
        .context("cannot store the API key")?;
    std::fs::write(&path, &secret).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(secret)
}

/// The pod network of the real test tier's node agent (`tuneplane-kubesim agent`: one network
/// namespace per pod on the `tp-pods0` bridge, 10.244.0.0/16).
pub const TEST_TIER_POD_NETWORK: &str = "10.244.0.0/16";

/// The functions' configuration for the dev stack, from the same variables Lambda reads
/// (`TUNEPLANE_WEBHOOKS` from `webhooks`).
fn functions_config(
    dir: &Path,
    secret: &str,
    api_url: &str,
    grant_key: &str,
    webhooks: Option<&WebhookSources>,
    pod_networks: Option<&str>,
) -> anyhow::Result<tuneplane_functions::config::Config> {
    use tuneplane_functions::config::{
        ENV_BLOB_SECRET, ENV_BLOB_URL, ENV_CALLBACKS_ALLOW_LOOPBACK, ENV_DATA_DIR, ENV_GRANT_KEY,
        ENV_PLAYGROUND_POD_CIDRS, ENV_RATE_LIMIT_PER_KEY, ENV_RATE_LIMIT_PER_SOURCE, ENV_SCRATCH,
        ENV_WEBHOOKS,
    };
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let mut vars = vec![
        (ENV_DATA_DIR, dir.display().to_string()),
        (ENV_BLOB_SECRET, secret.to_string()),
        (ENV_BLOB_URL, format!("{api_url}/blobs")),
        (ENV_SCRATCH, scratch.display().to_string()),
        (ENV_GRANT_KEY, grant_key.to_owned()),
        // A receiver on this machine may be tried (http:// to loopback).
        (ENV_CALLBACKS_ALLOW_LOOPBACK, "1".to_owned()),
    ];
    if let Some(w) = webhooks {
        vars.push((ENV_WEBHOOKS, w.json.clone()));
    }
    if let Some(networks) = pod_networks {
        vars.push((ENV_PLAYGROUND_POD_CIDRS, networks.to_owned()));
    }
    // One local user, every request from 127.0.0.1: the API's rate limits stay off in dev.
    vars.push((ENV_RATE_LIMIT_PER_KEY, "off".to_owned()));
    vars.push((ENV_RATE_LIMIT_PER_SOURCE, "off".to_owned()));
    tuneplane_functions::config::Config::from_lookup(|k| {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .map_err(|e| match webhooks {
        // The message names the source and field, never a secret (see webhooks::sources).
        Some(w) if e.var == ENV_WEBHOOKS => {
            anyhow::anyhow!("webhook sources in {}: {}", w.origin, e.message)
        }
        _ => anyhow::anyhow!("{e}"),
    })
}

/// Notifies `accepted` after every successful request that can change what the reconciler does
/// (any method but GET and HEAD).
async fn wake_on_accepted_change(
    axum::extract::State(accepted): axum::extract::State<Arc<tokio::sync::Notify>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let changes = !matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let response = next.run(request).await;
    if changes && response.status().is_success() {
        accepted.notify_one();
    }
    response
}
