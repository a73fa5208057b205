//! The agent's pod loop: one watcher over bound pods keeps a copy of those on the agent's nodes;
//! a tick advances each through the simulated kubelet's lifecycle
//! ([`lifecycle`](crate::controllers::lifecycle)), writing each step's status as a JSON merge patch
//! on `pods/status` and its events, and writing the container logs. Pods being deleted are
//! deleted for good (grace period 0, uid precondition), as a kubelet does once its containers
//! stopped. Failed writes back off and give up after a bound until the pod changes.
//!
//! Pods of a node whose kubelet is down ([`Health::Down`]) are left as they are: nothing is
//! written, deletions are not confirmed, real processes keep running (a partitioned machine).
//! Pods of a node that is gone ([`Health::Gone`]) get their processes killed at once (SIGKILL)
//! and nothing written either: the cluster's controllers deal with them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::nodes::{Health, NodeSet};
use super::real::{Phase, Runtime};
use super::recorder::Recorder;
use super::retry::{self, status_code};
use super::{AgentConfig, AgentLogs, NODE_IP};
use crate::config::{Scenario, annotations};
use crate::controllers::lifecycle::{self, Step};
use crate::json;

/// Consecutive failed writes for one pod before the agent leaves it until it changes.
const MAX_FAILURES: u32 = 8;

/// One pod on the agent's nodes.
struct Tracked {
    /// The latest copy (from the watcher or the agent's own write).
    pod: Value,
    /// When the agent first saw it (its bound time when it has no `PodScheduled` condition).
    seen: Instant,
    /// Consecutive failed writes.
    failures: u32,
    /// No write before this.
    retry_at: Option<Instant>,
    /// The final delete was accepted (the pod may linger for finalizers).
    delete_sent: bool,
    /// Its processes were killed because its node is gone.
    killed: bool,
}

/// The pod loop's state.
pub(crate) struct PodWorker {
    pods: Api<Pod>,
    client: kube::Client,
    nodes: HashSet<String>,
    /// Whether each node's kubelet runs (or the machine is gone).
    health: Arc<NodeSet>,
    scenario: Scenario,
    tick: Duration,
    log_retention: Duration,
    recorder: Arc<Recorder>,
    logs: Arc<AgentLogs>,
    tracked: HashMap<String, Tracked>,
    /// Uids listed since the watcher's last (re)start, until the list is done.
    relisting: Option<HashSet<String>>,
    /// Pods really run here (real execution mode); `None` simulates them.
    real: Option<Runtime>,
    /// Pods whose sandbox failure was reported (once).
    sandbox_reported: HashSet<String>,
}

/// A resourceVersion as a number, to tell an older copy from a newer one (the API server's are
/// etcd revisions; an opaque one compares as unknown).
fn revision(pod: &Value) -> Option<u64> {
    json::str_at(pod, "/metadata/resourceVersion").and_then(|v| v.parse().ok())
}

/// The log lines the agent writes for `step` of `pod` on `node`, per container.
fn log_lines(step: &Step, pod: &Value, node: &str) -> Vec<(String, String)> {
    let who = |c: &str| {
        format!(
            "kubesim agent: container {c} of {}/{}",
            json::namespace(pod),
            json::name(pod)
        )
    };
    let exited = |c: &str, code: i32| format!("{} exited with code {code}\n", who(c));
    let mut out = Vec::new();
    match step {
        Step::Start => {
            let first = json::str_at(pod, "/status/phase") == Some("Pending");
            if first {
                for (c, _) in lifecycle::containers(pod, "initContainers") {
                    let text = format!("{} started on {node}\n{}", who(&c), exited(&c, 0));
                    out.push((c, text));
                }
            }
            for (c, _) in lifecycle::containers(pod, "containers") {
                let mut text = format!("{} started on {node}\n", who(&c));
                if let Some(log) = json::annotation(pod, annotations::LOG) {
                    text.push_str(log);
                    if !log.ends_with('\n') {
                        text.push('\n');
                    }
                }
                out.push((c, text));
            }
        }
        _ => {
            if let Some(code) = step.exit_code() {
                for (c, _) in lifecycle::containers(pod, "containers") {
                    let text = exited(&c, code);
                    out.push((c, text));
                }
            }
        }
    }
    out
}

impl PodWorker {
    /// A pod loop for the pods on `nodes`.
    pub(crate) fn new(
        client: kube::Client,
        health: Arc<NodeSet>,
        config: &AgentConfig,
        recorder: Arc<Recorder>,
        logs: Arc<AgentLogs>,
        real: Option<Runtime>,
    ) -> Self {
        Self {
            real,
            sandbox_reported: HashSet::new(),
            pods: Api::all(client.clone()),
            client,
            nodes: health.names().into_iter().collect(),
            health,
            scenario: config.scenario.clone(),
            tick: config.tick,
            log_retention: config.log_retention,
            recorder,
            logs,
            tracked: HashMap::new(),
            relisting: None,
        }
    }

    /// Watches and advances pods until `stop` turns true.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        // Bound pods only; the agent's are picked out of those.
        let config = watcher::Config::default().fields("spec.nodeName!=");
        let stream = watcher(self.pods.clone(), config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    if let Some(rt) = self.real.as_mut() {
                        rt.stop_all();
                    }
                    return;
                }
                event = stream.next() => match event {
                    Some(Ok(e)) => self.on_event(e),
                    Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying"),
                    None => {
                        tracing::error!("pod watch ended");
                        return;
                    }
                },
                _ = tick.tick() => self.step_all().await,
            }
        }
    }

    fn ours(&self, pod: &Pod) -> bool {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| self.nodes.contains(n))
    }

    fn on_event(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(uid) = self.upsert(&pod)
                    && let Some(seen) = self.relisting.as_mut()
                {
                    seen.insert(uid);
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<String> = self
                        .tracked
                        .keys()
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.forget(&uid);
                    }
                }
            }
            watcher::Event::Apply(pod) => {
                self.upsert(&pod);
            }
            watcher::Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.forget(uid);
                }
            }
        }
    }

    /// Takes in a pod from the watcher if it is on the agent's nodes; returns its uid then.
    fn upsert(&mut self, pod: &Pod) -> Option<String> {
        if !self.ours(pod) {
            return None;
        }
        let uid = pod.metadata.uid.clone()?;
        let value = match serde_json::to_value(pod) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "pod not readable");
                return None;
            }
        };
        match self.tracked.get_mut(&uid) {
            Some(t) => {
                let newer = match (revision(&value), revision(&t.pod)) {
                    (Some(new), Some(old)) => new > old,
                    _ => true,
                };
                if newer {
                    self.logs.observe(&uid, &value);
                    t.pod = value;
                    // Changed by someone: worth trying again.
                    t.failures = 0;
                    t.retry_at = None;
                }
            }
            None => {
                self.logs.observe(&uid, &value);
                self.tracked.insert(
                    uid.clone(),
                    Tracked {
                        pod: value,
                        seen: Instant::now(),
                        failures: 0,
                        retry_at: None,
                        delete_sent: false,
                        killed: false,
                    },
                );
            }
        }
        Some(uid)
    }

    fn forget(&mut self, uid: &str) {
        if self.tracked.remove(uid).is_some() {
            self.logs.pod_deleted(uid);
        }
        self.sandbox_reported.remove(uid);
        if let Some(rt) = self.real.as_mut() {
            rt.forget(uid);
        }
    }

    /// One pass over every tracked pod.
    async fn step_all(&mut self) {
        let now = Instant::now();
        let uids: Vec<String> = self.tracked.keys().cloned().collect();
        for uid in uids {
            self.step_one(&uid, now).await;
        }
        self.logs.expire(self.log_retention);
    }

    async fn step_one(&mut self, uid: &str, now: Instant) {
        let Some(t) = self.tracked.get(uid) else {
            return;
        };
        let node = json::str_at(&t.pod, "/spec/nodeName").unwrap_or_default();
        match self.health.health(node) {
            Health::Up => {}
            // The kubelet is down: nothing happens for its pods.
            Health::Down => return,
            // The machine is gone, and the processes of its pods with it.
            Health::Gone => {
                if !t.killed {
                    tracing::info!(
                        pod = json::name(&t.pod),
                        node,
                        "node gone: killing the pod's processes"
                    );
                    if let Some(rt) = self.real.as_ref() {
                        rt.kill_now(uid);
                    }
                    if let Some(t) = self.tracked.get_mut(uid) {
                        t.killed = true;
                    }
                }
                return;
            }
        }
        if t.failures >= MAX_FAILURES || t.retry_at.is_some_and(|at| now < at) {
            return;
        }
        if json::at(&t.pod, "/metadata/deletionTimestamp").is_some() {
            if !t.delete_sent {
                // A kubelet deletes the pod once its containers stopped.
                if let Some(rt) = self.real.as_ref()
                    && !rt.is_gone(uid)
                {
                    rt.stop(uid);
                    return;
                }
                self.finish_deletion(uid).await;
            }
            return;
        }
        if !lifecycle::is_active(&t.pod) {
            // Ended: nothing of it keeps running.
            if let Some(rt) = self.real.as_ref() {
                rt.stop(uid);
            }
            return;
        }
        let bound_for = match lifecycle::condition_time(&t.pod, "PodScheduled") {
            Some(at) => json::seconds_since(&at),
            None => t.seen.elapsed().as_secs_f64(),
        };
        let pod = t.pod.clone();
        let Some(rt) = self.real.as_mut() else {
            let step = lifecycle::next_step(&pod, &self.scenario, bound_for, || {
                lifecycle::simulated_exit(&pod, &self.scenario)
            });
            if let Some(step) = step {
                self.write_step(uid, &pod, &step).await;
            }
            return;
        };
        // Real execution: images no runtime plays fail to pull; the processes say when the
        // containers start, are ready and exit.
        let mut scenario = self.scenario.clone();
        scenario
            .image_pull_failures
            .extend(rt.unmapped_images(&pod));
        let state = rt.state(uid);
        let step = lifecycle::next_step(&pod, &scenario, bound_for, || match &state {
            Some(s) => match s.phase {
                Phase::Exited(code) => Some(lifecycle::Exit { code }),
                _ => None,
            },
            None => None,
        });
        let pending = json::str_at(&pod, "/status/phase") == Some("Pending");
        match step {
            Some(Step::Start) if pending => {
                if rt.state(uid).is_none() {
                    // As the kubelet does: env from Secrets is read when the containers start;
                    // a missing Secret or key holds the pod (retried next step).
                    match with_secrets(&self.client, &pod).await {
                        Ok(resolved) => {
                            let named =
                                super::real::relay::named_by_pod(&self.client, &resolved).await;
                            rt.ensure_started(uid, &resolved, named)
                        }
                        Err(e) => {
                            tracing::warn!(pod = %json::name(&pod), error = %e, "container config not ready");
                            return;
                        }
                    }
                }
                match rt.state(uid).map(|s| s.phase) {
                    Some(Phase::Running | Phase::Exited(_)) => {
                        self.write_step(uid, &pod, &Step::Start).await;
                    }
                    Some(Phase::InitFailed { container, code }) => {
                        self.write_init_failed(uid, &pod, &container, code).await;
                    }
                    // Written once per restart, with the kubelet's BackOff warning.
                    Some(Phase::InitBackOff {
                        container,
                        code,
                        restarts,
                    }) if init_restarts(&pod, &container) < restarts => {
                        let mut next = pod.clone();
                        lifecycle::set_init_back_off(&mut next, &container, code, restarts);
                        if self.write_status(uid, &pod, next, "init back-off").await {
                            let node = json::str_at(&pod, "/spec/nodeName")
                                .unwrap_or_default()
                                .to_string();
                            let message = format!(
                                "Back-off restarting failed container {container} in pod {}",
                                json::name(&pod)
                            );
                            let field = format!("spec.initContainers{{{container}}}");
                            self.recorder
                                .record(&pod, "Warning", "BackOff", &message, &node, Some(&field))
                                .await;
                        }
                    }
                    // Reported once a pod.
                    Some(Phase::SandboxFailed(message))
                        if self.sandbox_reported.insert(uid.to_string()) =>
                    {
                        let node = json::str_at(&pod, "/spec/nodeName")
                            .unwrap_or_default()
                            .to_string();
                        let message = format!("Failed to create pod sandbox: {message}");
                        self.recorder
                            .record(
                                &pod,
                                "Warning",
                                "FailedCreatePodSandBox",
                                &message,
                                &node,
                                None,
                            )
                            .await;
                    }
                    // As the kubelet does once the sandbox exists: the pod's address is in its
                    // status while init containers run, so a network plugin knows the pod (the
                    // NetworkPolicy enforcer lets a worker's wait-for-GCS init container through
                    // only once it does).
                    Some(Phase::Preparing | Phase::InitBackOff { .. })
                        if json::str_at(&pod, "/status/podIP").is_none() =>
                    {
                        if let Some(ip) = rt.state(uid).and_then(|s| s.ip) {
                            let mut next = pod.clone();
                            lifecycle::set_pod_ip(&mut next, Some(&ip));
                            next["status"]["hostIP"] = json!(NODE_IP);
                            next["status"]["hostIPs"] = json!([{"ip": NODE_IP}]);
                            self.write_status(uid, &pod, next, "pod address").await;
                        }
                    }
                    _ => {}
                }
            }
            Some(Step::Start) => {
                // A restart after a crash back-off.
                rt.restart(uid);
                self.write_step(uid, &pod, &Step::Start).await;
            }
            Some(step) => {
                if matches!(step, Step::DeadlineExceeded) {
                    rt.stop(uid);
                }
                self.write_step(uid, &pod, &step).await;
            }
            None => {
                if let Some(s) = state.filter(|s| s.phase == Phase::Running)
                    && !pending
                    && lifecycle::readiness(&pod) != s.ready
                {
                    self.write_readiness(uid, &pod, &s.ready).await;
                }
            }
        }
    }

    /// Writes a status patch computed from the pod; `what` names it in errors.
    async fn write_status(&mut self, uid: &str, pod: &Value, next: Value, what: &str) -> bool {
        let (ns, name) = (json::namespace(pod), json::name(pod));
        let patch = json!({"status": next["status"]});
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(p) => {
                let updated = serde_json::to_value(&p).unwrap_or(next);
                self.logs.observe(uid, &updated);
                if let Some(t) = self.tracked.get_mut(uid) {
                    t.pod = updated;
                    t.failures = 0;
                    t.retry_at = None;
                }
                true
            }
            Err(e) => {
                self.failed(uid, name, what, &e);
                false
            }
        }
    }

    async fn write_readiness(&mut self, uid: &str, pod: &Value, ready: &[bool]) {
        let mut next = pod.clone();
        lifecycle::set_readiness(&mut next, ready);
        self.write_status(uid, pod, next, "readiness").await;
    }

    async fn write_init_failed(&mut self, uid: &str, pod: &Value, container: &str, code: i32) {
        let mut next = pod.clone();
        lifecycle::set_init_failed(&mut next, container, code);
        self.write_status(uid, pod, next, "init failure").await;
    }

    /// Writes a step's status, then its events and log lines.
    async fn write_step(&mut self, uid: &str, pod: &Value, step: &Step) {
        let (ns, name) = (json::namespace(pod), json::name(pod));
        let node = json::str_at(pod, "/spec/nodeName")
            .unwrap_or_default()
            .to_string();
        let mut next = pod.clone();
        lifecycle::apply(step, &mut next, NODE_IP);
        if *step == Step::Start {
            let state = self.real.as_ref().and_then(|rt| rt.state(uid));
            if json::str_at(pod, "/status/phase") == Some("Pending") {
                // A real pod's address is its namespace's; a simulated pod has none (nothing
                // may dial an address that belongs to nothing).
                lifecycle::set_pod_ip(&mut next, state.as_ref().and_then(|s| s.ip.as_deref()));
            }
            // Real containers are ready when their probes say so.
            if let Some(s) = &state {
                lifecycle::set_readiness(&mut next, &s.ready);
            }
        }
        let patch = json!({"status": next["status"]});
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let written = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        let updated = match written.map(|p| serde_json::to_value(&p)) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, pod = name, "written pod not readable");
                next
            }
            Err(e) => {
                self.failed(uid, name, &format!("{step:?}"), &e);
                return;
            }
        };
        tracing::debug!(pod = %format!("{ns}/{name}"), ?step, "pod step written");
        self.logs.observe(uid, &updated);
        if let Some(t) = self.tracked.get_mut(uid) {
            t.pod = updated;
            t.failures = 0;
            t.retry_at = None;
        }
        for e in lifecycle::events(step, pod) {
            self.recorder
                .record(
                    pod,
                    e.ty,
                    e.reason,
                    &e.message,
                    &node,
                    e.field_path.as_deref(),
                )
                .await;
        }
        // A real pod's log is what its processes print.
        if self.real.is_none() {
            for (container, text) in log_lines(step, pod, &node) {
                self.logs.append(uid, &container, &text);
            }
        }
    }

    /// Deletes a pod that is being deleted, for good.
    async fn finish_deletion(&mut self, uid: &str) {
        let Some(t) = self.tracked.get(uid) else {
            return;
        };
        let (ns, name) = (
            json::namespace(&t.pod).to_string(),
            json::name(&t.pod).to_string(),
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::debug!(pod = %format!("{ns}/{name}"), "pod deleted");
                if let Some(t) = self.tracked.get_mut(uid) {
                    t.delete_sent = true;
                }
                // Its containers stopped: followed logs end, also while finalizers keep the
                // object (as a kubelet's streams end with the containers).
                self.logs.containers_stopped(uid);
            }
            // Gone already, or the name now holds another pod.
            Err(e) if matches!(status_code(&e), Some(404 | 409)) => self.forget(uid),
            Err(e) => self.failed(uid, &name, "deletion", &e),
        }
    }

    /// Notes a failed write: back off, and after [`MAX_FAILURES`] leave the pod until it changes.
    fn failed(&mut self, uid: &str, name: &str, what: &str, e: &kube::Error) {
        if status_code(e) == Some(404) {
            self.forget(uid);
            return;
        }
        let Some(t) = self.tracked.get_mut(uid) else {
            return;
        };
        t.failures = if retry::retriable(e) {
            t.failures + 1
        } else {
            MAX_FAILURES
        };
        if t.failures >= MAX_FAILURES {
            tracing::error!(error = %e, pod = name, what, "pod write failed; leaving the pod until it changes");
        } else {
            let wait = retry::backoff(t.failures);
            tracing::warn!(error = %e, pod = name, what, ?wait, "pod write failed; retrying");
            t.retry_at = Some(Instant::now() + wait);
        }
    }
}

/// The restart count the pod's status shows for init container `container`.
/// `pod` with every container's `env[].valueFrom.secretKeyRef` replaced by the Secret's value
/// (read from the API server, as the kubelet does); the copy is only run, never written back.
/// A missing Secret or key is an error unless the reference is optional.
async fn with_secrets(client: &kube::Client, pod: &Value) -> Result<Value, String> {
    use k8s_openapi::api::core::v1::Secret;
    let ns = json::namespace(pod).to_string();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut secrets: HashMap<String, Option<Secret>> = HashMap::new();
    let mut out = pod.clone();
    for list in ["initContainers", "containers"] {
        let Some(containers) = out
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in containers {
            let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) else {
                continue;
            };
            for e in env {
                let Some(r) = e.pointer("/valueFrom/secretKeyRef").cloned() else {
                    continue;
                };
                let name = json::string(&r, "name");
                let key = json::string(&r, "key");
                let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
                if !secrets.contains_key(&name) {
                    let got = api
                        .get_opt(&name)
                        .await
                        .map_err(|e| format!("cannot read secret {ns}/{name}: {e}"))?;
                    secrets.insert(name.clone(), got);
                }
                let value = secrets[&name]
                    .as_ref()
                    .and_then(|s| s.data.as_ref()?.get(&key))
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned());
                match value {
                    Some(v) => *e = json!({"name": e["name"].clone(), "value": v}),
                    None if optional => *e = json!({"name": e["name"].clone(), "value": ""}),
                    None => {
                        return Err(format!(
                            "secret {ns}/{name} (key {key:?}) not found: the pod waits for it"
                        ));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn init_restarts(pod: &Value, container: &str) -> u32 {
    json::at(pod, "/status/initContainerStatuses")
        .and_then(Value::as_array)
        .and_then(|list| {
            list.iter()
                .find(|s| json::str_at(s, "/name") == Some(container))
        })
        .and_then(|s| s.get("restartCount").and_then(Value::as_u64))
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_tell_starts_annotations_and_exits() {
        let mut pod = json!({
            "metadata": {"name": "p", "namespace": "ns", "annotations": {annotations::LOG: "hi there"}},
            "spec": {"initContainers": [{"name": "init", "image": "i"}], "containers": [{"name": "main", "image": "m"}]},
            "status": {"phase": "Pending"},
        });
        let start = log_lines(&Step::Start, &pod, "n-0");
        assert_eq!(
            start,
            [
                (
                    "init".to_string(),
                    "kubesim agent: container init of ns/p started on n-0\nkubesim agent: container init of ns/p exited with code 0\n".to_string()
                ),
                (
                    "main".to_string(),
                    "kubesim agent: container main of ns/p started on n-0\nhi there\n".to_string()
                ),
            ]
        );
        pod["status"]["phase"] = json!("Running");
        assert_eq!(log_lines(&Step::Start, &pod, "n-0").len(), 1);
        assert_eq!(
            log_lines(&Step::Terminate(3), &pod, "n-0")[0].1,
            "kubesim agent: container main of ns/p exited with code 3\n"
        );
        assert_eq!(
            log_lines(&Step::DeadlineExceeded, &pod, "n-0")[0].1,
            "kubesim agent: container main of ns/p exited with code 137\n"
        );
        assert!(log_lines(&Step::Creating, &pod, "n-0").is_empty());
    }

    #[test]
    fn revisions_compare_as_numbers() {
        let rv = |v: &str| json!({"metadata": {"resourceVersion": v}});
        assert!(revision(&rv("10")) > revision(&rv("9")));
        assert_eq!(revision(&rv("opaque")), None);
    }
}
