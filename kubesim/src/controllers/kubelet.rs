//! The simulated kubelet: moves bound pods through ContainerCreating → Running → Succeeded/Failed,
//! writes the kubelet's events, honours `activeDeadlineSeconds` and `restartPolicy`, finishes
//! graceful deletions, and injects faults (image pull failures, crashing images).
//!
//! The kubelet of a NotReady node is taken to be down (a real NotReady node's kubelet mostly is,
//! or cannot reach the API server): its pods do not advance and their graceful deletions are not
//! finished until the node is Ready again. Executed processes of pods whose node no longer
//! exists are killed at once, as a lost machine's are. The steps and their status and events come from
//! [`lifecycle`], shared with the node agent. In execution mode eligible pods
//! really run through the [`Executor`]; otherwise annotations and the
//! scenario decide.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::events::Recorder;
use super::lifecycle::{self, Exit, Step};
use crate::config::{Scenario, annotations};
use crate::exec::Executor;
use crate::json::{self, str_at};
use crate::resources::{NODES, PODS};
use crate::store::{DeleteOptions, Store};

/// The `hostIP` simulated pods report.
const HOST_IP: &str = "10.0.0.1";

/// The kubelet of every simulated node.
pub struct Kubelet {
    scenario: Scenario,
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
        let nodes: HashMap<String, bool> = store
            .all(&NODES)
            .iter()
            .map(|n| (json::name(n).to_string(), crate::fleet::is_ready(n)))
            .collect();
        for pod in pods.iter() {
            let node = str_at(pod, "/spec/nodeName").unwrap_or_default();
            if node.is_empty() {
                continue;
            }
            match nodes.get(node) {
                // The machine is gone, and its processes with it.
                None => {
                    if let Some(ex) = exec.as_deref_mut()
                        && ex.is_running(json::uid(pod))
                    {
                        tracing::info!(
                            pod = json::name(pod),
                            node,
                            "node gone: killing the pod's processes"
                        );
                        ex.kill_now(json::uid(pod));
                    }
                    continue;
                }
                // A NotReady node's kubelet does nothing.
                Some(false) => continue,
                Some(true) => {}
            }
            if json::at(pod, "/metadata/deletionTimestamp").is_some() {
                self.finish_deletion(store, exec.as_deref_mut(), pod);
                continue;
            }
            if !lifecycle::is_active(pod) {
                continue;
            }
            if let Err(e) = self.advance(store, recorder, exec.as_deref_mut(), pod) {
                tracing::debug!(error = %e, pod = json::name(pod), "kubelet step skipped");
            }
        }
    }

    /// Confirms a graceful deletion, as a kubelet does once the pod's containers stopped: an
    /// executed pod's process gets SIGTERM and the pod stays Terminating (its log readable and
    /// followed) until the process ends, SIGKILL at the end of its grace period; then its logs
    /// are closed and the pod deleted with grace period 0 (it goes once it has no finalizers
    /// left; a pod kept by finalizers has its containers stopped and logs closed all the same).
    fn finish_deletion(&self, store: &Store, exec: Option<&mut Executor>, pod: &Arc<Value>) {
        let uid = json::uid(pod);
        // The containers stop whatever keeps the object (finalizers): once they have, their
        // logs end (a followed log's stream with them).
        if exec.is_some_and(|ex| ex.terminate(uid)) {
            return;
        }
        let (ns, name) = (json::namespace(pod), json::name(pod));
        for (c, _) in lifecycle::containers(pod, "containers")
            .into_iter()
            .chain(lifecycle::containers(pod, "initContainers"))
        {
            store.logs.close(ns, name, &c);
        }
        if json::i64_at(pod, "/metadata/deletionGracePeriodSeconds").unwrap_or(0) == 0 {
            // Marked by finalizers alone: it goes when they do.
            return;
        }
        let opts = DeleteOptions {
            uid: Some(uid.to_string()),
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        if let Err(e) = store.delete(&PODS, json::namespace(pod), json::name(pod), &opts) {
            tracing::debug!(error = %e, pod = json::name(pod), "graceful deletion not finished");
        }
    }

    fn advance(
        &self,
        store: &Store,
        rec: &mut Recorder,
        mut exec: Option<&mut Executor>,
        pod: &Arc<Value>,
    ) -> Result<(), crate::StatusError> {
        let (ns, name) = (json::namespace(pod), json::name(pod));
        let bound_at = lifecycle::condition_time(pod, "PodScheduled").unwrap_or_default();
        let step = lifecycle::next_step(
            pod,
            &self.scenario,
            json::seconds_since(&bound_at),
            || match exec.as_deref_mut().filter(|e| e.eligible(pod)) {
                Some(ex) => ex.poll(json::uid(pod)).map(|code| Exit { code }),
                None => lifecycle::simulated_exit(pod, &self.scenario),
            },
        );
        let Some(step) = step else { return Ok(()) };
        for e in lifecycle::events(&step, pod) {
            rec.record_kubelet(pod, &e);
        }
        if step == Step::DeadlineExceeded
            && let Some(ex) = exec.as_deref_mut()
        {
            ex.kill(json::uid(pod));
        }
        let updated = store.update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            lifecycle::apply(&step, &mut p, HOST_IP);
            Ok(p)
        })?;
        match step {
            Step::Start => match exec.filter(|e| e.eligible(pod)) {
                Some(ex) => ex.start(&updated),
                None => {
                    if let Some(text) = json::annotation(pod, annotations::LOG) {
                        for (c, _) in lifecycle::containers(pod, "containers") {
                            store.logs.append(ns, name, &c, &format!("{text}\n"));
                        }
                    }
                }
            },
            Step::DeadlineExceeded | Step::Terminate(_) => {
                for (c, _) in lifecycle::containers(&updated, "containers")
                    .into_iter()
                    .chain(lifecycle::containers(&updated, "initContainers"))
                {
                    store.logs.close(ns, name, &c);
                }
            }
            _ => {}
        }
        Ok(())
    }
}
