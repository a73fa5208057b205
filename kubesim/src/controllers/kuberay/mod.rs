//! The simulated KubeRay operator (v1.4 behaviour).
//!
//! A RayJob is validated (invalid: Warning event, empty status forever), gets a finalizer, then a
//! RayCluster named `<rayjob>-<suffix>` owned by it; `jobDeploymentStatus` stays `Initializing` until
//! every cluster pod is Running, becomes `Running` when the submitter Job (named like the RayJob) is
//! created, and `Complete`/`Failed` with `jobStatus` from the submitter's outcome. `activeDeadlineSeconds`
//! fails it with `DeadlineExceeded`; with `shutdownAfterJobFinishes` only the RayCluster is deleted
//! `ttlSecondsAfterFinished` after the end. Retries (`backoffLimit` > 0) are not simulated.

mod raycluster;
mod submitter;
pub mod validate;

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::events::{NORMAL, Recorder, WARNING};
use crate::config::Scenario;
use crate::json::{self, str_at};
use crate::resources::{JOBS, PODS, RAYCLUSTERS, RAYJOBS};
use crate::store::{DeleteOptions, Store};

pub use raycluster::{CLUSTER_LABEL, GROUP_LABEL, NODE_TYPE_LABEL};

/// Event source component of the simulated operator.
pub const OPERATOR: &str = "kuberay-operator";

/// Finalizer KubeRay puts on RayJobs in K8sJobMode.
pub const RAYJOB_FINALIZER: &str = "ray.io/rayjob-finalizer";

/// The operator's memory between ticks.
pub struct KubeRay {
    scenario: Scenario,
    exec: bool,
    warned: HashSet<(String, String)>,
}

impl KubeRay {
    /// An operator following `scenario`; `exec` makes submitters run the real entrypoint.
    pub fn new(scenario: Scenario, exec: bool) -> Self {
        Self {
            scenario,
            exec,
            warned: HashSet::new(),
        }
    }

    /// One pass over every RayJob and RayCluster.
    pub fn step(&mut self, store: &Arc<Store>, recorder: &mut Recorder) {
        for rj in store.all(&RAYJOBS) {
            if let Err(e) = self.rayjob(store, recorder, &rj) {
                tracing::debug!(error = %e, rayjob = json::name(&rj), "kuberay rayjob step skipped");
            }
        }
        let pods = store.all(&PODS);
        for rc in store.all(&RAYCLUSTERS) {
            if rc.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            if let Err(e) = raycluster::reconcile(store, recorder, &rc, &pods) {
                tracing::debug!(error = %e, raycluster = json::name(&rc), "kuberay raycluster step skipped");
            }
        }
    }

    fn rayjob(
        &mut self,
        store: &Store,
        rec: &mut Recorder,
        rj: &Arc<Value>,
    ) -> Result<(), crate::StatusError> {
        let (ns, name) = (json::namespace(rj), json::name(rj));
        let finalizers: Vec<String> = json::strs(rj.pointer("/metadata/finalizers"))
            .map(str::to_string)
            .collect();
        if rj.pointer("/metadata/deletionTimestamp").is_some() {
            if finalizers.iter().any(|f| f == RAYJOB_FINALIZER) {
                store.update_all(&RAYJOBS, ns, name, |cur| {
                    let mut r = cur.clone();
                    let kept: Vec<Value> = finalizers
                        .iter()
                        .filter(|f| *f != RAYJOB_FINALIZER)
                        .map(|f| json!(f))
                        .collect();
                    r["metadata"]["finalizers"] = json!(kept);
                    Ok(r)
                })?;
            }
            return Ok(());
        }
        let deployment = str_at(rj, "/status/jobDeploymentStatus").unwrap_or_default();
        match deployment {
            "" => self.start(store, rec, rj, &finalizers),
            "Initializing" | "Running" => self.follow(store, rec, rj, deployment),
            "Complete" | "Failed" => shutdown(store, rec, rj),
            // Resuming a suspended RayJob starts it from scratch, as KubeRay does.
            "Suspended" if rj.pointer("/spec/suspend") != Some(&json!(true)) => {
                store.update_all(&RAYJOBS, json::namespace(rj), json::name(rj), |cur| {
                    let mut r = cur.clone();
                    r["status"] = json!({});
                    Ok(r)
                })?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn start(
        &mut self,
        store: &Store,
        rec: &mut Recorder,
        rj: &Value,
        finalizers: &[String],
    ) -> Result<(), crate::StatusError> {
        let (ns, name) = (json::namespace(rj), json::name(rj));
        let checks = validate::metadata(rj)
            .map_err(|m| ("InvalidRayJobMetadata", m))
            .and_then(|()| validate::spec(rj).map_err(|m| ("InvalidRayJobSpec", m)));
        if let Err((reason, message)) = checks {
            if self
                .warned
                .insert((json::uid(rj).to_string(), message.clone()))
            {
                rec.record(rj, WARNING, reason, &message, OPERATOR);
            }
            return Ok(());
        }
        let suspended = rj.pointer("/spec/suspend") == Some(&json!(true));
        let job_id = str_at(rj, "/spec/jobId")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{name}-{}", json::random_suffix(5)));
        let cluster = format!("{name}-{}", json::random_suffix(5));
        let dashboard_port = raycluster::head_port(
            rj.pointer("/spec/rayClusterSpec").unwrap_or(&Value::Null),
            "dashboard",
        );
        let now = json::now_rfc3339();
        let with_finalizer: Vec<String> = finalizers
            .iter()
            .cloned()
            .chain(std::iter::once(RAYJOB_FINALIZER.to_string()))
            .collect();
        store.update_all(&RAYJOBS, ns, name, |cur| {
            let mut r = cur.clone();
            r["metadata"]["finalizers"] = json!(with_finalizer);
            r["status"] = if suspended {
                json!({"jobDeploymentStatus": "Suspended"})
            } else {
                json!({
                    "jobDeploymentStatus": "Initializing",
                    "jobId": job_id,
                    "rayClusterName": cluster,
                    "dashboardURL": format!("{cluster}-head-svc.{ns}.svc.cluster.local:{dashboard_port}"),
                    "startTime": now,
                    "observedGeneration": cur.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                    "succeeded": 0,
                    "failed": 0,
                })
            };
            Ok(r)
        })?;
        Ok(())
    }

    fn follow(
        &mut self,
        store: &Store,
        rec: &mut Recorder,
        rj: &Value,
        deployment: &str,
    ) -> Result<(), crate::StatusError> {
        let (ns, name) = (json::namespace(rj), json::name(rj));
        let cluster_name = str_at(rj, "/status/rayClusterName")
            .unwrap_or_default()
            .to_string();
        let start = str_at(rj, "/status/startTime")
            .unwrap_or_default()
            .to_string();
        if let Some(deadline) = rj
            .pointer("/spec/activeDeadlineSeconds")
            .and_then(Value::as_i64)
            && json::seconds_since(&start) >= deadline as f64
        {
            let message = format!(
                "The RayJob has passed the activeDeadlineSeconds. StartTime: {start}. ActiveDeadlineSeconds: {deadline}"
            );
            // The driver is stopped with the submitter; the cluster follows the shutdown rules.
            let _ = store.delete(&JOBS, ns, name, &DeleteOptions::default());
            return finish(
                store,
                ns,
                name,
                "Failed",
                None,
                Some(("DeadlineExceeded", message)),
            );
        }
        let cluster = match store.try_get(&RAYCLUSTERS, ns, &cluster_name) {
            Some(c) => c,
            None if deployment == "Initializing" => {
                let spec = rj
                    .pointer("/spec/rayClusterSpec")
                    .cloned()
                    .unwrap_or_default();
                let owner = json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name, "uid": json::uid(rj), "controller": true, "blockOwnerDeletion": true});
                let mut labels = rj.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
                labels["ray.io/originated-from-crd"] = json!("RayJob");
                labels["ray.io/originated-from-cr-name"] = json!(name);
                let body = json!({"metadata": {"name": cluster_name, "labels": labels, "ownerReferences": [owner]}, "spec": spec});
                store.create(&RAYCLUSTERS, ns, body)?;
                let message = format!("Created RayCluster {ns}/{cluster_name}");
                rec.record(rj, NORMAL, "CreatedRayCluster", &message, OPERATOR);
                return Ok(());
            }
            None => return Ok(()),
        };
        let ready = str_at(&cluster, "/status/state") == Some("ready");
        let cluster_status = cluster.get("status").cloned().unwrap_or_default();
        if deployment == "Initializing" {
            if !ready {
                return set_status(store, ns, name, |s| {
                    s["rayClusterStatus"] = cluster_status.clone()
                });
            }
            if store.try_get(&JOBS, ns, name).is_none() {
                store.create(
                    &JOBS,
                    ns,
                    submitter::job(rj, &cluster, &self.scenario, self.exec),
                )?;
                let message = format!("Created Kubernetes Job {ns}/{name}");
                rec.record(rj, NORMAL, "CreatedRayJobSubmitter", &message, OPERATOR);
            }
            return set_status(store, ns, name, |s| {
                s["jobDeploymentStatus"] = json!("Running");
                s["jobStatus"] = json!("PENDING");
                s["rayClusterStatus"] = cluster_status.clone();
            });
        }
        let Some(job) = store.try_get(&JOBS, ns, name) else {
            return Ok(());
        };
        // The Ray job's outcome is the first submitter run's: later submitter retries only
        // re-attach to the same Ray job (`ray job status` guards the submit).
        let phases: Vec<String> = store
            .all(&PODS)
            .iter()
            .filter(|p| {
                json::namespace(p) == ns
                    && json::label(p, crate::controllers::jobs::JOB_NAME_LABEL) == Some(name)
            })
            .map(|p| str_at(p, "/status/phase").unwrap_or_default().to_string())
            .collect();
        let job_failed = job
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter().any(|c| {
                    c.get("type") == Some(&json!("Failed"))
                        && c.get("status") == Some(&json!("True"))
                })
            });
        if phases.iter().any(|p| p == "Succeeded") {
            return finish(store, ns, name, "Complete", Some("SUCCEEDED"), None);
        }
        if phases.iter().any(|p| p == "Failed") || job_failed {
            let message = "Job entrypoint command failed".to_string();
            return finish(
                store,
                ns,
                name,
                "Failed",
                Some("FAILED"),
                Some(("AppFailed", message)),
            );
        }
        let driver_running = phases.iter().any(|p| p == "Running");
        let job_status = if driver_running { "RUNNING" } else { "PENDING" };
        set_status(store, ns, name, |s| {
            s["jobStatus"] = json!(job_status);
            s["rayClusterStatus"] = cluster_status.clone();
        })
    }
}

/// Appends `vars` to the `env` list of `container` (created when missing), after the user's own
/// variables, as KubeRay does.
fn push_env(container: &mut Value, vars: impl IntoIterator<Item = Value>) {
    if let Some(obj) = container.as_object_mut()
        && let Some(list) = obj.entry("env").or_insert_with(|| json!([])).as_array_mut()
    {
        list.extend(vars);
    }
}

fn set_status(
    store: &Store,
    ns: &str,
    name: &str,
    f: impl FnOnce(&mut Value),
) -> Result<(), crate::StatusError> {
    store.update_all(&RAYJOBS, ns, name, |cur| {
        let mut r = cur.clone();
        f(r.get_mut("status").unwrap_or(&mut Value::Null));
        Ok(r)
    })?;
    Ok(())
}

fn finish(
    store: &Store,
    ns: &str,
    name: &str,
    deployment: &str,
    job_status: Option<&str>,
    reason: Option<(&str, String)>,
) -> Result<(), crate::StatusError> {
    let now = json::now_rfc3339();
    set_status(store, ns, name, |s| {
        s["jobDeploymentStatus"] = json!(deployment);
        if let Some(js) = job_status {
            s["jobStatus"] = json!(js);
        }
        if let Some((r, m)) = &reason {
            s["reason"] = json!(r);
            s["message"] = json!(m);
        } else {
            s["message"] = json!("Job finished successfully.");
        }
        s["endTime"] = json!(now);
        let counter = if deployment == "Complete" {
            "succeeded"
        } else {
            "failed"
        };
        s[counter] = json!(1);
    })
}

/// After the end: with `shutdownAfterJobFinishes`, delete only the RayCluster once the TTL passed.
fn shutdown(store: &Store, rec: &mut Recorder, rj: &Value) -> Result<(), crate::StatusError> {
    if rj.pointer("/spec/shutdownAfterJobFinishes") != Some(&json!(true)) {
        return Ok(());
    }
    let ttl = rj
        .pointer("/spec/ttlSecondsAfterFinished")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let end = str_at(rj, "/status/endTime").unwrap_or_default();
    if json::seconds_since(end) < ttl {
        return Ok(());
    }
    let (ns, cluster) = (
        json::namespace(rj),
        str_at(rj, "/status/rayClusterName").unwrap_or_default(),
    );
    if store.try_get(&RAYCLUSTERS, ns, cluster).is_some() {
        store.delete(&RAYCLUSTERS, ns, cluster, &DeleteOptions::default())?;
        let message = format!("Deleted RayCluster {ns}/{cluster}");
        rec.record(rj, NORMAL, "DeletedRayCluster", &message, OPERATOR);
    }
    Ok(())
}
