//! The node agent (`kubesim agent`): plays the kubelet of a fleet's fake nodes against a real
//! Kubernetes API server. It registers one Node per fleet member (labels, GPU capacity, taints,
//! cordons; status through `/status` with InternalIP 127.0.0.1 and the agent's kubelet port),
//! renews their Leases and Ready heartbeats, runs the pods bound to them through the same
//! lifecycle as kubesim's simulated kubelet ([`lifecycle`](crate::controllers::lifecycle): same
//! steps, statuses, events and [`Scenario`] semantics), finishes graceful deletions, and serves
//! the containers' logs on an HTTPS kubelet endpoint for `kubectl logs`.
//!
//! ```no_run
//! # async fn demo(fleet: tuneplane_core::fleet::Fleet) -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let agent = tuneplane_kubesim::agent::start(client, tuneplane_kubesim::agent::AgentConfig::new(fleet)).await?;
//! println!("nodes: {:?}", agent.node_names());
//! agent.delete_nodes().await?;
//! agent.shutdown().await;
//! # Ok(()) }
//! ```

mod logs;
mod nodes;
mod pods;
pub mod real;
mod recorder;
mod retry;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tuneplane_core::fleet::Fleet;

use crate::config::Scenario;

pub use logs::{AgentLogs, LogLookupError};
pub use real::RealConfig;

/// The address the fake nodes report and pods get as `hostIP`.
pub const NODE_IP: &str = "127.0.0.1";

/// Component name of the agent's events and its log lines.
const COMPONENT: &str = "kubelet";

/// Errors starting or steering the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// An API request failed (after the bounded retries).
    #[error("{what}: {source}")]
    Kube {
        /// What the agent was doing.
        what: String,
        /// The client error.
        source: kube::Error,
    },
    /// The real execution mode could not start (not root, no `ip`, a bad image map).
    #[error("real execution: {0}")]
    Real(String),
    /// The kubelet endpoint's certificate or key could not be loaded.
    #[error("kubelet TLS: {0}")]
    Tls(String),
    /// The kubelet endpoint could not listen.
    #[error("cannot listen on {addr} for the kubelet endpoint: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The ready file could not be written.
    #[error("cannot write the ready file {path}: {source}")]
    ReadyFile {
        /// Where the ready file was to be written.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A node name that is not one of the agent's.
    #[error("node {0} is not one of this agent's nodes")]
    UnknownNode(String),
    /// An object the agent builds did not convert to its API type (a bug in the agent).
    #[error("cannot build {what}: {source}")]
    Build {
        /// What was being built.
        what: String,
        /// The conversion error.
        source: serde_json::Error,
    },
}

/// The PEM certificate chain and private key of the HTTPS kubelet endpoint.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The fleet whose nodes the agent registers and plays.
    pub fleet: Fleet,
    /// Timings and faults of the pods, as in the simulator.
    pub scenario: Scenario,
    /// Port of the kubelet endpoint on 127.0.0.1 (0 picks a free one); `None` serves none (the
    /// nodes then report port 0 and `kubectl logs` fails).
    pub kubelet_port: Option<u16>,
    /// Certificate and key of the kubelet endpoint; `None` serves plain HTTP (which the API server
    /// does not speak to kubelets: for tests of the endpoint only).
    pub tls: Option<TlsFiles>,
    /// Written (with the node names, one a line) once every node is registered.
    pub ready_file: Option<PathBuf>,
    /// Interval of the pod loop that advances timers.
    pub tick: Duration,
    /// Interval of Lease renewals.
    pub lease_interval: Duration,
    /// Interval of the Ready condition's heartbeat.
    pub heartbeat_interval: Duration,
    /// How long the logs of a deleted pod stay readable.
    pub log_retention: Duration,
    /// Run pods for real (their processes, in network namespaces of their own); `None`
    /// simulates them (the scenario's timings and outcomes, and no pod IP).
    pub execution: Option<RealConfig>,
}

impl AgentConfig {
    /// The defaults for `fleet`: the default scenario, a kubelet endpoint on a free port over
    /// plain HTTP, a 150 ms tick, Leases renewed every 10 s, heartbeats every 30 s, and logs kept
    /// 5 minutes after their pod is deleted.
    pub fn new(fleet: Fleet) -> Self {
        Self {
            fleet,
            scenario: Scenario::default(),
            kubelet_port: Some(0),
            tls: None,
            ready_file: None,
            tick: Duration::from_millis(150),
            lease_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(30),
            log_retention: Duration::from_secs(300),
            execution: None,
        }
    }
}

/// A running agent. Dropping it stops the agent at once; [`AgentHandle::shutdown`] stops it
/// gracefully. Neither deletes the nodes: [`AgentHandle::delete_nodes`] does.
pub struct AgentHandle {
    nodes: Arc<nodes::NodeSet>,
    logs: Arc<AgentLogs>,
    kubelet_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Registers the fleet's nodes and starts the agent: the kubelet endpoint, the Lease and heartbeat
/// loop, and the pod loop. Returns once every node is registered (and the ready file written).
pub async fn start(client: kube::Client, config: AgentConfig) -> Result<AgentHandle, AgentError> {
    let logs = Arc::new(AgentLogs::default());
    let endpoint = match config.kubelet_port {
        Some(port) => Some(server::Endpoint::bind(port, config.tls.as_ref()).await?),
        None => None,
    };
    let kubelet_addr = endpoint.as_ref().map(server::Endpoint::addr);
    let recorder = Arc::new(recorder::Recorder::new(client.clone()));
    let nodes = Arc::new(nodes::NodeSet::new(
        client.clone(),
        &config.fleet,
        kubelet_addr.map_or(0, |a| a.port()),
        recorder.clone(),
    ));
    let (stop, stop_rx) = watch::channel(false);
    let mut handle = AgentHandle {
        nodes: nodes.clone(),
        logs: logs.clone(),
        kubelet_addr,
        stop,
        tasks: Vec::new(),
    };
    if let Some(endpoint) = endpoint {
        let (logs, stop) = (logs.clone(), stop_rx.clone());
        handle.tasks.push(tokio::spawn(
            async move { endpoint.serve(logs, stop).await },
        ));
    }
    nodes.register().await?;
    let (n, stop) = (nodes.clone(), stop_rx.clone());
    let (lease, heartbeat) = (config.lease_interval, config.heartbeat_interval);
    handle.tasks.push(tokio::spawn(
        async move { n.run(lease, heartbeat, stop).await },
    ));
    let real = match config.execution.clone() {
        Some(real) => {
            let (runtime, hosts) = real::Runtime::start(real, logs.clone())
                .await
                .map_err(AgentError::Real)?;
            let (c, stop) = (client.clone(), stop_rx.clone());
            handle
                .tasks
                .push(tokio::spawn(async move { hosts.follow(c, stop).await }));
            Some(runtime)
        }
        None => None,
    };
    let worker = pods::PodWorker::new(client, nodes.clone(), &config, recorder, logs, real);
    handle
        .tasks
        .push(tokio::spawn(async move { worker.run(stop_rx).await }));
    if let Some(path) = &config.ready_file {
        write_ready_file(path, &nodes.names())?;
    }
    tracing::info!(
        nodes = nodes.names().len(),
        kubelet = ?kubelet_addr,
        "node agent ready"
    );
    Ok(handle)
}

fn write_ready_file(path: &std::path::Path, names: &[String]) -> Result<(), AgentError> {
    let err = |source| AgentError::ReadyFile {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut text = names.join("\n");
    text.push('\n');
    std::fs::write(path, text).map_err(err)
}

impl AgentHandle {
    /// The names of the agent's nodes, in fleet order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.names()
    }

    /// Where the kubelet endpoint listens, if it does.
    pub fn kubelet_addr(&self) -> Option<SocketAddr> {
        self.kubelet_addr
    }

    /// The container logs the agent keeps (what the kubelet endpoint serves).
    pub fn logs(&self) -> &AgentLogs {
        &self.logs
    }

    /// Turns a node Ready or NotReady. NotReady plays a kubelet that reports NotReady once and
    /// then dies: the node's Lease is no longer renewed nor its Ready heartbeat written (so the
    /// node lifecycle controller turns it `Unknown`, tainted `unreachable`, once they are older
    /// than its grace period, 50 s by default), and its pods are left alone — no status writes,
    /// graceful deletions (the taint-eviction controller's too) not confirmed, processes left
    /// running. Ready again writes the Ready condition, renews the Lease and resumes all of it.
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), AgentError> {
        self.nodes.set_ready(node, ready).await
    }

    /// Puts the taint `key` with `effect` (`NoSchedule`, `NoExecute`, ...; a `NoExecute` taint
    /// gets `timeAdded`) on a node, replacing one with the same key and effect: e.g. an
    /// interruption notice (see [`crate::fleet::interruption`]). The cluster's taint-eviction
    /// controller evicts the pods that do not tolerate a `NoExecute` taint.
    pub async fn taint_node(&self, node: &str, key: &str, effect: &str) -> Result<(), AgentError> {
        self.nodes
            .taint(node, crate::fleet::taint(key, None, effect))
            .await
    }

    /// Removes a node's taints with key `key`.
    pub async fn untaint_node(&self, node: &str, key: &str) -> Result<(), AgentError> {
        self.nodes.untaint(node, key).await
    }

    /// Deletes one node and its Lease as a lost machine goes: its heartbeats stop, the processes
    /// of its pods are killed at once (SIGKILL) and nothing more is written for them (no status,
    /// no confirmed deletion). The cluster's pod garbage collector then deletes its pods (40 s
    /// after, in kube-controller-manager). The node cannot come back under this agent.
    pub async fn delete_node(&self, node: &str) -> Result<(), AgentError> {
        self.nodes.delete_one(node).await
    }

    /// Cordons (`spec.unschedulable: true`) or uncordons a node.
    pub async fn cordon(&self, node: &str, cordoned: bool) -> Result<(), AgentError> {
        self.nodes.cordon(node, cordoned).await
    }

    /// Deletes the agent's nodes and their Leases (heartbeats for them stop); the pods bound to
    /// them are left to the cluster's pod garbage collector.
    pub async fn delete_nodes(&self) -> Result<(), AgentError> {
        self.nodes.delete_all().await
    }

    /// Stops the agent: its loops finish their current step (up to 5 s), then are aborted.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}
