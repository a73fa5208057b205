//! `tuneplane dev`: start the stack, print how to reach it, run until Ctrl-C.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tuneplane_core::fleet::Fleet;

use super::{Stack, StackOptions, UNPULLABLE_IMAGE};

/// Arguments of `dev`.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Where state lives (jobs, blobs, logs, kubeconfig); kept across restarts.
    #[arg(long, default_value = ".tuneplane-dev")]
    pub data_dir: PathBuf,
    /// API port on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Fleet file for the simulated cluster [default: examples/fleet.yaml when this directory has
    /// one, else the examples' fleet built into the binary].
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    /// Images the simulated kubelet cannot pull (repeatable); the bad-image example's is included.
    #[arg(long = "fail-image")]
    pub fail_images: Vec<String>,
    /// Simulate pods instead of running their commands on this machine.
    #[arg(long)]
    pub no_exec: bool,
    /// Run the reconciler against this cluster instead of kubesim (its nodes are the fleet; the
    /// kubeconfig's credentials set up the reconciler's ServiceAccount and RBAC).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Webhook sources: a JSON file like `TUNEPLANE_WEBHOOKS` (`{"<source>": {"secret",
    /// "tenant", "scheme": "tuneplane"|"hub", "template"?}}`). Without it, `TUNEPLANE_WEBHOOKS`
    /// is read when set.
    #[arg(long, value_name = "FILE")]
    pub webhooks: Option<PathBuf>,
    /// How Ray pods get the capsule: `presigned` (Ray downloads the presigned URL as its
    /// `working_dir`) or `init-container` (an init container downloads and verifies it onto a
    /// shared volume; `working_dir` is then a `file://` path).
    #[arg(
        long,
        env = "TUNEPLANE_CAPSULE_DELIVERY",
        default_value = "presigned",
        value_name = "MODE"
    )]
    pub capsule_delivery: String,
    /// Serve presigned blob URLs for pods over HTTPS with this certificate (PEM, for IP
    /// 127.0.0.1, from a CA the pods trust: `scripts/k8s-up.sh` makes one and the node agent
    /// trusts its CA). The API, and uploads through it, stay on HTTP. Needs --blob-tls-key.
    #[arg(
        long,
        env = "TUNEPLANE_BLOB_TLS_CERT",
        value_name = "PEM",
        requires = "blob_tls_key"
    )]
    pub blob_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --blob-tls-cert.
    #[arg(
        long,
        env = "TUNEPLANE_BLOB_TLS_KEY",
        value_name = "PEM",
        requires = "blob_tls_cert"
    )]
    pub blob_tls_key: Option<PathBuf>,
}

/// The webhook sources of `--webhooks FILE`, else of `TUNEPLANE_WEBHOOKS` (`env`), else none.
pub fn webhook_sources(
    file: Option<&std::path::Path>,
    env: Option<String>,
) -> anyhow::Result<Option<super::WebhookSources>> {
    use tuneplane_functions::config::ENV_WEBHOOKS;
    if let Some(path) = file {
        let json = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the webhooks file {}", path.display()))?;
        return Ok(Some(super::WebhookSources {
            json,
            origin: path.display().to_string(),
        }));
    }
    Ok(env
        .filter(|v| !v.trim().is_empty())
        .map(|json| super::WebhookSources {
            json,
            origin: ENV_WEBHOOKS.to_owned(),
        }))
}

impl DevArgs {
    /// The stack options these arguments ask for.
    pub fn options(&self) -> anyhow::Result<StackOptions> {
        // A real cluster's own nodes are the fleet; the fleet file only shapes kubesim.
        let fleet = if self.kubeconfig.is_some() {
            Fleet {
                node_groups: Vec::new(),
            }
        } else {
            let local = PathBuf::from("examples/fleet.yaml");
            match self.fleet.as_ref().or(local.is_file().then_some(&local)) {
                Some(path) => {
                    let text = std::fs::read_to_string(path).with_context(|| {
                        format!("cannot read the fleet file {}", path.display())
                    })?;
                    Fleet::from_yaml(&text).with_context(|| format!("in {}", path.display()))?
                }
                None => Fleet::from_yaml(crate::examples::fleet_yaml())
                    .context("in the built-in examples/fleet.yaml")?,
            }
        };
        let mut unpullable = vec![UNPULLABLE_IMAGE.to_string()];
        unpullable.extend(self.fail_images.iter().cloned());
        Ok(StackOptions {
            data_dir: self.data_dir.clone(),
            port: self.port,
            fleet,
            execute: !self.no_exec,
            unpullable_images: unpullable,
            pass_interval: Duration::from_millis(500),
            backend: super::Backend::Embedded,
            webhooks: webhook_sources(
                self.webhooks.as_deref(),
                std::env::var(tuneplane_functions::config::ENV_WEBHOOKS).ok(),
            )?,
            capsule_delivery: tuneplane_core::render::CapsuleDelivery::parse(&self.capsule_delivery)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--capsule-delivery (TUNEPLANE_CAPSULE_DELIVERY): {:?}: use presigned or init-container",
                        self.capsule_delivery
                    )
                })?,
            blob_tls: match (&self.blob_tls_cert, &self.blob_tls_key) {
                (Some(cert), Some(key)) => Some(super::BlobTls {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            preemption_min_run: None,
            cluster: match &self.kubeconfig {
                Some(path) => super::ClusterChoice::Real {
                    kubeconfig: path.clone(),
                },
                None => super::ClusterChoice::Simulated,
            },
        })
    }
}

/// Runs the stack until Ctrl-C.
pub fn run(args: &DevArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options()?;
    init_logs();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stack = Stack::start(opts).await?;
        println!(
            "TunePlane dev stack is up (data in {})",
            args.data_dir.display()
        );
        println!();
        println!("  API:        {}", stack.api_url);
        println!(
            "  console:    {}{}   (sign in with the API key)",
            stack.api_url,
            tuneplane_functions::console::BASE
        );
        println!("  API key:    {}   (tenant default)", stack.api_key);
        for source in &stack.webhook_sources {
            println!("  webhook:    {}/v1/webhooks/{source}", stack.api_url);
        }
        if let Some(url) = &stack.pod_blob_url {
            println!("  pods fetch: {url}/...   (HTTPS, presigned)");
        }
        println!("  kubeconfig: {}", stack.kubeconfig.display());
        if stack.sim.is_none() {
            println!(
                "  cluster:    the kubeconfig's; the reconciler acts as system:serviceaccount:{}:{}",
                tuneplane_reconciler::access::SYSTEM_NAMESPACE,
                tuneplane_reconciler::access::SERVICE_ACCOUNT
            );
        }
        println!();
        println!(
            "  export TUNEPLANE_API={} TUNEPLANE_API_KEY={}",
            stack.api_url, stack.api_key
        );
        println!("  tuneplane submit {} --wait", examples_dir(&args.data_dir).join("hello-cpu").display());
        println!(
            "  kubectl --kubeconfig {} get nodes,pods,rayjobs -A",
            stack.kubeconfig.display()
        );
        println!();
        println!("Ctrl-C (or SIGTERM) stops everything, the jobs' processes included; state stays in the data dir.");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot wait for SIGTERM")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("cannot wait for Ctrl-C")?,
            _ = term.recv() => {}
        }
        eprintln!("\nstopping ...");
        stack.shutdown().await;
        eprintln!("stopped");
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// `examples` when this directory has them, else the built-in examples written to the data dir
/// (so the banner's submit command works from anywhere).
fn examples_dir(data_dir: &std::path::Path) -> PathBuf {
    let local = PathBuf::from("examples");
    if local.join("hello-cpu").is_dir() {
        return local;
    }
    crate::examples::write_to(&data_dir.join("examples")).unwrap_or(local)
}

/// Logs to stderr; `RUST_LOG` chooses what (default: warnings, plus the platform's own info).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "warn,tuneplane_reconciler=info,tuneplane_functions=info",
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::term::colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_target(false)
        .try_init();
}
