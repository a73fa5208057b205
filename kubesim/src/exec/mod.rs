//! Execution mode: eligible pods really run on this machine.
//!
//! A CPU pod's init containers and then its first container run through bash with the pod's env and working directory; its
//! volume mounts and working directory map into a per-pod folder under the data directory (paths in
//! the command, args and env are rewritten to those folders, so the rendered pod needs no special
//! case). A RayJob runs as a one-node stand-in for a Ray cluster: its submitter pod runs the
//! entrypoint in a directory prepared from the runtime env's `working_dir` (HTTP download or
//! `file://`, then unzip). Output becomes the container log; the exit status decides the phase.
//! GPU pods and Ray head/worker pods are not executed: they stay Running like simulated ones.

mod prepare;
mod process;
pub mod sandbox;

pub(crate) use process::Job;
pub use process::{LogSink, Stop, kill_all};

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::json;
use crate::store::Store;

/// Annotation the KubeRay simulation puts on a submitter pod: the RayJob's entrypoint.
pub const RAYJOB_ENTRYPOINT: &str = "kubesim.tuneplane.io/rayjob-entrypoint";
/// Annotation the KubeRay simulation puts on a submitter pod: the RayJob's uid (a retried
/// submitter re-attaches to the finished driver instead of running the entrypoint again).
pub const RAYJOB_UID: &str = "kubesim.tuneplane.io/rayjob-uid";
/// Annotation the KubeRay simulation puts on a submitter pod: the RayJob's `runtimeEnvYAML`.
pub const RAYJOB_RUNTIME_ENV: &str = "kubesim.tuneplane.io/rayjob-runtime-env";

/// `pod` with every container's `env[].valueFrom.secretKeyRef` replaced by the Secret's value
/// from the store, as the kubelet resolves it (a missing Secret or key leaves the variable out).
fn with_secret_values(store: &Store, pod: &Value) -> Value {
    let ns = json::namespace(pod).to_string();
    let mut out = pod.clone();
    for list in ["initContainers", "containers"] {
        let Some(containers) = out
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for env in containers
            .iter_mut()
            .filter_map(|c| c.get_mut("env").and_then(Value::as_array_mut))
        {
            for e in env.iter_mut() {
                let Some(r) = e.pointer("/valueFrom/secretKeyRef") else {
                    continue;
                };
                let (name, key) = (json::string(r, "name"), json::string(r, "key"));
                let value = store
                    .try_get(&crate::resources::SECRETS, &ns, &name)
                    .and_then(|secret| {
                        let data = secret.pointer(&format!("/data/{key}"))?.as_str()?;
                        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data)
                            .ok()
                    })
                    .map(|b| String::from_utf8_lossy(&b).into_owned());
                if let Some(v) = value {
                    *e = serde_json::json!({"name": e["name"].clone(), "value": v});
                }
            }
        }
    }
    out
}

struct Running {
    kill: Option<oneshot::Sender<Stop>>,
    result: Arc<Mutex<Option<i32>>>,
    rayjob: Option<String>,
}

/// Runs and tracks the processes of executed pods.
pub struct Executor {
    dir: PathBuf,
    store: Arc<Store>,
    running: HashMap<String, Running>,
    /// Exit codes of RayJob drivers that ran, by RayJob uid.
    drivers: HashMap<String, i32>,
}

impl Executor {
    /// An executor writing only under `dir`.
    pub fn new(dir: PathBuf, store: Arc<Store>) -> Self {
        Self {
            dir,
            store,
            running: HashMap::new(),
            drivers: HashMap::new(),
        }
    }

    /// Whether a pod is executed (CPU pods and RayJob submitters) rather than simulated.
    pub fn eligible(&self, pod: &Value) -> bool {
        if json::annotation(pod, RAYJOB_ENTRYPOINT).is_some() {
            return true;
        }
        if json::label(pod, "ray.io/node-type").is_some() {
            return false;
        }
        let needs = crate::fit::PodNeeds::from_pod(pod);
        needs
            .requests
            .get(tuneplane_core::constants::GPU_RESOURCE)
            .copied()
            .unwrap_or(0)
            == 0
    }

    /// Starts the pod's process (again, after a restart).
    pub fn start(&mut self, pod: &Value) {
        let uid = json::uid(pod).to_string();
        self.kill(&uid);
        let (kill_tx, kill_rx) = oneshot::channel();
        let rayjob = json::annotation(pod, RAYJOB_UID).map(str::to_string);
        let result = Arc::new(Mutex::new(None));
        let finished = rayjob.as_ref().and_then(|r| self.drivers.get(r)).copied();
        if let Some(code) = finished {
            // A retried submitter re-attaches to the driver that already ran.
            let (ns, name) = (json::namespace(pod), json::name(pod));
            let container = json::str_at(pod, "/spec/containers/0/name").unwrap_or("main");
            let note = format!("kubesim: the Ray job already finished with exit code {code}\n");
            self.store.logs.append(ns, name, container, &note);
            *result.lock().unwrap_or_else(|p| p.into_inner()) = Some(code);
        } else {
            let steps = process::Job::steps(&with_secret_values(&self.store, pod), &self.dir);
            let (store, slot) = (self.store.clone(), result.clone());
            tokio::spawn(async move {
                let mut kill_rx = kill_rx;
                let mut code = 0;
                // Init containers run in order; a failing or killed step ends the pod.
                for step in &steps {
                    let sink = step.store_sink(&store);
                    let (c, killed) = step.run(&sink, None, &mut kill_rx).await;
                    code = c;
                    if c != 0 || killed {
                        break;
                    }
                }
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(code);
            });
        }
        let running = Running {
            kill: Some(kill_tx),
            result,
            rayjob,
        };
        self.store.set_executing(&uid, true);
        self.running.insert(uid, running);
    }

    /// The exit code of a finished process (once; the process is then forgotten).
    pub fn poll(&mut self, uid: &str) -> Option<i32> {
        let code = (*self
            .running
            .get(uid)?
            .result
            .lock()
            .unwrap_or_else(|p| p.into_inner()))?;
        self.store.set_executing(uid, false);
        if let Some(r) = self.running.remove(uid).and_then(|r| r.rayjob) {
            self.drivers.insert(r, code);
        }
        Some(code)
    }

    /// Kills a pod's process, if running: SIGTERM, then SIGKILL after its grace period.
    pub fn kill(&mut self, uid: &str) {
        self.stop(uid, Stop::Graceful);
    }

    /// Kills a pod's process at once (SIGKILL), as the processes of a lost machine end.
    pub fn kill_now(&mut self, uid: &str) {
        self.stop(uid, Stop::Now);
    }

    /// Stops a pod's process as the kubelet stops a pod being deleted (SIGTERM, then SIGKILL after
    /// its grace period) and keeps track of it; returns whether it still runs. Called again, it
    /// only answers that (the signal goes once); once it has ended the process is forgotten.
    pub fn terminate(&mut self, uid: &str) -> bool {
        let Some(r) = self.running.get_mut(uid) else {
            return false;
        };
        if let Some(tx) = r.kill.take() {
            let _ = tx.send(Stop::Graceful);
        }
        let ended = r.result.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        if ended {
            self.running.remove(uid);
            self.store.set_executing(uid, false);
        }
        !ended
    }

    /// Whether a process of pod `uid` is running (or ended and not yet polled).
    pub fn is_running(&self, uid: &str) -> bool {
        self.running.contains_key(uid)
    }

    fn stop(&mut self, uid: &str, how: Stop) {
        self.store.set_executing(uid, false);
        if let Some(mut r) = self.running.remove(uid)
            && let Some(tx) = r.kill.take()
        {
            // The process may have just ended: nothing to kill then.
            let _ = tx.send(how);
        }
    }

    /// Kills the processes of pods that no longer exist.
    pub fn reap(&mut self, pods: &[Arc<Value>]) {
        let live: HashSet<&str> = pods.iter().map(|p| json::uid(p)).collect();
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|u| !live.contains(u.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            self.kill(&uid);
        }
    }
}
