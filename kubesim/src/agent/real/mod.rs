//! The real execution mode of the node agent: the pods bound to its nodes really run on this
//! machine. Each pod gets a network namespace with its own IP ([`net`]); its init containers run
//! in order, then its containers together, each as processes in the pod's namespace with its
//! volumes mounted where the spec says (the sandbox of [`crate::exec::sandbox`], through the same
//! process runner as kubesim's execution mode), with the runtime the [`images`] map gives its
//! image. Readiness probes run as the kubelet runs them (exec in the container, TCP and HTTP
//! against the pod IP), so a pod is Ready only when its probes pass. Service names resolve
//! through the cluster's hosts file ([`hosts`]).
//!
//! The pod loop ([`super::pods`]) asks a [`Runtime`] what each pod's processes are doing and
//! writes the statuses and events; the runtime never writes to the API server itself.

pub mod hosts;
pub mod images;
pub mod net;
pub mod relay;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::AgentLogs;
use crate::exec::sandbox::{STAGE, Sandbox};
use crate::exec::{Job, LogSink, Stop};
use crate::json;

pub use images::ImageMap;

/// How the agent runs pods for real.
#[derive(Debug, Clone)]
pub struct RealConfig {
    /// Where pods' folders, the hosts file and the resolver file live (absolute).
    pub data_dir: PathBuf,
    /// Which runtime plays each image.
    pub images: ImageMap,
    /// A CA certificate (PEM) pods trust besides the machine's bundle.
    pub trust_ca: Option<PathBuf>,
}

/// The machine's CA bundle (Debian's `ca-certificates`), the base of the pods' bundle.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Name of the pods' CA bundle in the agent's data folder.
const POD_BUNDLE: &str = "ca-bundle.pem";

/// Writes the pods' CA bundle (the machine's bundle, when there is one, and `ca`) into `data_dir`.
fn write_bundle(data_dir: &Path, ca: &Path) -> Result<(), String> {
    let extra =
        std::fs::read_to_string(ca).map_err(|e| format!("--trust-ca {}: {e}", ca.display()))?;
    if !extra.contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!(
            "--trust-ca {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
            ca.display()
        ));
    }
    let mut bundle = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(&extra);
    let path = data_dir.join(POD_BUNDLE);
    std::fs::write(&path, bundle).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Where a pod's processes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The namespace is being made or init containers run.
    Preparing,
    /// The namespace could not be made.
    SandboxFailed(String),
    /// An init container exited non-zero in a pod that restarts it: it runs again after a
    /// back-off (10 s, doubling, at most 5 min, as the kubelet's).
    InitBackOff {
        /// The init container.
        container: String,
        /// Its last exit code.
        code: i32,
        /// How often it has been restarted (this back-off's restart included).
        restarts: u32,
    },
    /// An init container exited non-zero in a pod of `restartPolicy: Never`: the pod fails.
    InitFailed {
        /// The init container.
        container: String,
        /// Its exit code.
        code: i32,
    },
    /// The containers run.
    Running,
    /// Every container exited; the code is the first non-zero one, else 0.
    Exited(i32),
    /// Stopped and its namespace removed.
    Stopped,
}

/// What the pod loop reads of a pod's run.
#[derive(Debug, Clone)]
pub struct RunState {
    /// Where the processes are.
    pub phase: Phase,
    /// The pod IP, once the namespace exists.
    pub ip: Option<String>,
    /// Per container (in spec order), whether its readiness probe passes (no probe: running).
    pub ready: Vec<bool>,
}

enum Control {
    Restart,
    /// Stop the pod: its containers as the message says, then its namespace.
    Stop(Stop),
}

/// How a control message (or the end of the channel: the agent is going) stops a pod, if it does.
fn stopping(msg: Option<&Control>) -> Option<Stop> {
    match msg {
        Some(Control::Stop(how)) => Some(*how),
        None => Some(Stop::Graceful),
        Some(Control::Restart) => None,
    }
}

struct PodRun {
    state: Arc<Mutex<RunState>>,
    control: mpsc::UnboundedSender<Control>,
}

/// Everything a pod's task needs.
#[derive(Clone)]
struct Ctx {
    data_dir: PathBuf,
    images: ImageMap,
    net: Arc<net::Network>,
    logs: Arc<AgentLogs>,
    /// Whether the data folder holds the pods' CA bundle (with `--trust-ca`).
    bundle: bool,
}

/// The pods that run for real on this agent.
pub struct Runtime {
    ctx: Ctx,
    runs: HashMap<String, PodRun>,
}

impl Runtime {
    /// Sets up the pod network and the data folder (hosts and resolver files). Fails without root.
    pub async fn start(
        config: RealConfig,
        logs: Arc<AgentLogs>,
    ) -> Result<(Self, hosts::HostsFile), String> {
        let net = net::Network::setup().await?;
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| format!("cannot create {}: {e}", config.data_dir.display()))?;
        let data_dir = config
            .data_dir
            .canonicalize()
            .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;
        // No name server: names outside the cluster's hosts file do not resolve in pods.
        std::fs::write(
            data_dir.join("resolv.conf"),
            "# tuneplane node agent: no name server\n",
        )
        .map_err(|e| format!("cannot write the pods' resolv.conf: {e}"))?;
        let hosts = hosts::HostsFile::create(&data_dir.join("hosts"))?;
        if let Some(ca) = &config.trust_ca {
            write_bundle(&data_dir, ca)?;
        }
        let bundle = config.trust_ca.is_some();
        for (runtime, path) in config.images.missing() {
            tracing::warn!(runtime, path = %path.display(), "runtime folder missing: its images will fail to start");
        }
        let ctx = Ctx {
            data_dir,
            images: config.images,
            net: Arc::new(net),
            logs,
            bundle,
        };
        Ok((
            Self {
                ctx,
                runs: HashMap::new(),
            },
            hosts,
        ))
    }

    /// The images of `pod` that no runtime plays (they fail to pull).
    pub fn unmapped_images(&self, pod: &Value) -> Vec<String> {
        ["initContainers", "containers"]
            .into_iter()
            .flat_map(|l| crate::controllers::lifecycle::containers(pod, l))
            .map(|(_, image)| image)
            .filter(|i| self.ctx.images.runtime(i).is_none())
            .collect()
    }

    /// Starts pod `uid` (namespace, init containers, containers) unless it already runs.
    ///
    /// `named`: the host loopback ports the pod's spec (and its RayJob's) names
    /// ([`relay::named_by_pod`]); of those, the ones not the pod's own nor the control plane's
    /// are relayed into the pod.
    pub fn ensure_started(
        &mut self,
        uid: &str,
        pod: &Value,
        named: std::collections::BTreeSet<u16>,
    ) {
        if self.runs.contains_key(uid) {
            return;
        }
        let containers = crate::controllers::lifecycle::containers(pod, "containers").len();
        let state = Arc::new(Mutex::new(RunState {
            phase: Phase::Preparing,
            ip: None,
            ready: vec![false; containers],
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let (ctx, shared, pod, uid_owned) = (
            self.ctx.clone(),
            state.clone(),
            pod.clone(),
            uid.to_string(),
        );
        tokio::spawn(async move { run_pod(ctx, uid_owned, pod, named, shared, rx).await });
        self.runs
            .insert(uid.to_string(), PodRun { state, control: tx });
    }

    /// A copy of pod `uid`'s run state, if it runs.
    pub fn state(&self, uid: &str) -> Option<RunState> {
        self.runs
            .get(uid)
            .map(|r| r.state.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Starts the containers of pod `uid` again (after they exited, under a restart policy).
    pub fn restart(&self, uid: &str) {
        if let Some(r) = self.runs.get(uid) {
            let _ = r.control.send(Control::Restart);
        }
    }

    /// Stops pod `uid`: SIGTERM, SIGKILL after its grace period, then its namespace goes. Its
    /// state turns [`Phase::Stopped`] when done.
    pub fn stop(&self, uid: &str) {
        if let Some(r) = self.runs.get(uid) {
            let _ = r.control.send(Control::Stop(Stop::Graceful));
        }
    }

    /// Kills pod `uid`'s processes at once (SIGKILL), as a lost machine's end, then removes its
    /// namespace. Its state turns [`Phase::Stopped`] when done.
    pub fn kill_now(&self, uid: &str) {
        if let Some(r) = self.runs.get(uid) {
            let _ = r.control.send(Control::Stop(Stop::Now));
        }
    }

    /// Whether pod `uid` has nothing left on this machine (never ran, or stopped).
    pub fn is_gone(&self, uid: &str) -> bool {
        self.state(uid).is_none_or(|s| s.phase == Phase::Stopped)
    }

    /// Stops pod `uid` and forgets it.
    pub fn forget(&mut self, uid: &str) {
        if let Some(r) = self.runs.remove(uid) {
            let _ = r.control.send(Control::Stop(Stop::Graceful));
        }
    }

    /// Stops every pod (the agent is stopping).
    pub fn stop_all(&mut self) {
        for (_, r) in self.runs.drain() {
            let _ = r.control.send(Control::Stop(Stop::Graceful));
        }
    }
}

fn set_phase(state: &Mutex<RunState>, phase: Phase) {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    if phase != Phase::Running {
        s.ready.iter_mut().for_each(|r| *r = false);
    }
    s.phase = phase;
}

/// The container ports the pod declares (never relayed to the host).
fn own_ports(pod: &Value) -> Vec<u16> {
    ["initContainers", "containers"]
        .into_iter()
        .filter_map(|l| json::at(pod, &format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
        .filter_map(|p| p.get("containerPort").and_then(Value::as_u64))
        .filter_map(|p| u16::try_from(p).ok())
        .collect()
}

/// The host folders a runtime needs at their paths: each `PATH` folder's parent (a virtualenv's
/// root, whose `lib` its Python reads) and the folder of each absolute path in its entrypoint.
fn runtime_folders(runtime: &images::Runtime) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = runtime
        .path
        .iter()
        .map(|p| p.parent().unwrap_or(p).to_path_buf())
        .chain(
            runtime
                .entrypoint
                .iter()
                .map(std::path::Path::new)
                .filter(|p| p.is_absolute())
                .filter_map(|p| p.parent().map(std::path::Path::to_path_buf)),
        )
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Ctx {
    fn sandbox(&self, netns: &str, image: &str) -> Sandbox {
        let runtime = self.images.runtime(image);
        let mut env = runtime.map(|r| r.env.clone()).unwrap_or_default();
        // Python's ssl (urllib) reads SSL_CERT_FILE, requests (Ray's downloads) REQUESTS_CA_BUNDLE;
        // the container's own env still wins.
        if self.bundle {
            // The data folder is the container's STAGE.
            let sandbox_path = Path::new(STAGE).join(POD_BUNDLE).display().to_string();
            env.push(("SSL_CERT_FILE".into(), sandbox_path.clone()));
            env.push(("REQUESTS_CA_BUNDLE".into(), sandbox_path));
        }
        Sandbox {
            netns: netns.to_string(),
            stage: self.data_dir.clone(),
            hosts: self.data_dir.join("hosts"),
            resolv: self.data_dir.join("resolv.conf"),
            bin: runtime.map(|r| r.path.clone()).unwrap_or_default(),
            env,
            keep: runtime.map(runtime_folders).unwrap_or_default(),
        }
    }

    fn sink(&self, uid: &str, container: &str) -> LogSink {
        let (logs, uid, container) = (self.logs.clone(), uid.to_string(), container.to_string());
        Arc::new(move |text: &str| logs.append(&uid, &container, text))
    }
}

/// One container started: its kill switch and its exit code to come.
struct Started {
    kill: oneshot::Sender<Stop>,
    done: tokio::task::JoinHandle<i32>,
}

fn start_container(ctx: &Ctx, uid: &str, pod: &Value, c: &Value, netns: &str) -> Started {
    // A container without a command runs its image's entrypoint (with its args).
    let mut c = c.clone();
    if c.get("command").is_none()
        && let Some(rt) = ctx.images.runtime(&json::string(&c, "image"))
        && !rt.entrypoint.is_empty()
    {
        c["command"] = json!(rt.entrypoint);
    }
    let c = &c;
    let job = Job::from_container(pod, c, &ctx.data_dir);
    let sandbox = ctx.sandbox(netns, &json::string(c, "image"));
    let sink = ctx.sink(uid, job.container());
    let (kill, mut kill_rx) = oneshot::channel();
    let done = tokio::spawn(async move { job.run(&sink, Some(&sandbox), &mut kill_rx).await.0 });
    Started { kill, done }
}

async fn run_pod(
    ctx: Ctx,
    uid: String,
    mut pod: Value,
    named: std::collections::BTreeSet<u16>,
    state: Arc<Mutex<RunState>>,
    mut control: mpsc::UnboundedReceiver<Control>,
) {
    let relayed = relay::to_relay(&named, &own_ports(&pod), &relay::control_plane_ports());
    let podnet = match ctx.net.create(&uid, &relayed).await {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, pod = json::name(&pod), "pod sandbox not made");
            set_phase(&state, Phase::SandboxFailed(e));
            // Wait to be stopped.
            while let Some(c) = control.recv().await {
                if matches!(c, Control::Stop(_)) {
                    break;
                }
            }
            set_phase(&state, Phase::Stopped);
            return;
        }
    };
    let ip = podnet.ip.to_string();
    pod["status"]["podIP"] = json!(ip);
    state.lock().unwrap_or_else(|p| p.into_inner()).ip = Some(ip.clone());
    tracing::info!(pod = %format!("{}/{}", json::namespace(&pod), json::name(&pod)), ip, netns = podnet.netns, "pod sandbox ready");

    let stopped = 'run: {
        // Init containers, in order.
        let inits = json::at(&pod, "/spec/initContainers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let restarts_inits = json::str_at(&pod, "/spec/restartPolicy") != Some("Never");
        for c in &inits {
            let mut restarts = 0u32;
            loop {
                let started = start_container(&ctx, &uid, &pod, c, &podnet.netns);
                let Started { kill, mut done } = started;
                let code = tokio::select! {
                    code = &mut done => code.unwrap_or(137),
                    msg = control.recv() => {
                        if let Some(how) = stopping(msg.as_ref()) {
                            let _ = kill.send(how);
                            let _ = done.await;
                            break 'run true;
                        }
                        done.await.unwrap_or(137)
                    }
                };
                if code == 0 {
                    break;
                }
                let container = json::string(c, "name");
                if !restarts_inits {
                    set_phase(&state, Phase::InitFailed { container, code });
                    break 'run false;
                }
                restarts += 1;
                set_phase(
                    &state,
                    Phase::InitBackOff {
                        container,
                        code,
                        restarts,
                    },
                );
                let back_off = Duration::from_secs(10u64 << (restarts - 1).min(5))
                    .min(Duration::from_secs(300));
                tokio::select! {
                    () = tokio::time::sleep(back_off) => {}
                    msg = control.recv() => {
                        if stopping(msg.as_ref()).is_some() {
                            break 'run true;
                        }
                    }
                }
            }
        }
        // Containers, together; again on each restart.
        let containers = json::at(&pod, "/spec/containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        loop {
            let started: Vec<Started> = containers
                .iter()
                .map(|c| start_container(&ctx, &uid, &pod, c, &podnet.netns))
                .collect();
            set_phase(&state, Phase::Running);
            let probes: Vec<tokio::task::JoinHandle<()>> = containers
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (ctx, pod, c, state, netns) = (
                        ctx.clone(),
                        pod.clone(),
                        c.clone(),
                        state.clone(),
                        podnet.netns.clone(),
                    );
                    tokio::spawn(
                        async move { probe_readiness(&ctx, &pod, &c, &netns, i, &state).await },
                    )
                })
                .collect();
            let (kills, dones): (Vec<_>, Vec<_>) =
                started.into_iter().map(|s| (s.kill, s.done)).unzip();
            let all = futures_util::future::join_all(dones);
            tokio::pin!(all);
            let outcome = tokio::select! {
                codes = &mut all => Some(codes.into_iter().map(|c| c.unwrap_or(137)).collect::<Vec<_>>()),
                msg = control.recv() => {
                    if let Some(how) = stopping(msg.as_ref()) {
                        for k in kills { let _ = k.send(how); }
                        let _ = all.await;
                        None
                    } else {
                        Some(all.await.into_iter().map(|c| c.unwrap_or(137)).collect())
                    }
                }
            };
            for p in probes {
                p.abort();
            }
            let Some(codes) = outcome else {
                break 'run true;
            };
            let code = codes.iter().copied().find(|c| *c != 0).unwrap_or(0);
            set_phase(&state, Phase::Exited(code));
            match control.recv().await {
                Some(Control::Restart) => continue,
                Some(Control::Stop(_)) | None => break 'run true,
            }
        }
    };
    if !stopped {
        // An init container failed: wait to be stopped (the pod is Failed).
        while let Some(c) = control.recv().await {
            if matches!(c, Control::Stop(_)) {
                break;
            }
        }
    }
    ctx.net.remove(podnet).await;
    set_phase(&state, Phase::Stopped);
    tracing::info!(pod = json::name(&pod), "pod sandbox removed");
}

/// Seconds of a probe field, with the kubelet's default.
fn probe_secs(probe: &Value, field: &str, default: u64) -> u64 {
    probe.get(field).and_then(Value::as_u64).unwrap_or(default)
}

/// Runs container `index`'s readiness probe as the kubelet does and keeps `state.ready[index]`
/// up to date; a container without one is ready once it runs.
async fn probe_readiness(
    ctx: &Ctx,
    pod: &Value,
    c: &Value,
    netns: &str,
    index: usize,
    state: &Mutex<RunState>,
) {
    let set = |ready: bool| {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = s.ready.get_mut(index) {
            *r = ready;
        }
    };
    let Some(probe) = c.get("readinessProbe").cloned() else {
        set(true);
        return;
    };
    let initial = probe_secs(&probe, "initialDelaySeconds", 0);
    let period = probe_secs(&probe, "periodSeconds", 10).max(1);
    let timeout = probe_secs(&probe, "timeoutSeconds", 1).max(1);
    let failures_allowed = probe_secs(&probe, "failureThreshold", 3).max(1);
    tokio::time::sleep(Duration::from_secs(initial)).await;
    let mut failures = 0;
    let mut ready = false;
    loop {
        let ok = probe_once(ctx, pod, c, &probe, netns, Duration::from_secs(timeout)).await;
        if ok {
            failures = 0;
            if !ready {
                ready = true;
                set(true);
            }
        } else {
            failures += 1;
            if ready && failures >= failures_allowed {
                ready = false;
                set(false);
            }
        }
        tokio::time::sleep(Duration::from_secs(period)).await;
    }
}

async fn probe_once(
    ctx: &Ctx,
    pod: &Value,
    c: &Value,
    probe: &Value,
    netns: &str,
    timeout: Duration,
) -> bool {
    let ip = json::str_at(pod, "/status/podIP")
        .unwrap_or_default()
        .to_string();
    let port_of = |v: Option<&Value>| -> Option<u16> {
        match v? {
            Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
            Value::String(name) => c
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
                .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
                .and_then(|p| u16::try_from(p).ok()),
            _ => None,
        }
    };
    if let Some(exec) = probe.pointer("/exec/command") {
        let mut probe_container = c.clone();
        probe_container["command"] = exec.clone();
        if let Some(m) = probe_container.as_object_mut() {
            m.remove("args");
        }
        let job = Job::from_container(pod, &probe_container, &ctx.data_dir);
        let sandbox = ctx.sandbox(netns, &json::string(c, "image"));
        let quiet: LogSink = Arc::new(|_: &str| {});
        let (kill, mut kill_rx) = oneshot::channel::<Stop>();
        let run = job.run(&quiet, Some(&sandbox), &mut kill_rx);
        tokio::pin!(run);
        return match tokio::time::timeout(timeout, &mut run).await {
            Ok((code, _)) => code == 0,
            Err(_) => {
                let _ = kill.send(Stop::Graceful);
                let _ = run.await;
                false
            }
        };
    }
    if let Some(port) = port_of(probe.pointer("/tcpSocket/port")) {
        return tokio::time::timeout(timeout, tokio::net::TcpStream::connect((ip.as_str(), port)))
            .await
            .is_ok_and(|r| r.is_ok());
    }
    if let Some(port) = port_of(probe.pointer("/httpGet/port")) {
        let path = json::str_at(probe, "/httpGet/path").unwrap_or("/");
        let url = format!("http://{ip}:{port}{path}");
        let Ok(client) = reqwest::Client::builder()
            .timeout(timeout)
            .no_proxy()
            .build()
        else {
            return false;
        };
        return client
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() >= 200 && r.status().as_u16() < 400);
    }
    // A probe of a kind the agent does not know passes, as no probe would.
    true
}
