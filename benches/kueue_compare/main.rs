//! TunePlane and Kueue side by side on one real control plane (BENCHMARKS.md, "TunePlane and
//! Kueue on the same control plane"). Run through `scripts/kueue-compare.sh`, which builds what it
//! needs and passes the paths; `--help` lists the options.
//!
//! For every workload and each system in turn, the harness brings up a fresh control plane
//! (`scripts/k8s-up.sh`: etcd, kube-apiserver, controller manager, scheduler, KubeRay operator and
//! a fleet of fake GPU nodes played by `kubesim agent`), starts the system, submits the workload,
//! watches the cluster until every job is admitted and every admitted pod is bound (or nothing has
//! changed for a while), and records:
//! - admissions per second and the time from submission to admission (p50/p99): TunePlane admits
//!   a job when its RayJob or Pod appears, Kueue when it unsuspends the RayJob or Job; both are
//!   seen by the same watch in this process;
//! - the time until every admitted pod is bound (`spec.nodeName` set);
//! - API requests per admitted job, from the API server's `apiserver_request_total`;
//! - the controller process's CPU seconds and peak resident memory (`/proc`);
//! - gang jobs left partially placed at the end.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // a benchmark: a panic is a failed run

mod kueue;
mod observe;
mod report;
mod tuneplane_side;
mod workload;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::observe::Observer;
use crate::workload::{Shape, Workload};

/// Fleet of the comparison: four GPU series of 250 nodes, 8 GPUs, 128 CPUs and 1 TiB each.
pub const SERIES: [&str; 4] = ["h200", "h100", "a100", "l40s"];
pub const NODES_PER_SERIES: u32 = 250;
pub const NODE_GPUS: u32 = 8;
pub const NODE_CPUS: u32 = 128;
pub const NODE_MEMORY_GB: u32 = 1024;

/// The label both systems' workloads and pods carry: the harness's key of the job.
pub const KEY_LABEL: &str = "benchkey";

/// Client-side rate limit of both controllers: Kueue's shipped configuration
/// (`clientConnection: {qps: 50, burst: 100}`), given to TunePlane as `TUNEPLANE_KUBE_QPS/BURST`.
pub const CONTROLLER_QPS: u32 = 50;
pub const CONTROLLER_BURST: u32 = 100;
/// kube-controller-manager's rate limit in every run (its default, 20/30, would make the Job
/// controller, not the systems compared, the bottleneck of Kueue's batch/Job path).
pub const KCM_ARGS: &str = "--kube-api-qps=100 --kube-api-burst=200";
/// Concurrent submitters of the harness.
pub const SUBMITTERS: usize = 16;

const HELP: &str = "\
kueue_compare: TunePlane and Kueue on one real control plane (see BENCHMARKS.md)

  cargo bench --bench kueue_compare -- --kueue DIR --agent FILE [options]

  --kueue DIR        Kueue build from scripts/kueue-build.sh (bin/kueue, crds/)
  --agent FILE       the node agent binary (kubesim, release build)
  --out DIR          results and cluster state (default target/kueue-compare)
  --systems LIST     tuneplane,kueue (default both, in that order)
  --workloads LIST   small,gang,fair (default all three)
  --small N          jobs of the small workload (default 5000)
  --gang N           jobs of the gang workload (default 1000)
  --flood N          jobs of the flooding tenant in the fair workload (default 1000)
  --port PORT        the API server's port (default 16443)
  --timeout SECS     longest a run may take once submission starts (default 240)
  --quiet SECS       with the fleet full, a run ends once every admitted pod is bound and
                     nothing was admitted for this long; it stops as stalled when nothing
                     was admitted, created or bound for this long (default 15)
";

#[derive(Debug, Clone)]
pub struct Options {
    pub root: PathBuf,
    pub kueue: PathBuf,
    pub agent: PathBuf,
    pub out: PathBuf,
    pub systems: Vec<System>,
    pub workloads: Vec<Shape>,
    pub small: usize,
    pub gang: usize,
    pub flood: usize,
    pub port: u16,
    pub timeout: Duration,
    pub quiet: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    TunePlane,
    Kueue,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::TunePlane => "tuneplane",
            System::Kueue => "kueue",
        }
    }
}

fn parse_args(args: &[String]) -> anyhow::Result<Options> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut o = Options {
        kueue: PathBuf::new(),
        agent: PathBuf::new(),
        out: root.join("target/kueue-compare"),
        root,
        systems: vec![System::TunePlane, System::Kueue],
        workloads: vec![Shape::Small, Shape::Gang, Shape::Fair],
        small: 5000,
        gang: 1000,
        flood: 1000,
        port: 16443,
        // The whole comparison (six runs and six fresh clusters) fits in 30 minutes on 2 cores with
        // the build; a run cut by the time limit reports what it admitted by then.
        timeout: Duration::from_secs(240),
        quiet: Duration::from_secs(15),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value (see --help)"))
        };
        let number = |name: &str, v: String| -> anyhow::Result<usize> {
            v.parse()
                .with_context(|| format!("{name} {v:?}: expected a whole number"))
        };
        match a.as_str() {
            "--bench" => {} // added by `cargo bench`
            "--kueue" => o.kueue = PathBuf::from(value(a)?),
            "--agent" => o.agent = PathBuf::from(value(a)?),
            "--out" => o.out = PathBuf::from(value(a)?),
            "--systems" => {
                o.systems = value(a)?
                    .split(',')
                    .map(|s| match s {
                        "tuneplane" => Ok(System::TunePlane),
                        "kueue" => Ok(System::Kueue),
                        other => bail!("--systems: unknown system {other:?} (tuneplane, kueue)"),
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "--workloads" => {
                o.workloads = value(a)?
                    .split(',')
                    .map(|s| match s {
                        "small" => Ok(Shape::Small),
                        "gang" => Ok(Shape::Gang),
                        "fair" => Ok(Shape::Fair),
                        other => {
                            bail!("--workloads: unknown workload {other:?} (small, gang, fair)")
                        }
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "--small" => o.small = number(a, value(a)?)?,
            "--gang" => o.gang = number(a, value(a)?)?,
            "--flood" => o.flood = number(a, value(a)?)?,
            "--port" => o.port = number(a, value(a)?)? as u16,
            "--timeout" => o.timeout = Duration::from_secs(number(a, value(a)?)? as u64),
            "--quiet" => o.quiet = Duration::from_secs(number(a, value(a)?)? as u64),
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if !o.kueue.join("bin/kueue").is_file() {
        bail!(
            "--kueue {}: no bin/kueue there (scripts/kueue-build.sh prints the folder)",
            o.kueue.display()
        );
    }
    if !o.agent.is_file() {
        bail!(
            "--agent {}: not a file (cargo build --profile bench --bin kubesim)",
            o.agent.display()
        );
    }
    Ok(o)
}

/// The fleet file of the comparison.
fn write_fleet(path: &Path) -> anyhow::Result<()> {
    let mut s = String::from(
        "# Written by the Kueue comparison: 4 GPU series x 250 nodes, no taints.\nnode_groups:\n",
    );
    for series in SERIES {
        s.push_str(&format!(
            "  - {{name: {series}, series: {series}, count: {NODES_PER_SERIES}, gpus: {NODE_GPUS}, cpus: {NODE_CPUS}, memory_gb: {NODE_MEMORY_GB}}}\n"
        ));
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

/// A fresh control plane with the fleet; returns the admin kubeconfig.
fn cluster_up(o: &Options, fleet: &Path) -> anyhow::Result<PathBuf> {
    let dir = o.out.join("cluster");
    let out = Command::new(o.root.join("scripts/k8s-up.sh"))
        .args(["--fleet", &fleet.display().to_string()])
        .args(["--dir", &dir.display().to_string()])
        .args(["--port", &o.port.to_string()])
        .env("TUNEPLANE_K8S_AGENT_BIN", &o.agent)
        // Pods run until deleted: the runs measure admission and binding, not completion.
        .env("TUNEPLANE_K8S_AGENT_ARGS", "--simulate --start-seconds 0.2")
        .env("TUNEPLANE_K8S_KCM_ARGS", KCM_ARGS)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running scripts/k8s-up.sh")?;
    if !out.status.success() {
        bail!("scripts/k8s-up.sh failed ({})", out.status);
    }
    let path = String::from_utf8(out.stdout)?
        .lines()
        .last()
        .context("k8s-up printed no kubeconfig")?
        .to_string();
    Ok(PathBuf::from(path))
}

fn cluster_down(o: &Options) {
    let _ = Command::new(o.root.join("scripts/k8s-down.sh"))
        .args([
            "--dir",
            &o.out.join("cluster").display().to_string(),
            "--quiet",
        ])
        .status();
}

pub async fn kube_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    config.read_timeout = Some(Duration::from_secs(300));
    Ok(kube::Client::try_from(config)?)
}

/// Waits until the API server lists every node of the fleet as Ready.
async fn wait_nodes(client: &kube::Client, want: usize) -> anyhow::Result<()> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let list = nodes.list(&Default::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {want} nodes Ready after 180 s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One system on one workload, from a fresh control plane.
async fn run_one(o: &Options, fleet: &Path, system: System, shape: Shape) -> anyhow::Result<Value> {
    eprintln!(
        "[kueue-compare] === {} / {} ===",
        system.name(),
        shape.name()
    );
    let kubeconfig = cluster_up(o, fleet)?;
    let client = kube_client(&kubeconfig).await?;
    let fleet_nodes = SERIES.len() * NODES_PER_SERIES as usize;
    wait_nodes(&client, fleet_nodes).await?;
    let work = o.out.join(format!("{}-{}", system.name(), shape.name()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;

    let workload = Workload::new(shape, o);
    let mut controller = match system {
        System::TunePlane => tuneplane_side::start(&kubeconfig, &work, fleet_nodes).await?,
        System::Kueue => kueue::start(o, &client, &kubeconfig, &work).await?,
    };
    eprintln!(
        "[kueue-compare] {} ready (pid {}); submitting {} job(s)",
        system.name(),
        controller.pid,
        workload.jobs.len()
    );

    let observer = Observer::start(client.clone(), system).await?;
    let requests_before = report::apiserver_requests(&client).await?;
    let cpu_before = report::cpu_seconds(controller.pid)?;
    let started = Instant::now();
    let outcome = workload
        .run(&controller, &client, &observer, o, started)
        .await;
    let cpu_after = report::cpu_seconds(controller.pid)?;
    let peak_mib = report::peak_rss_mib(controller.pid)?;
    let requests_after = report::apiserver_requests(&client).await?;
    observer.stop();
    controller.stop();
    cluster_down(o);
    let outcome = outcome?;

    let figures = report::figures(
        &workload,
        &outcome,
        &observer.snapshot(),
        started,
        &report::RequestDelta::between(&requests_before, &requests_after),
        cpu_after - cpu_before,
        peak_mib,
    );
    let result = json!({"system": system.name(), "workload": shape.name(), "figures": figures});
    eprintln!("[kueue-compare] {}", result);
    Ok(result)
}

/// A controller process started for a run.
pub struct Controller {
    pub pid: u32,
    pub child: std::process::Child,
    /// TunePlane: API URL and the keys of tenants `default` and `team-b`.
    pub api: Option<tuneplane_side::ApiAccess>,
}

impl Controller {
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(tuneplane_side::SERVE) {
        return tuneplane_side::serve(&args[1..]);
    }
    // `cargo bench` over every target runs this one without options: it needs Kueue and a
    // control plane, which scripts/kueue-compare.sh builds, so it says so and steps aside.
    if args.iter().all(|a| a == "--bench") {
        eprintln!(
            "kueue_compare: skipped; run scripts/kueue-compare.sh (it builds Kueue and the control plane and passes --kueue and --agent)"
        );
        return Ok(());
    }
    let o = parse_args(&args)?;
    std::fs::create_dir_all(&o.out)?;
    let fleet = o.out.join("fleet.yaml");
    write_fleet(&fleet)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let begun = Instant::now();
    let mut results = Vec::new();
    for &shape in &o.workloads {
        for &system in &o.systems {
            let r = rt.block_on(run_one(&o, &fleet, system, shape));
            match r {
                Ok(v) => results.push(v),
                Err(e) => {
                    cluster_down(&o);
                    return Err(e.context(format!("{} / {}", system.name(), shape.name())));
                }
            }
        }
    }
    let doc = json!({
        "machine": report::machine(),
        "versions": report::versions(&o),
        "settings": report::settings(&o),
        "results": results,
        "elapsed_seconds": begun.elapsed().as_secs(),
    });
    let json_path = o.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
    let md = report::markdown(&doc);
    let md_path = o.out.join("results.md");
    std::fs::write(&md_path, &md)?;
    println!("{md}");
    eprintln!(
        "[kueue-compare] done in {} s: {} and {}",
        begun.elapsed().as_secs(),
        json_path.display(),
        md_path.display()
    );
    Ok(())
}
