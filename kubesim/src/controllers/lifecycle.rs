//! The kubelet's pod lifecycle as pure functions over pod JSON, shared by the simulated kubelet
//! ([`super::kubelet`]) and the node agent ([`crate::agent`]): which [`Step`] a bound pod takes
//! next ([`next_step`]), the status that step writes ([`apply`]) and the events the kubelet reports
//! with it ([`events`]). Both callers keep no state of their own between steps: the pod's status
//! (condition and container times, waiting reasons) says where it is.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use super::events::{NORMAL, WARNING};
use super::scheduler::set_condition;
use crate::config::{Scenario, annotations};
use crate::json::{self, str_at};

/// Reason and message of a pod failed by its `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: (&str, &str) = (
    "DeadlineExceeded",
    "Pod was active on the node longer than the specified deadline",
);

/// Exit code of containers killed at the deadline (SIGKILL).
pub const KILLED_EXIT_CODE: i32 = 137;

static POD_IPS: AtomicU32 = AtomicU32::new(0);

/// How a container run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The container's exit code: the pod's exit-code annotation, else 1 for a crash image and 0
    /// otherwise (or the real process's code in execution mode).
    pub code: i32,
}

/// The next thing the kubelet does with a bound pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `activeDeadlineSeconds` has passed: the pod fails with `DeadlineExceeded`.
    DeadlineExceeded,
    /// The pod has no container statuses yet: its containers are `ContainerCreating`.
    Creating,
    /// Pulling this image fails: `ErrImagePull`.
    ErrImagePull(String),
    /// The pull failed a while ago: `ImagePullBackOff` (the pod stays there).
    ImagePullBackOff(String),
    /// The containers start (first start, or a restart after a crash back-off).
    Start,
    /// The containers exited with this code and restart: `CrashLoopBackOff`.
    CrashLoop(i32),
    /// The containers exited with this code and the pod ends (`Succeeded` on 0, else `Failed`).
    Terminate(i32),
}

impl Step {
    /// The exit code the pod's containers end with in this step, if they end.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Self::DeadlineExceeded => Some(KILLED_EXIT_CODE),
            Self::CrashLoop(code) | Self::Terminate(code) => Some(*code),
            _ => None,
        }
    }
}

pub use super::events::{KUBELET, KubeletEvent};

/// The `(name, image)` of each container in the pod's `spec.<list>` (`containers` or
/// `initContainers`).
pub fn containers(pod: &Value, list: &str) -> Vec<(String, String)> {
    json::at(pod, &format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|c| (json::string(c, "name"), json::string(c, "image")))
                .collect()
        })
        .unwrap_or_default()
}

/// The `(name, image, fieldPath)` of every init container, then every container.
fn all_containers(pod: &Value) -> Vec<(String, String, String)> {
    let with_path = |list: &'static str| {
        containers(pod, list).into_iter().map(move |(c, i)| {
            let path = format!("spec.{list}{{{c}}}");
            (c, i, path)
        })
    };
    with_path("initContainers")
        .chain(with_path("containers"))
        .collect()
}

/// Whether the kubelet still has work with a bound pod: `Pending` or `Running`, not being deleted.
pub fn is_active(pod: &Value) -> bool {
    matches!(
        str_at(pod, "/status/phase").unwrap_or_default(),
        "Pending" | "Running"
    ) && json::at(pod, "/metadata/deletionTimestamp").is_none()
}

/// The waiting reason of the pod's first container, if it is waiting.
pub fn waiting_reason(pod: &Value) -> Option<&str> {
    json::at(pod, "/status/containerStatuses/0/state/waiting/reason").and_then(Value::as_str)
}

/// The `lastTransitionTime` of the pod condition `ty`, if the pod has it.
pub fn condition_time(pod: &Value, ty: &str) -> Option<String> {
    json::at(pod, "/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        })
        .and_then(|c| c.get("lastTransitionTime").and_then(Value::as_str))
        .map(str::to_string)
}

/// What the kubelet does next with an active pod bound `bound_for` seconds ago, or `None` when
/// nothing is due yet. `exit` says whether a running container has exited; it is called only for a
/// running pod whose containers are not in back-off.
pub fn next_step(
    pod: &Value,
    scenario: &Scenario,
    bound_for: f64,
    exit: impl FnOnce() -> Option<Exit>,
) -> Option<Step> {
    let delay = scenario.start_delay.as_secs_f64();
    if let Some(deadline) = json::at(pod, "/spec/activeDeadlineSeconds").and_then(Value::as_f64)
        && let Some(start) = str_at(pod, "/status/startTime")
        && json::seconds_since(start) >= deadline
    {
        return Some(Step::DeadlineExceeded);
    }
    if str_at(pod, "/status/phase") == Some("Pending") {
        if json::at(pod, "/status/containerStatuses").is_none() {
            return Some(Step::Creating);
        }
        if bound_for < delay {
            return None;
        }
        let bad = all_containers(pod)
            .into_iter()
            .map(|(_, image, _)| image)
            .find(|i| scenario.image_pull_failures.contains(i));
        return match (bad, waiting_reason(pod)) {
            (None, _) => Some(Step::Start),
            (Some(image), Some("ErrImagePull")) if bound_for >= 2.0 * delay => {
                Some(Step::ImagePullBackOff(image))
            }
            (Some(_), Some("ErrImagePull" | "ImagePullBackOff")) => None,
            (Some(image), _) => Some(Step::ErrImagePull(image)),
        };
    }
    // Running: a container waiting after a crash restarts after its back-off.
    if waiting_reason(pod) == Some("CrashLoopBackOff") {
        let finished = str_at(
            pod,
            "/status/containerStatuses/0/lastState/terminated/finishedAt",
        )
        .unwrap_or_default();
        let restarts = json::i64_at(pod, "/status/containerStatuses/0/restartCount").unwrap_or(1);
        return (json::seconds_since(finished) >= crash_backoff(delay, restarts))
            .then_some(Step::Start);
    }
    let exit = exit()?;
    let policy = str_at(pod, "/spec/restartPolicy").unwrap_or("Always");
    let restart = policy == "Always" || (policy == "OnFailure" && exit.code != 0);
    Some(if restart {
        Step::CrashLoop(exit.code)
    } else {
        Step::Terminate(exit.code)
    })
}

/// Longest wait before restarting a crashed container, in seconds (the kubelet's cap).
pub const MAX_CRASH_BACKOFF: f64 = 300.0;

/// Seconds a crashed container waits before restart number `restarts`: the start delay, doubling
/// with each restart like the kubelet's back-off, at most [`MAX_CRASH_BACKOFF`] (or the delay, if
/// longer).
pub fn crash_backoff(delay: f64, restarts: i64) -> f64 {
    let doublings = restarts.saturating_sub(1).clamp(0, 30) as i32;
    (delay * 2f64.powi(doublings)).min(MAX_CRASH_BACKOFF.max(delay))
}

/// When a simulated (not executed) container exits, if it has by now: after the
/// `run-seconds` annotation, at once for a crashing image, or after `scenario.pod_run`; with the
/// `exit-code` annotation (default 0, 1 for a crashing image).
pub fn simulated_exit(pod: &Value, scenario: &Scenario) -> Option<Exit> {
    let crash = !scenario.crash_images.is_empty()
        && containers(pod, "containers")
            .iter()
            .any(|(_, i)| scenario.crash_images.contains(i));
    let run = json::annotation(pod, annotations::RUN_SECONDS)
        .and_then(|s| s.parse::<f64>().ok())
        .or(if crash { Some(0.0) } else { None })
        .or(scenario
            .pod_run
            .filter(|_| meant_to_end(pod))
            .map(|d| d.as_secs_f64()))?;
    let started = str_at(pod, "/status/containerStatuses/0/state/running/startedAt")?;
    if json::seconds_since(started) < run {
        return None;
    }
    let code = json::annotation(pod, annotations::EXIT_CODE)
        .and_then(|s| s.parse().ok())
        .unwrap_or(if crash { 1 } else { 0 });
    Some(Exit { code })
}

/// Whether a pod is meant to end by itself (`restartPolicy` `Never` or `OnFailure`: jobs, CPU
/// pods, submitters); `scenario.pod_run` ends only those, so servers (Ray heads and workers,
/// playgrounds: `Always`) keep running until deleted unless their annotation says otherwise.
fn meant_to_end(pod: &Value) -> bool {
    str_at(pod, "/spec/restartPolicy").is_some_and(|p| p != "Always")
}

/// The message of a failed pull of `image` (the waiting message and the `Failed` event).
pub fn pull_failure_message(image: &str) -> String {
    format!(
        "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": not found"
    )
}

/// The message of the back-off after a failed pull of `image`.
pub fn pull_backoff_message(image: &str) -> String {
    format!("Back-off pulling image \"{image}\"")
}

/// The events the kubelet writes for `step` of `pod` (the pod as it was before the step).
pub fn events(step: &Step, pod: &Value) -> Vec<KubeletEvent> {
    let path_of = |image: &str| {
        all_containers(pod)
            .into_iter()
            .find(|(_, i, _)| i == image)
            .map(|(_, _, path)| path)
    };
    match step {
        Step::DeadlineExceeded => vec![KubeletEvent::new(
            NORMAL,
            DEADLINE_EXCEEDED.0,
            DEADLINE_EXCEEDED.1.to_string(),
            None,
        )],
        Step::Creating | Step::Terminate(_) => Vec::new(),
        Step::ErrImagePull(image) => {
            let path = path_of(image);
            vec![
                KubeletEvent::new(
                    NORMAL,
                    "Pulling",
                    format!("Pulling image \"{image}\""),
                    path.clone(),
                ),
                KubeletEvent::new(WARNING, "Failed", pull_failure_message(image), path.clone()),
                KubeletEvent::new(WARNING, "Failed", "Error: ErrImagePull".into(), path),
            ]
        }
        Step::ImagePullBackOff(image) => {
            let path = path_of(image);
            vec![
                KubeletEvent::new(NORMAL, "BackOff", pull_backoff_message(image), path.clone()),
                KubeletEvent::new(WARNING, "Failed", "Error: ImagePullBackOff".into(), path),
            ]
        }
        Step::Start => {
            let first_start = str_at(pod, "/status/phase") == Some("Pending");
            let mut out = Vec::new();
            for (c, image, path) in all_containers(pod) {
                if first_start {
                    out.push(KubeletEvent::new(
                        NORMAL,
                        "Pulled",
                        format!("Container image \"{image}\" already present on machine"),
                        Some(path.clone()),
                    ));
                }
                out.push(KubeletEvent::new(
                    NORMAL,
                    "Created",
                    format!("Created container: {c}"),
                    Some(path.clone()),
                ));
                out.push(KubeletEvent::new(
                    NORMAL,
                    "Started",
                    format!("Started container {c}"),
                    Some(path),
                ));
            }
            out
        }
        Step::CrashLoop(_) => {
            let (ns, name, uid) = (json::namespace(pod), json::name(pod), json::uid(pod));
            containers(pod, "containers")
                .into_iter()
                .map(|(c, _)| {
                    KubeletEvent::new(
                        WARNING,
                        "BackOff",
                        format!(
                            "Back-off restarting failed container {c} in pod {name}_{ns}({uid})"
                        ),
                        Some(format!("spec.containers{{{c}}}")),
                    )
                })
                .collect()
        }
    }
}

/// Writes the status of `step` into `pod`; `host_ip` is the node's address (reported as
/// `hostIP` when the pod first starts).
pub fn apply(step: &Step, pod: &mut Value, host_ip: &str) {
    match step {
        Step::DeadlineExceeded => set_terminated(pod, KILLED_EXIT_CODE, Some(DEADLINE_EXCEEDED)),
        Step::Creating => set_waiting(pod, "ContainerCreating", None),
        Step::ErrImagePull(image) => {
            set_waiting(pod, "ErrImagePull", Some(&pull_failure_message(image)));
        }
        Step::ImagePullBackOff(image) => {
            set_waiting(pod, "ImagePullBackOff", Some(&pull_backoff_message(image)));
        }
        Step::Start => set_running(pod, host_ip),
        Step::CrashLoop(code) => set_crash_loop(pod, *code),
        Step::Terminate(code) => set_terminated(pod, *code, None),
    }
}

/// A fresh container status of `name` running `image` in `state`.
fn container_status(name: &str, image: &str, state: Value) -> Value {
    json!({"name": name, "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0, "state": state, "lastState": {}})
}

fn set_not_ready(pod: &mut Value, reason: &str, message: Option<&str>, containers_too: bool) {
    set_condition(pod, "Ready", "False", Some(reason), message);
    if containers_too {
        set_condition(pod, "ContainersReady", "False", Some(reason), message);
    }
}

/// Every container waiting with `reason` (init containers `PodInitializing`), the pod not Ready.
fn set_waiting(p: &mut Value, reason: &str, message: Option<&str>) {
    let mut waiting = json!({"reason": reason});
    if let Some(m) = message {
        waiting["message"] = json!(m);
    }
    let statuses: Vec<Value> = containers(p, "containers")
        .into_iter()
        .map(|(c, image)| container_status(&c, &image, json!({"waiting": waiting})))
        .collect();
    p["status"]["containerStatuses"] = json!(statuses);
    let init: Vec<Value> = containers(p, "initContainers")
        .into_iter()
        .map(|(c, image)| {
            container_status(
                &c,
                &image,
                json!({"waiting": {"reason": "PodInitializing"}}),
            )
        })
        .collect();
    if !init.is_empty() {
        p["status"]["initContainerStatuses"] = json!(init);
    }
    set_not_ready(
        p,
        "ContainersNotReady",
        Some("containers with unready status"),
        false,
    );
}

/// The next pod IP, from 10.244.0.0/16.
fn next_pod_ip() -> String {
    let n = POD_IPS.fetch_add(1, Ordering::Relaxed);
    format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 2)
}

/// Every container running (restart counts and last states kept), init containers completed;
/// on the first start the pod turns `Running` with its IPs and start time.
fn set_running(p: &mut Value, host_ip: &str) {
    let now = json::now_rfc3339();
    let first_start = str_at(p, "/status/phase") == Some("Pending");
    let prev: Vec<Value> = json::at(p, "/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let statuses: Vec<Value> = containers(p, "containers")
        .into_iter()
        .map(|(c, image)| {
            let old = prev
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(c.as_str()));
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
    let init: Vec<Value> = containers(p, "initContainers")
        .into_iter()
        .map(|(c, image)| {
            let mut s = container_status(
                &c,
                &image,
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}),
            );
            s["ready"] = json!(true);
            s
        })
        .collect();
    if !init.is_empty() {
        p["status"]["initContainerStatuses"] = json!(init);
    }
    if first_start {
        let ip = next_pod_ip();
        p["status"]["phase"] = json!("Running");
        p["status"]["startTime"] = json!(now);
        p["status"]["podIP"] = json!(ip);
        p["status"]["podIPs"] = json!([{"ip": ip}]);
        p["status"]["hostIP"] = json!(host_ip);
        p["status"]["hostIPs"] = json!([{"ip": host_ip}]);
    }
    for ty in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        set_condition(p, ty, "True", None, None);
    }
}

/// Sets the pod's IP (`None`: the pod has none, as a pod nothing may dial).
pub fn set_pod_ip(p: &mut Value, ip: Option<&str>) {
    let Some(status) = p.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    match ip {
        Some(ip) => {
            status.insert("podIP".into(), json!(ip));
            status.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        None => {
            status.remove("podIP");
            status.remove("podIPs");
        }
    }
}

/// Whether each container (in spec order) is reported ready.
pub fn readiness(p: &Value) -> Vec<bool> {
    let statuses = json::at(p, "/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    containers(p, "containers")
        .iter()
        .map(|(c, _)| {
            statuses
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(c.as_str()))
                .and_then(|s| s.get("ready"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
        .collect()
}

/// Reports each running container (in spec order) ready or not, and the pod's `ContainersReady`
/// and `Ready` conditions from them.
pub fn set_readiness(p: &mut Value, ready: &[bool]) {
    let names: Vec<String> = containers(p, "containers")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    if let Some(list) = p
        .pointer_mut("/status/containerStatuses")
        .and_then(Value::as_array_mut)
    {
        for s in list {
            let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
            if let Some(i) = names.iter().position(|n| n == name) {
                s["ready"] = json!(ready.get(i).copied().unwrap_or(false));
            }
        }
    }
    if ready.iter().all(|r| *r) {
        set_condition(p, "ContainersReady", "True", None, None);
        set_condition(p, "Ready", "True", None, None);
    } else {
        set_not_ready(
            p,
            "ContainersNotReady",
            Some("containers with unready status"),
            true,
        );
    }
}

/// Ends a pod whose init container `container` exited with `code`: the pod `Failed`, that init
/// container terminated (`Error`), the containers never started.
pub fn set_init_failed(p: &mut Value, container: &str, code: i32) {
    let now = json::now_rfc3339();
    let init: Vec<Value> = containers(p, "initContainers")
        .into_iter()
        .map(|(c, image)| {
            let state = if c == container {
                json!({"terminated": {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}})
            } else {
                json!({"waiting": {"reason": "PodInitializing"}})
            };
            container_status(&c, &image, state)
        })
        .collect();
    p["status"]["initContainerStatuses"] = json!(init);
    p["status"]["phase"] = json!("Failed");
    set_condition(
        p,
        "Initialized",
        "False",
        Some("ContainersNotInitialized"),
        Some(&format!("containers with incomplete status: [{container}]")),
    );
    set_not_ready(p, "PodFailed", None, true);
}

/// Init container `container` exited with `code` in a pod that restarts it (`restartPolicy`
/// `Always` or `OnFailure`): it waits in `CrashLoopBackOff` with its last exit and `restarts`
/// restarts, the pod stays `Pending` and not initialised.
pub fn set_init_back_off(p: &mut Value, container: &str, code: i32, restarts: u32) {
    let now = json::now_rfc3339();
    let init: Vec<Value> = containers(p, "initContainers")
        .into_iter()
        .map(|(c, image)| {
            if c != container {
                return container_status(&c, &image, json!({"waiting": {"reason": "PodInitializing"}}));
            }
            let mut s = container_status(
                &c,
                &image,
                json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off restarting failed container {c}")}}),
            );
            s["restartCount"] = json!(restarts);
            s["lastState"] = json!({"terminated": {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}});
            s
        })
        .collect();
    p["status"]["initContainerStatuses"] = json!(init);
    p["status"]["phase"] = json!("Pending");
    set_condition(
        p,
        "Initialized",
        "False",
        Some("ContainersNotInitialized"),
        Some(&format!("containers with incomplete status: [{container}]")),
    );
}

/// Every container back in `CrashLoopBackOff` after exiting with `code` (restart count + 1).
fn set_crash_loop(p: &mut Value, code: i32) {
    let now = json::now_rfc3339();
    if let Some(list) = p
        .pointer_mut("/status/containerStatuses")
        .and_then(Value::as_array_mut)
    {
        for s in list {
            let count = s.get("restartCount").and_then(Value::as_i64).unwrap_or(0) + 1;
            s["restartCount"] = json!(count);
            s["ready"] = json!(false);
            s["lastState"] = terminated(s, code, &now);
            s["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}});
        }
    }
    set_not_ready(
        p,
        "ContainersNotReady",
        Some("containers with unready status"),
        true,
    );
}

/// The `terminated` state of a container status that ran from its `running.startedAt` (or `now`)
/// until `now` and exited with `code`.
fn terminated(status: &Value, code: i32, now: &str) -> Value {
    let started = json::at(status, "/state/running/startedAt")
        .cloned()
        .unwrap_or(json!(now));
    let reason = if code == 0 { "Completed" } else { "Error" };
    json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now}})
}

/// Ends the pod: every container terminated with `code`; `Succeeded` when 0 and no `pod_reason`,
/// else `Failed` (with the pod-level reason and message, if given).
fn set_terminated(p: &mut Value, code: i32, pod_reason: Option<(&str, &str)>) {
    let now = json::now_rfc3339();
    let phase = if code == 0 && pod_reason.is_none() {
        "Succeeded"
    } else {
        "Failed"
    };
    p["status"]["phase"] = json!(phase);
    if let Some((reason, message)) = pod_reason {
        p["status"]["reason"] = json!(reason);
        p["status"]["message"] = json!(message);
    }
    if let Some(list) = p
        .pointer_mut("/status/containerStatuses")
        .and_then(Value::as_array_mut)
    {
        for s in list {
            s["ready"] = json!(false);
            s["started"] = json!(false);
            s["state"] = terminated(s, code, &now);
        }
    }
    let why = if phase == "Succeeded" {
        "PodCompleted"
    } else {
        "PodFailed"
    };
    set_not_ready(p, why, None, true);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pod(image: &str) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "n", "restartPolicy": "Never",
                     "initContainers": [{"name": "init", "image": "busybox"}],
                     "containers": [{"name": "main", "image": image}]},
            "status": {"phase": "Pending"},
        })
    }

    fn scenario() -> Scenario {
        Scenario {
            start_delay: Duration::from_secs(1),
            image_pull_failures: vec!["bad:1".into()],
            crash_images: vec!["crash:1".into()],
            ..Scenario::default()
        }
    }

    fn step(p: &Value, bound_for: f64) -> Option<Step> {
        next_step(p, &scenario(), bound_for, || simulated_exit(p, &scenario()))
    }

    #[test]
    fn a_failed_init_container_of_a_restarting_pod_backs_off_and_the_pod_stays_pending() {
        let mut p = pod("good:1");
        p["spec"]["restartPolicy"] = json!("Always");
        set_init_back_off(&mut p, "init", 86, 2);
        let s = &p["status"]["initContainerStatuses"][0];
        assert_eq!(s["restartCount"], 2);
        assert_eq!(s["lastState"]["terminated"]["exitCode"], 86);
        assert_eq!(s["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(p["status"]["phase"], "Pending");
        let initialized = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Initialized")
            .unwrap();
        assert_eq!(initialized["status"], "False");
    }

    #[test]
    fn a_pod_is_created_then_started_after_the_delay() {
        let mut p = pod("good:1");
        assert_eq!(step(&p, 0.0), Some(Step::Creating));
        apply(&Step::Creating, &mut p, "127.0.0.1");
        assert_eq!(waiting_reason(&p), Some("ContainerCreating"));
        assert_eq!(
            p["status"]["initContainerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert_eq!(step(&p, 0.5), None);
        assert_eq!(step(&p, 1.0), Some(Step::Start));
        let ev = events(&Step::Start, &p);
        let reasons: Vec<&str> = ev.iter().map(|e| e.reason).collect();
        assert_eq!(
            reasons,
            [
                "Pulled", "Created", "Started", "Pulled", "Created", "Started"
            ]
        );
        assert_eq!(ev[3].field_path.as_deref(), Some("spec.containers{main}"));
        assert_eq!(
            ev[0].field_path.as_deref(),
            Some("spec.initContainers{init}")
        );
        apply(&Step::Start, &mut p, "127.0.0.1");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["status"]["hostIP"], "127.0.0.1");
        assert_eq!(p["status"]["hostIPs"][0]["ip"], "127.0.0.1");
        assert!(str_at(&p, "/status/podIP").is_some_and(|ip| ip.starts_with("10.244.")));
        assert_eq!(
            p["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        let ready: Vec<&str> = p["status"]["conditions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|c| c["status"] == "True")
                    .filter_map(|c| c["type"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            ready,
            [
                "Ready",
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady"
            ]
        );
        // No run time, no pod_run: runs until deleted.
        assert_eq!(step(&p, 5.0), None);
    }

    #[test]
    fn a_bad_image_fails_then_backs_off() {
        let mut p = pod("bad:1");
        apply(&Step::Creating, &mut p, "h");
        assert_eq!(step(&p, 1.0), Some(Step::ErrImagePull("bad:1".into())));
        let ev = events(&Step::ErrImagePull("bad:1".into()), &p);
        assert_eq!(ev[1].ty, WARNING);
        assert_eq!(ev[1].message, pull_failure_message("bad:1"));
        assert_eq!(ev[2].message, "Error: ErrImagePull");
        apply(&Step::ErrImagePull("bad:1".into()), &mut p, "h");
        assert_eq!(step(&p, 1.5), None);
        assert_eq!(step(&p, 2.0), Some(Step::ImagePullBackOff("bad:1".into())));
        apply(&Step::ImagePullBackOff("bad:1".into()), &mut p, "h");
        assert_eq!(waiting_reason(&p), Some("ImagePullBackOff"));
        assert_eq!(step(&p, 60.0), None);
    }

    #[test]
    fn exits_follow_the_restart_policy() {
        let mut p = pod("good:1");
        p["metadata"]["annotations"] =
            json!({annotations::RUN_SECONDS: "0", annotations::EXIT_CODE: "3"});
        apply(&Step::Creating, &mut p, "h");
        apply(&Step::Start, &mut p, "h");
        assert_eq!(step(&p, 9.0), Some(Step::Terminate(3)));
        p["spec"]["restartPolicy"] = json!("OnFailure");
        assert_eq!(step(&p, 9.0), Some(Step::CrashLoop(3)));
        let ev = events(&Step::CrashLoop(3), &p);
        assert_eq!(
            ev[0].message,
            "Back-off restarting failed container main in pod p_ns(u1)"
        );
        apply(&Step::CrashLoop(3), &mut p, "h");
        assert_eq!(waiting_reason(&p), Some("CrashLoopBackOff"));
        assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 1);
        assert_eq!(
            p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
            3
        );
        // Restarts after the delay since it finished.
        assert_eq!(step(&p, 9.0), None);
        apply(&Step::Terminate(3), &mut p, "h");
        assert_eq!(p["status"]["phase"], "Failed");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
    }

    #[test]
    fn crash_back_off_doubles_up_to_the_cap() {
        assert_eq!(crash_backoff(0.5, 1), 0.5);
        assert_eq!(crash_backoff(0.5, 3), 2.0);
        assert_eq!(crash_backoff(0.5, 40), MAX_CRASH_BACKOFF);
        assert_eq!(crash_backoff(0.0, 9), 0.0);
        assert_eq!(crash_backoff(600.0, 2), 600.0);
    }

    #[test]
    fn crash_images_exit_1_at_once_and_deadlines_fail_the_pod() {
        let mut p = pod("crash:1");
        apply(&Step::Creating, &mut p, "h");
        apply(&Step::Start, &mut p, "h");
        assert_eq!(step(&p, 9.0), Some(Step::Terminate(1)));
        p["spec"]["activeDeadlineSeconds"] = json!(0);
        assert_eq!(step(&p, 9.0), Some(Step::DeadlineExceeded));
        assert_eq!(Step::DeadlineExceeded.exit_code(), Some(KILLED_EXIT_CODE));
        apply(&Step::DeadlineExceeded, &mut p, "h");
        assert_eq!(p["status"]["phase"], "Failed");
        assert_eq!(p["status"]["reason"], "DeadlineExceeded");
        assert!(!is_active(&p));
    }
}
