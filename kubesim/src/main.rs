//! The `kubesim` binary: a simulated Kubernetes API server with a GPU fleet, for `tuneplane dev`
//! and manual checks with kubectl. Writes a kubeconfig pointing at itself.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tuneplane_kubesim::{KubeSim, SimConfig};

/// Simulated Kubernetes API server, GPU fleet, scheduler, kubelet and KubeRay.
#[derive(Debug, Parser)]
#[command(name = "kubesim", version)]
struct Args {
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
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
