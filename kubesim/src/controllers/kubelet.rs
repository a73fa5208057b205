//! The simulated kubelet: moves bound pods through ContainerCreating → Running → Succeeded/Failed,
//! writes the kubelet's events, honours `activeDeadlineSeconds` and `restartPolicy`, and injects
//! faults (image pull failures, crashing images). The steps and their status and events come from
//! [`lifecycle`], shared with the node agent. In execution mode eligible pods
//! really run through the [`Executor`]; otherwise annotations and the
//! scenario decide.

use std::sync::Arc;

use serde_json::Value;

use super::events::Recorder;
use super::lifecycle::{self, Exit, Step};
use crate::config::{Scenario, annotations};
use crate::exec::Executor;
use crate::json::{self, str_at};
use crate::resources::PODS;
use crate::store::Store;

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
        for pod in pods.iter() {
            let bound = !str_at(pod, "/spec/nodeName").unwrap_or_default().is_empty();
            if !bound || !lifecycle::is_active(pod) {
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
        mut exec: Option<&mut Executor>,
        pod: &Arc<Value>,
    ) -> Result<(), crate::ApiError> {
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
