//! The `kubesim` binary: a simulated Kubernetes API server with a GPU fleet, for `tuneplane dev`
//! and manual checks with kubectl; writes a kubeconfig pointing at itself. `kubesim agent` instead
//! plays the kubelet of a fleet's fake nodes against a real API server.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tuneplane_core::fleet::Fleet;
use tuneplane_kubesim::agent::{AgentConfig, TlsFiles};
use tuneplane_kubesim::{KubeSim, SimConfig};

/// Simulated Kubernetes API server, GPU fleet, scheduler, kubelet and KubeRay.
#[derive(Debug, Parser)]
#[command(name = "kubesim", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    sim: SimArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play the kubelet of the fleet's fake nodes against a real Kubernetes API server.
    Agent(AgentArgs),
}

/// Options of the simulator (no subcommand).
#[derive(Debug, Args)]
struct SimArgs {
    /// Fleet file (node groups with GPU series, sizes and states).
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "kubesim.kubeconfig")]
    kubeconfig: PathBuf,
    /// Default namespace of the kubeconfig context.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Execution mode: really run CPU pods and RayJob entrypoints under this data directory.
    #[arg(long)]
    exec_dir: Option<PathBuf>,
    /// Images whose pull fails (repeatable).
    #[arg(long = "fail-image")]
    fail_images: Vec<String>,
    /// Images whose containers crash (repeatable).
    #[arg(long = "crash-image")]
    crash_images: Vec<String>,
    /// Seconds a simulated RayJob runs when its annotations do not say.
    #[arg(long, default_value_t = 5.0)]
    rayjob_seconds: f64,
    /// Do not serve ray.io types nor run the KubeRay simulation.
    #[arg(long)]
    no_kuberay: bool,
}

/// Options of `kubesim agent`.
#[derive(Debug, Args)]
struct AgentArgs {
    /// Fleet file whose nodes the agent registers and plays.
    #[arg(long)]
    fleet: PathBuf,
    /// Print the fleet's node names, one a line, and exit (no cluster needed).
    #[arg(long)]
    list_nodes: bool,
    /// Kubeconfig of the API server (with rights on nodes, leases, pods and events).
    #[arg(long, required_unless_present = "list_nodes")]
    kubeconfig: Option<PathBuf>,
    /// Port of the kubelet endpoint (container logs) on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// Certificate (PEM) of the kubelet endpoint; without it the endpoint speaks plain HTTP.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of the kubelet endpoint.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// File written (with the node names) once every node is registered.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Images whose pull fails (repeatable).
    #[arg(long = "fail-image")]
    fail_images: Vec<String>,
    /// Images whose containers crash (repeatable).
    #[arg(long = "crash-image")]
    crash_images: Vec<String>,
    /// Seconds pods meant to end (restartPolicy Never/OnFailure) run before exiting 0 when their
    /// annotations do not say (default: until deleted); Always pods run until deleted.
    #[arg(long)]
    pod_seconds: Option<f64>,
    /// Seconds between a pod being bound and its containers running.
    #[arg(long, default_value_t = 0.2)]
    start_seconds: f64,
    /// Pretend to run pods (timings and outcomes from the options above and the pods'
    /// annotations; no process runs and pods get no IP), as for the 1,000-node comparison runs.
    /// Without it pods really run, which needs root and --images.
    #[arg(long)]
    simulate: bool,
    /// The image map: which runtime on this machine plays each container image (real
    /// execution; testenv/images.yaml in the TunePlane checkout).
    #[arg(long, required_unless_present_any = ["simulate", "list_nodes"])]
    images: Option<PathBuf>,
    /// Folder of the real pods' files (volumes, home, tmp), the hosts file and the resolver file.
    #[arg(long, default_value = ".tuneplane-agent")]
    data_dir: PathBuf,
    /// A CA certificate (PEM) the pods trust besides the machine's, as a node image with an
    /// organisation's CA installed would: `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE` of every
    /// container name a bundle of both (real execution; `scripts/k8s-up.sh` passes the CA of the
    /// dev blob server's HTTPS certificate).
    #[arg(long)]
    trust_ca: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt().with_env_filter(
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
    );
    // The agent's stdout carries only its result lines (and `--list-nodes`' names).
    match cli.command {
        Some(Command::Agent(_)) => logs
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
        None => logs.init(),
    }
    match cli.command {
        Some(Command::Agent(args)) => agent(args).await,
        None => simulator(cli.sim).await,
    }
}

async fn simulator(args: SimArgs) -> anyhow::Result<()> {
    let mut config = SimConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], args.port)),
        kuberay: !args.no_kuberay,
        exec_dir: args.exec_dir.clone(),
        ..SimConfig::default()
    };
    if let Some(path) = &args.fleet {
        config = config
            .with_fleet_file(path)
            .with_context(|| format!("loading fleet {}", path.display()))?;
    }
    config.scenario.image_pull_failures = args.fail_images;
    config.scenario.crash_images = args.crash_images;
    config.scenario.rayjob_run = Duration::from_secs_f64(args.rayjob_seconds.max(0.0));
    let sim = KubeSim::start(config).await?;
    sim.write_kubeconfig(&args.kubeconfig, &args.namespace)?;
    println!(
        "kubesim listening on {} (kubeconfig: {})",
        sim.url(),
        args.kubeconfig.display()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}

fn load_fleet(path: &Path) -> anyhow::Result<Fleet> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading fleet file {}", path.display()))?;
    Fleet::from_yaml(&text).with_context(|| format!("loading fleet {}", path.display()))
}

async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let fleet = load_fleet(&args.fleet)?;
    if args.list_nodes {
        for node in tuneplane_kubesim::fleet::nodes(&fleet) {
            println!("{}", tuneplane_kubesim::json::name(&node));
        }
        return Ok(());
    }
    let execution = match (&args.images, args.simulate) {
        (_, true) => None,
        (None, false) => anyhow::bail!(
            "real execution needs --images FILE (the image map, testenv/images.yaml in the TunePlane checkout); pass --simulate to pretend instead"
        ),
        (Some(map), false) => {
            let images =
                tuneplane_kubesim::agent::real::ImageMap::load(map).map_err(anyhow::Error::msg)?;
            if !tuneplane_kubesim::agent::real::net::is_root() {
                anyhow::bail!(
                    "real execution needs root (network namespaces, veth pairs and mounts for every pod); run as root, or pass --simulate to pretend"
                );
            }
            Some(tuneplane_kubesim::agent::RealConfig {
                data_dir: args.data_dir.clone(),
                images,
                trust_ca: args.trust_ca.clone(),
            })
        }
    };
    let path = args
        .kubeconfig
        .as_deref()
        .context("--kubeconfig is required")?;
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let client_config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    let client = kube::Client::try_from(client_config).context("building the API client")?;
    let mut config = AgentConfig::new(fleet);
    config.kubelet_port = Some(args.kubelet_port);
    config.tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    config.ready_file = args.ready_file;
    config.scenario.image_pull_failures = args.fail_images;
    config.scenario.crash_images = args.crash_images;
    config.scenario.pod_run = args
        .pod_seconds
        .map(|s| Duration::from_secs_f64(s.max(0.0)));
    config.scenario.start_delay = Duration::from_secs_f64(args.start_seconds.max(0.0));
    config.execution = execution;
    let agent = tuneplane_kubesim::agent::start(client, config)
        .await
        .context("starting the node agent")?;
    println!(
        "kubesim agent: {} node(s) registered, kubelet endpoint on {}",
        agent.node_names().len(),
        agent
            .kubelet_addr()
            .map_or_else(|| "none".to_string(), |a| a.to_string())
    );
    wait_for_stop_signal().await?;
    tracing::info!("stopping the node agent");
    agent.shutdown().await;
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM (what `scripts/k8s-down.sh` sends).
async fn wait_for_stop_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
