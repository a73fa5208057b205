//! TunePlane and Kueue side by side on one real control plane (BENCHMARKS.md, "TunePlane and
//! Kueue on the same control plane"). Run through `scripts/kueue-compare.sh`, which builds what it
//! needs and passes the paths; `--help` lists the options.
//!
//! For every workload and each setup in turn (TunePlane, Kueue as shipped, Kueue tuned as its
//! maintainers advise, each at a client QPS of the sweep), the harness brings up a fresh control
//! plane (`scripts/k8s-up.sh`: etcd, kube-apiserver, controller manager, scheduler, KubeRay operator
//! and a fleet of fake GPU nodes played by `kubesim agent`), starts the system, submits the
//! workload, watches the cluster until every job is admitted and every admitted pod is bound (or
//! nothing has changed for a while), and records:
//! - admissions per second, and per job a timeline from the start of its submission: the system's
//!   decision (TunePlane: the job record's admission; Kueue: its Workload's `QuotaReserved` and
//!   `Admitted`), its workload able to run (TunePlane: the RayJob or Pod exists; Kueue: unsuspended),
//!   its first pod bound and all its pods bound; medians and p95s of each;
//! - API requests per admitted job: the controller's own (its ServiceAccount in the audit log, the
//!   same policy for both) and everyone's (`apiserver_request_total`, node heartbeats left out);
//!   the harness's own submissions are counted for neither;
//! - the controller process's CPU time per admitted job and its peak resident memory (`/proc`);
//! - gang jobs left partially placed at the end, and for a run that did not complete, why
//!   (KubeRay's backlog, pending pods, Workload conditions);
//! - every component's log, kept per run.

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

/// Kueue's shipped client limit (`clientConnection: {qps: 50, burst: 100}`).
pub const SHIPPED_QPS: u32 = 50;
/// kube-controller-manager in every run, whichever system runs: its client limit (its default,
/// 20/30, would make the Job controller, not the systems compared, the bottleneck of Kueue's
/// batch/Job path), the Job controller's workers (`--concurrent-job-syncs`, default 5), and how
/// long a node's Lease may go unrenewed before it is marked NotReady (`--node-monitor-grace-period`,
/// default 50 s): the node agent renews the 1,000 Leases one after another, and on a loaded
/// machine a round took longer than 50 s, so that healthy fake nodes went NotReady and both
/// systems lost their pods (the first reclaim run, at load 8-10 from other work on the machine).
pub const KCM_ARGS: &str = "--kube-api-qps=200 --kube-api-burst=400 --concurrent-job-syncs=50 --node-monitor-grace-period=300s";
/// kube-scheduler in every run: its client limit (its default 50/100 throttled the bindings of a
/// 5,000-pod flood: the first comparison's tuned-Kueue small runs stopped with ~2,300 Pods unbound
/// and the scheduler logging client-side throttling), raised for both systems alike.
pub const SCHEDULER_ARGS: &str = "--kube-api-qps=500 --kube-api-burst=1000";
/// The KubeRay operator in every run (v1.5.0, `--kuberay`, the first release with a client-limit
/// option): 20 reconcile workers instead of 1, client limit 500/1000 instead of its 100/200, so
/// that the operator both systems' RayJobs share is not what limits either.
pub const KUBERAY_ARGS: &str = "--reconcile-concurrency=20 --qps=500 --burst=1000";
/// The controllers' ServiceAccounts, audited alike.
pub const TUNEPLANE_USER: &str = "system:serviceaccount:tuneplane-system:tuneplane-reconciler";
pub const KUEUE_USER: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
/// Concurrent submitters of the harness.
pub const SUBMITTERS: usize = 16;

const HELP: &str = "\
kueue_compare: TunePlane and Kueue on one real control plane (see BENCHMARKS.md)

  cargo bench --bench kueue_compare -- --kueue DIR --agent FILE [options]

  --kueue DIR        Kueue build from scripts/kueue-build.sh (bin/kueue, crds/)
  --agent FILE       the node agent binary (kubesim, release build)
  --kuberay DIR      the KubeRay operator build both systems run with (bin/kuberay-operator,
                     crds/; scripts/kueue-build.sh prints it)
  --kuberay-args S   the operator's options (default: --reconcile-concurrency=20 --qps=500
                     --burst=1000; an empty value for its own defaults, e.g. with the test
                     tier's v1.4.0)
  --out DIR          results and cluster state (default target/kueue-compare)
  --systems LIST     tuneplane, kueue-shipped, kueue-tuned (kueue: both); default all three
  --qps LIST         client QPS of the sweep, burst twice that (default 50,200,500); TunePlane and
                     tuned Kueue run at each, shipped Kueue at its own 50 only
  --workloads LIST   small,gang,fair,reclaim (default: all four)
  --small N          jobs of the small workload (default 5000)
  --gang N           jobs of the gang workload (default 1000)
  --flood N          jobs of the flooding tenant in the fair workload (default 1000)
  --port PORT        the API server's port (default 16443)
  --timeout SECS     longest a run may take once submission starts (default 900)
  --team-b-after SECS  the fair workload: team-b submits this long after team-a's first
                     submission (default 5)
  --reclaim-a-gpus N the reclaim workload: team-a's h200 GPU limit, a multiple of 8 (default
                     1328, two thirds of the series; team-b's is the rest, 672); team-b fills
                     the series with 250 1x8-GPU RayJobs, team-a then submits N/8 of them
  --min-run SECS     the reclaim workload: the least run time before a job may be preempted
                     (TunePlane's TUNEPLANE_PREEMPTION_MIN_RUN_SECONDS through the dev stack's
                     option); team-a submits this long (and 2 s) after every team-b job runs,
                     for both systems (default 30)
  --checkpoint-every SECS  the reclaim workload's lost-work model: every job saves a
                     checkpoint this often from its start (default 600)
  --quiet SECS       with the fleet full, a run ends once every admitted pod is bound and
                     nothing was admitted for this long; it stops as stalled when nothing
                     was admitted, created or bound for this long (default 15)
";

#[derive(Debug, Clone)]
pub struct Options {
    pub root: PathBuf,
    pub kueue: PathBuf,
    pub agent: PathBuf,
    pub kuberay: PathBuf,
    pub kuberay_args: String,
    pub out: PathBuf,
    pub setups: Vec<Setup>,
    pub workloads: Vec<Shape>,
    pub small: usize,
    pub gang: usize,
    pub flood: usize,
    pub port: u16,
    pub timeout: Duration,
    pub quiet: Duration,
    pub team_b_after: Duration,
    pub reclaim_a_gpus: u32,
    pub min_run: Duration,
    pub checkpoint_every: Duration,
}

/// Kueue's configuration: as its release ships it, or tuned as its documentation advises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Shipped,
    Tuned,
}

/// One system with one configuration and client limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub system: System,
    /// Kueue only (TunePlane has one configuration).
    pub variant: Variant,
    /// Client QPS of the controller; burst is twice that.
    pub qps: u32,
}

impl Setup {
    pub fn burst(self) -> u32 {
        self.qps * 2
    }

    /// `tuneplane@200`, `kueue-shipped@50`, `kueue-tuned@500`.
    pub fn name(self) -> String {
        match (self.system, self.variant) {
            (System::TunePlane, _) => format!("tuneplane@{}", self.qps),
            (System::Kueue, Variant::Shipped) => format!("kueue-shipped@{}", self.qps),
            (System::Kueue, Variant::Tuned) => format!("kueue-tuned@{}", self.qps),
        }
    }

    /// Whether Kueue runs `shape` through its pod integration: tuned Kueue on the workloads
    /// TunePlane runs as bare Pods (small, fair).
    pub fn pods(self, shape: Shape) -> bool {
        self.system == System::Kueue
            && self.variant == Variant::Tuned
            && matches!(shape, Shape::Small | Shape::Fair)
    }

    /// A folder name for the setup's runs.
    pub fn slug(self) -> String {
        self.name().replace('@', "-q")
    }
}

/// The setups of a sweep: at each QPS TunePlane and (if asked) tuned Kueue; shipped Kueue once,
/// at its own limit, before them.
fn setups(kinds: &[&str], qps: &[u32]) -> Vec<Setup> {
    let mut out = Vec::new();
    if kinds.contains(&"kueue-shipped") {
        out.push(Setup {
            system: System::Kueue,
            variant: Variant::Shipped,
            qps: SHIPPED_QPS,
        });
    }
    for &q in qps {
        if kinds.contains(&"tuneplane") {
            out.push(Setup {
                system: System::TunePlane,
                variant: Variant::Tuned,
                qps: q,
            });
        }
        if kinds.contains(&"kueue-tuned") {
            out.push(Setup {
                system: System::Kueue,
                variant: Variant::Tuned,
                qps: q,
            });
        }
    }
    out
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
        kuberay: PathBuf::new(),
        kuberay_args: KUBERAY_ARGS.to_owned(),
        out: root.join("target/kueue-compare"),
        root,
        setups: Vec::new(),
        workloads: vec![Shape::Small, Shape::Gang, Shape::Fair, Shape::Reclaim],
        small: 5000,
        gang: 1000,
        flood: 1000,
        port: 16443,
        // Long enough for every run to end by itself (complete or stalled); a run cut by the
        // limit reports what it admitted by then and says so.
        timeout: Duration::from_secs(900),
        quiet: Duration::from_secs(15),
        team_b_after: Duration::from_secs(5),
        reclaim_a_gpus: 1328,
        min_run: Duration::from_secs(30),
        checkpoint_every: Duration::from_secs(600),
    };
    let mut kinds: Vec<String> = ["tuneplane", "kueue-shipped", "kueue-tuned"]
        .map(String::from)
        .to_vec();
    let mut qps: Vec<u32> = vec![50, 200, 500];
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
            "--kuberay" => o.kuberay = PathBuf::from(value(a)?),
            "--kuberay-args" => o.kuberay_args = value(a)?,
            "--out" => o.out = PathBuf::from(value(a)?),
            "--systems" => {
                kinds.clear();
                for s in value(a)?.split(',') {
                    match s {
                        "tuneplane" | "kueue-shipped" | "kueue-tuned" => kinds.push(s.to_owned()),
                        "kueue" => kinds.extend(["kueue-shipped".into(), "kueue-tuned".into()]),
                        other => bail!(
                            "--systems: unknown system {other:?} (tuneplane, kueue-shipped, kueue-tuned, kueue)"
                        ),
                    }
                }
            }
            "--qps" => {
                qps = value(a)?
                    .split(',')
                    .map(|q| match q.parse::<u32>() {
                        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
                        _ => bail!("--qps: {q:?} is not a whole number from 1 to 10000"),
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
                        "reclaim" => Ok(Shape::Reclaim),
                        other => {
                            bail!(
                                "--workloads: unknown workload {other:?} (small, gang, fair, reclaim)"
                            )
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
            "--team-b-after" => o.team_b_after = Duration::from_secs(number(a, value(a)?)? as u64),
            "--reclaim-a-gpus" => {
                let n = number(a, value(a)?)? as u32;
                if n == 0 || !n.is_multiple_of(NODE_GPUS) || n >= NODES_PER_SERIES * NODE_GPUS {
                    bail!(
                        "--reclaim-a-gpus {n}: a multiple of {NODE_GPUS} below {}",
                        NODES_PER_SERIES * NODE_GPUS
                    );
                }
                o.reclaim_a_gpus = n;
            }
            "--min-run" => o.min_run = Duration::from_secs(number(a, value(a)?)? as u64),
            "--checkpoint-every" => {
                o.checkpoint_every = Duration::from_secs(number(a, value(a)?)?.max(1) as u64)
            }
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    o.setups = setups(&kinds, &qps);
    if o.setups.is_empty() {
        bail!("--systems/--qps leave nothing to run");
    }
    if !o.kueue.join("bin/kueue").is_file() {
        bail!(
            "--kueue {}: no bin/kueue there (scripts/kueue-build.sh prints the folder)",
            o.kueue.display()
        );
    }
    if !o.kuberay.join("bin/kuberay-operator").is_file() || !o.kuberay.join("crds").is_dir() {
        bail!(
            "--kuberay {}: no bin/kuberay-operator and crds/ there (scripts/kueue-build.sh prints the folder)",
            o.kuberay.display()
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
        .env("TUNEPLANE_K8S_SCHEDULER_ARGS", SCHEDULER_ARGS)
        .env("TUNEPLANE_K8S_KUBERAY_ARGS", &o.kuberay_args)
        .env("TUNEPLANE_K8S_KUBERAY_DIR", &o.kuberay)
        .env("TUNEPLANE_K8S_AUDIT_USERS", KUEUE_USER)
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

/// One setup on one workload, from a fresh control plane.
async fn run_one(o: &Options, fleet: &Path, setup: Setup, shape: Shape) -> anyhow::Result<Value> {
    eprintln!(
        "[kueue-compare] === {} / {} ===",
        setup.name(),
        shape.name()
    );
    let kubeconfig = cluster_up(o, fleet)?;
    let client = kube_client(&kubeconfig).await?;
    let fleet_nodes = SERIES.len() * NODES_PER_SERIES as usize;
    wait_nodes(&client, fleet_nodes).await?;
    let work = o.out.join(format!("{}-{}", setup.slug(), shape.name()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;

    let workload = Workload::new(shape, o);
    let mut controller = match setup.system {
        System::TunePlane => {
            let reclaim = (shape == Shape::Reclaim).then_some(o);
            tuneplane_side::start(&kubeconfig, &work, fleet_nodes, setup, reclaim).await?
        }
        System::Kueue => {
            kueue::start(
                o,
                &client,
                &kubeconfig,
                &work,
                setup,
                shape,
                setup.pods(shape),
            )
            .await?
        }
    };
    eprintln!(
        "[kueue-compare] {} ready (pid {}); submitting {} job(s)",
        setup.name(),
        controller.pid,
        workload.jobs.len()
    );

    let observer = Observer::start(client.clone(), setup.system).await?;
    let audit_log = o.out.join("cluster/logs/audit.log");
    let audit_from = std::fs::metadata(&audit_log).map_or(0, |m| m.len());
    let requests_before = report::apiserver_requests(&client).await?;
    let cpu_before = report::cpu_seconds(controller.pid)?;
    let load_before = report::load_average();
    let started = Instant::now();
    let started_wall = std::time::SystemTime::now();
    let outcome = workload
        .run(&controller, &client, &observer, o, started)
        .await;
    let cpu_after = report::cpu_seconds(controller.pid)?;
    let peak_mib = report::peak_rss_mib(controller.pid)?;
    let requests_after = report::apiserver_requests(&client).await?;
    let user = match setup.system {
        System::TunePlane => TUNEPLANE_USER,
        System::Kueue => KUEUE_USER,
    };
    let own = report::audit_requests(&audit_log, audit_from, user)?;
    // The reclaim workload: the requests from team-a's first submission on.
    let reclaim_requests = match outcome.as_ref().ok().and_then(|out| out.reclaim.as_ref()) {
        Some(phase) => Some((
            report::audit_requests(&audit_log, phase.audit_from, user)?,
            report::RequestDelta::between(&phase.requests, &requests_after),
        )),
        None => None,
    };
    let diagnosis = match &outcome {
        Ok(out) if out.end_reason != "complete" => {
            report::diagnose(&client, setup.system, &observer.snapshot(), &workload).await
        }
        _ => Value::Null,
    };
    observer.stop();
    controller.stop();
    cluster_down(o);
    keep_logs(o, &work);
    let outcome = outcome?;
    let decisions = match setup.system {
        System::TunePlane => tuneplane_side::decisions(&work, started, started_wall).await?,
        System::Kueue => observer.snapshot().quota_reserved.clone(),
    };

    let victims = match (shape, setup.system) {
        (Shape::Reclaim, System::TunePlane) => Some(tuneplane_side::victims(&work).await?),
        _ => None,
    };
    let mut figures = report::figures(
        &workload,
        &outcome,
        &observer.snapshot(),
        &decisions,
        started,
        &report::RequestDelta::between(&requests_before, &requests_after),
        &own,
        cpu_after - cpu_before,
        peak_mib,
    );
    // The late tenant's wait by the API server's clock: TunePlane's create of its Pod, Kueue's
    // unsuspending write of its Job.
    if shape == Shape::Fair
        && let (Some(b), Some(Some(b_sub))) = (workload.jobs.last(), outcome.submitted.last())
    {
        let written = match setup.system {
            System::TunePlane => match tuneplane_side::workload_of(&work, &b.key).await? {
                Some(name) => {
                    report::audit_first_write(&audit_log_kept(&work), 0, user, "pods", &name)?
                }
                None => None,
            },
            System::Kueue => {
                let resource = if controller.kueue_pods {
                    "pods"
                } else {
                    "jobs"
                };
                report::audit_first_write(&audit_log_kept(&work), 0, user, resource, &b.key)?
            }
        };
        let sub_wall = started_wall + *b_sub;
        figures["team_b_server_seconds"] = serde_json::json!(written.map(|t| {
            let d = t.duration_since(sub_wall).unwrap_or_default();
            (d.as_secs_f64() * 100.0).round() / 100.0
        }));
    }
    if let (Some(phase), Some((own, all))) = (&outcome.reclaim, &reclaim_requests) {
        figures["reclaim"] = report::reclaim_figures(
            &workload,
            &outcome,
            phase,
            &observer.snapshot(),
            &decisions,
            started,
            own,
            all,
            victims.as_deref(),
            o,
        );
    }
    let result = json!({
        "setup": setup.name(),
        "system": setup.system.name(),
        "qps": setup.qps,
        "workload": shape.name(),
        "load_average": {"before": load_before, "after": report::load_average()},
        "figures": figures,
        "diagnosis": diagnosis,
        "logs": work.join("cluster-logs").display().to_string(),
    });
    eprintln!("[kueue-compare] {}", result["figures"]);
    Ok(result)
}

/// Moves the control plane's logs (every component's, the audit log among them) into the run's
/// folder, so that the next bring-up does not overwrite them.
/// Where [`keep_logs`] put the run's audit log.
fn audit_log_kept(work: &Path) -> std::path::PathBuf {
    work.join("cluster-logs/audit.log")
}

fn keep_logs(o: &Options, work: &Path) {
    let logs = o.out.join("cluster/logs");
    let into = work.join("cluster-logs");
    if let Err(e) = std::fs::rename(&logs, &into) {
        eprintln!(
            "[kueue-compare] warning: could not keep {} as {}: {e}",
            logs.display(),
            into.display()
        );
    }
}

/// A controller process started for a run.
pub struct Controller {
    pub pid: u32,
    pub child: std::process::Child,
    /// TunePlane: API URL and the keys of tenants `default` and `team-b`.
    pub api: Option<tuneplane_side::ApiAccess>,
    /// Kueue: CPU jobs go in as plain Pods (its pod integration).
    pub kueue_pods: bool,
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
    // Before the runs: the commit and versions are those of what runs, whatever changes meanwhile.
    let versions = report::versions(&o);
    let mut results = Vec::new();
    // Written after every run, so that a comparison stopped part-way keeps what it measured.
    let write = |results: &Vec<Value>, complete: bool| -> anyhow::Result<String> {
        let doc = json!({
            "machine": report::machine(),
            "versions": versions,
            "settings": report::settings(&o),
            "results": results,
            "complete": complete,
            "elapsed_seconds": begun.elapsed().as_secs(),
        });
        std::fs::write(
            o.out.join("results.json"),
            serde_json::to_string_pretty(&doc)?,
        )?;
        let md = report::markdown(&doc);
        std::fs::write(o.out.join("results.md"), &md)?;
        Ok(md)
    };
    for &shape in &o.workloads {
        for &setup in &o.setups {
            let r = rt.block_on(run_one(&o, &fleet, setup, shape));
            match r {
                Ok(v) => results.push(v),
                Err(e) => {
                    cluster_down(&o);
                    return Err(e.context(format!("{} / {}", setup.name(), shape.name())));
                }
            }
            write(&results, false)?;
        }
    }
    let md = write(&results, true)?;
    let (json_path, md_path) = (o.out.join("results.json"), o.out.join("results.md"));
    println!("{md}");
    eprintln!(
        "[kueue-compare] done in {} s: {} and {}",
        begun.elapsed().as_secs(),
        json_path.display(),
        md_path.display()
    );
    Ok(())
}
