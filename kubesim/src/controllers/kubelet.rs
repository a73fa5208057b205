//! The simulated kubelet: moves bound pods through ContainerCreating → Running → Succeeded/Failed,
//! writes the kubelet's events, honours `activeDeadlineSeconds` and `restartPolicy`, and injects
//! faults (image pull failures, crashing images). In execution mode eligible pods really run
//! through the [`Executor`](crate::exec::Executor); otherwise annotations and the scenario decide.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use super::events::{NORMAL, Recorder, WARNING};
use super::scheduler::set_condition;
use crate::exec::Executor;
use crate::json::{self, str_at};
use crate::resources::PODS;
use crate::sim::{Scenario, annotations};
use crate::store::Store;

static POD_IPS: AtomicU32 = AtomicU32::new(0);

/// How a container run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exit {
    code: i32,
}

/// The kubelet of every simulated node.
pub struct Kubelet {
    scenario: Scenario,
}

fn containers(pod: &Value, list: &str) -> Vec<(String, String)> {
    json::at(pod, &format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|c| {
                    let s = |k: &str| {
                        c.get(k)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    (s("name"), s("image"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn container_state(pod: &Value) -> Option<&Value> {
    json::at(pod, "/status/containerStatuses/0/state")
}

fn waiting_reason(pod: &Value) -> Option<&str> {
    container_state(pod)
        .and_then(|s| json::at(s, "/waiting/reason"))
        .and_then(Value::as_str)
}

fn condition_time(pod: &Value, ty: &str) -> Option<String> {
    json::at(pod, "/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        })
        .and_then(|c| c.get("lastTransitionTime").and_then(Value::as_str))
        .map(str::to_string)
}

impl Kubelet {
    /// A kubelet following `scenario`.
    pub fn new(scenario: Scenario) -> Self {
        Self { scenario }
    }

    /// One pass over every bound, non-terminal pod.
    pub fn step(
        &mut self,
        store: &Arc<Store>,
        recorder: &mut Recorder,
        mut exec: Option<&mut Executor>,
    ) {
        let pods = store.all(&PODS);
        if let Some(ex) = exec.as_deref_mut() {
            ex.reap(&pods);
        }
        for pod in pods.iter() {
            let bound = !str_at(pod, "/spec/nodeName").unwrap_or_default().is_empty();
            let phase = str_at(pod, "/status/phase").unwrap_or_default();
            if !bound
                || !matches!(phase, "Pending" | "Running")
                || json::at(pod, "/metadata/deletionTimestamp").is_some()
            {
                continue;
            }
            if let Err(e) = self.advance(store, recorder, exec.as_deref_mut(), pod) {
                tracing::debug!(error = %e, pod = json::name(pod), "kubelet step skipped");
            }
        }
    }

    fn advance(
        &self,
        store: &Store,
        rec: &mut Recorder,
        exec: Option<&mut Executor>,
        pod: &Arc<Value>,
    ) -> Result<(), crate::ApiError> {
        let (ns, name) = (json::namespace(pod), json::name(pod));
        let delay = self.scenario.start_delay.as_secs_f64();
        let phase = str_at(pod, "/status/phase").unwrap_or_default();
        if let Some(deadline) = pod
            .pointer("/spec/activeDeadlineSeconds")
            .and_then(Value::as_f64)
            && let Some(start) = str_at(pod, "/status/startTime")
            && json::seconds_since(start) >= deadline
        {
            rec.record(
                pod,
                NORMAL,
                "DeadlineExceeded",
                "Pod was active on the node longer than the specified deadline",
                "kubelet",
            );
            if let Some(ex) = exec {
                ex.kill(json::uid(pod));
            }
            return self.terminate(
                store,
                ns,
                name,
                137,
                Some((
                    "DeadlineExceeded",
                    "Pod was active on the node longer than the specified deadline",
                )),
            );
        }
        if phase == "Pending" {
            let bound_at = condition_time(pod, "PodScheduled").unwrap_or_default();
            let waited = json::seconds_since(&bound_at);
            if json::at(pod, "/status/containerStatuses").is_none() {
                return self.write_waiting(store, ns, name, "ContainerCreating", None);
            }
            if waited < delay {
                return Ok(());
            }
            let images: Vec<String> = containers(pod, "initContainers")
                .into_iter()
                .chain(containers(pod, "containers"))
                .map(|(_, i)| i)
                .collect();
            if let Some(bad) = images
                .iter()
                .find(|i| self.scenario.image_pull_failures.contains(i))
            {
                return self.pull_failure(store, rec, pod, bad, waited, delay);
            }
            return self.start(store, rec, exec, pod);
        }
        // Running: a container waiting after a crash restarts after the delay.
        if waiting_reason(pod) == Some("CrashLoopBackOff") {
            let finished = str_at(
                pod,
                "/status/containerStatuses/0/lastState/terminated/finishedAt",
            )
            .unwrap_or_default();
            if json::seconds_since(finished) >= delay {
                return self.start(store, rec, exec, pod);
            }
            return Ok(());
        }
        let exit = match exec.filter(|e| e.eligible(pod)) {
            Some(ex) => ex.poll(json::uid(pod)).map(|code| Exit { code }),
            None => self.simulated_exit(pod),
        };
        let Some(exit) = exit else { return Ok(()) };
        let policy = str_at(pod, "/spec/restartPolicy").unwrap_or("Always");
        let restart = policy == "Always" || (policy == "OnFailure" && exit.code != 0);
        if restart {
            return self.crash_loop(store, rec, pod, exit.code);
        }
        self.terminate(store, ns, name, exit.code, None)
    }

    /// When a simulated (not executed) container exits, if it has by now.
    fn simulated_exit(&self, pod: &Value) -> Option<Exit> {
        let crash = !self.scenario.crash_images.is_empty()
            && containers(pod, "containers")
                .iter()
                .any(|(_, i)| self.scenario.crash_images.contains(i));
        let run = json::annotation(pod, annotations::RUN_SECONDS)
            .and_then(|s| s.parse::<f64>().ok())
            .or(if crash { Some(0.0) } else { None })
            .or(self.scenario.pod_run.map(|d| d.as_secs_f64()))?;
        let started = str_at(pod, "/status/containerStatuses/0/state/running/startedAt")?;
        if json::seconds_since(started) < run {
            return None;
        }
        let code = json::annotation(pod, annotations::EXIT_CODE)
            .and_then(|s| s.parse().ok())
            .unwrap_or(if crash { 1 } else { 0 });
        Some(Exit { code })
    }

    fn write_waiting(
        &self,
        store: &Store,
        ns: &str,
        name: &str,
        reason: &str,
        message: Option<&str>,
    ) -> Result<(), crate::ApiError> {
        store.update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            let mut waiting = json!({"reason": reason});
            if let Some(m) = message {
                waiting["message"] = json!(m);
            }
            let statuses: Vec<Value> = containers(&p, "containers")
                .into_iter()
                .map(|(c, image)| json!({"name": c, "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0, "state": {"waiting": waiting}, "lastState": {}}))
                .collect();
            p["status"]["containerStatuses"] = json!(statuses);
            let init: Vec<Value> = containers(&p, "initContainers")
                .into_iter()
                .map(|(c, image)| json!({"name": c, "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}}))
                .collect();
            if !init.is_empty() {
                p["status"]["initContainerStatuses"] = json!(init);
            }
            set_condition(&mut p, "Ready", "False", Some("ContainersNotReady"), Some("containers with unready status"));
            Ok(p)
        })?;
        Ok(())
    }

    fn pull_failure(
        &self,
        store: &Store,
        rec: &mut Recorder,
        pod: &Value,
        image: &str,
        waited: f64,
        delay: f64,
    ) -> Result<(), crate::ApiError> {
        let (ns, name) = (json::namespace(pod), json::name(pod));
        match waiting_reason(pod) {
            Some("ErrImagePull") if waited >= 2.0 * delay => {
                rec.record(
                    pod,
                    NORMAL,
                    "BackOff",
                    &format!("Back-off pulling image \"{image}\""),
                    "kubelet",
                );
                rec.record(pod, WARNING, "Failed", "Error: ImagePullBackOff", "kubelet");
                let message = format!("Back-off pulling image \"{image}\"");
                self.write_waiting(store, ns, name, "ImagePullBackOff", Some(&message))
            }
            Some("ErrImagePull" | "ImagePullBackOff") => Ok(()),
            _ => {
                let detail = format!(
                    "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": not found"
                );
                rec.record(
                    pod,
                    NORMAL,
                    "Pulling",
                    &format!("Pulling image \"{image}\""),
                    "kubelet",
                );
                rec.record(pod, WARNING, "Failed", &detail, "kubelet");
                rec.record(pod, WARNING, "Failed", "Error: ErrImagePull", "kubelet");
                self.write_waiting(store, ns, name, "ErrImagePull", Some(&detail))
            }
        }
    }

    fn start(
        &self,
        store: &Store,
        rec: &mut Recorder,
        exec: Option<&mut Executor>,
        pod: &Arc<Value>,
    ) -> Result<(), crate::ApiError> {
        let (ns, name) = (json::namespace(pod), json::name(pod));
        let first_start = str_at(pod, "/status/phase") == Some("Pending");
        for (c, image) in containers(pod, "initContainers")
            .into_iter()
            .chain(containers(pod, "containers"))
        {
            if first_start {
                rec.record(
                    pod,
                    NORMAL,
                    "Pulled",
                    &format!("Container image \"{image}\" already present on machine"),
                    "kubelet",
                );
            }
            rec.record(
                pod,
                NORMAL,
                "Created",
                &format!("Created container: {c}"),
                "kubelet",
            );
            rec.record(
                pod,
                NORMAL,
                "Started",
                &format!("Started container {c}"),
                "kubelet",
            );
        }
        let now = json::now_rfc3339();
        let updated = store.update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            let prev: Vec<Value> = json::at(&p, "/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
            let statuses: Vec<Value> = containers(&p, "containers")
                .into_iter()
                .map(|(c, image)| {
                    let old = prev.iter().find(|s| s.get("name").and_then(Value::as_str) == Some(c.as_str()));
                    json!({
                        "name": c, "image": image, "imageID": format!("{image}@sha256:{:064x}", 0),
                        "containerID": format!("containerd://{}", json::random_suffix(16)),
                        "ready": true, "started": true,
                        "restartCount": old.and_then(|o| o.get("restartCount")).cloned().unwrap_or(json!(0)),
                        "state": {"running": {"startedAt": now}},
                        "lastState": old.and_then(|o| o.get("lastState")).cloned().unwrap_or(json!({})),
                    })
                })
                .collect();
            p["status"]["containerStatuses"] = json!(statuses);
            let init: Vec<Value> = containers(&p, "initContainers")
                .into_iter()
                .map(|(c, image)| json!({"name": c, "image": image, "imageID": "", "ready": true, "started": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}, "lastState": {}}))
                .collect();
            if !init.is_empty() {
                p["status"]["initContainerStatuses"] = json!(init);
            }
            if first_start {
                let n = POD_IPS.fetch_add(1, Ordering::Relaxed);
                let ip = format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 2);
                p["status"]["phase"] = json!("Running");
                p["status"]["startTime"] = json!(now);
                p["status"]["podIP"] = json!(ip);
                p["status"]["podIPs"] = json!([{"ip": ip}]);
                p["status"]["hostIP"] = json!("10.0.0.1");
            }
            for ty in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"] {
                set_condition(&mut p, ty, "True", None, None);
            }
            Ok(p)
        })?;
        match exec.filter(|e| e.eligible(pod)) {
            Some(ex) => ex.start(&updated),
            None => {
                if let Some(text) = json::annotation(pod, annotations::LOG) {
                    for (c, _) in containers(pod, "containers") {
                        store.logs.append(ns, name, &c, &format!("{text}\n"));
                    }
                }
            }
        }
        Ok(())
    }

    fn crash_loop(
        &self,
        store: &Store,
        rec: &mut Recorder,
        pod: &Value,
        code: i32,
    ) -> Result<(), crate::ApiError> {
        let (ns, name, uid) = (json::namespace(pod), json::name(pod), json::uid(pod));
        for (c, _) in containers(pod, "containers") {
            rec.record(
                pod,
                WARNING,
                "BackOff",
                &format!("Back-off restarting failed container {c} in pod {name}_{ns}({uid})"),
                "kubelet",
            );
        }
        let now = json::now_rfc3339();
        store.update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            if let Some(list) = p.pointer_mut("/status/containerStatuses").and_then(Value::as_array_mut) {
                for s in list {
                    let started = json::at(s, "/state/running/startedAt").cloned().unwrap_or(json!(now));
                    let count = s.get("restartCount").and_then(Value::as_i64).unwrap_or(0) + 1;
                    s["restartCount"] = json!(count);
                    s["ready"] = json!(false);
                    s["lastState"] = json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "startedAt": started, "finishedAt": now}});
                    s["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}});
                }
            }
            set_condition(&mut p, "Ready", "False", Some("ContainersNotReady"), Some("containers with unready status"));
            set_condition(&mut p, "ContainersReady", "False", Some("ContainersNotReady"), Some("containers with unready status"));
            Ok(p)
        })?;
        Ok(())
    }

    /// Ends the pod: every container terminated with `code`; `Succeeded` when 0, else `Failed`.
    fn terminate(
        &self,
        store: &Store,
        ns: &str,
        name: &str,
        code: i32,
        pod_reason: Option<(&str, &str)>,
    ) -> Result<(), crate::ApiError> {
        let now = json::now_rfc3339();
        let updated = store.update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            let phase = if code == 0 && pod_reason.is_none() { "Succeeded" } else { "Failed" };
            p["status"]["phase"] = json!(phase);
            if let Some((reason, message)) = pod_reason {
                p["status"]["reason"] = json!(reason);
                p["status"]["message"] = json!(message);
            }
            if let Some(list) = p.pointer_mut("/status/containerStatuses").and_then(Value::as_array_mut) {
                for s in list {
                    let started = json::at(s, "/state/running/startedAt").cloned().unwrap_or(json!(now));
                    s["ready"] = json!(false);
                    s["started"] = json!(false);
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    s["state"] = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now}});
                }
            }
            let why = if phase == "Succeeded" { "PodCompleted" } else { "PodFailed" };
            set_condition(&mut p, "Ready", "False", Some(why), None);
            set_condition(&mut p, "ContainersReady", "False", Some(why), None);
            Ok(p)
        })?;
        for (c, _) in containers(&updated, "containers")
            .into_iter()
            .chain(containers(&updated, "initContainers"))
        {
            store.logs.close(ns, name, &c);
        }
        Ok(())
    }
}
