//! One watch of the cluster for both systems: when each job's workload is admitted (TunePlane:
//! its RayJob or Pod appears; Kueue: its RayJob or Job is unsuspended) and when each pod is bound;
//! for the reclaim workload also when each RayJob first runs, when a system stops a running one
//! (TunePlane deletes it, Kueue suspends it again) and Kueue's evictions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::Job as BatchJob;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;

use crate::workload::Job;
use crate::{KEY_LABEL, System};

#[derive(Debug, Clone)]
pub struct PodSeen {
    /// The job's key: its `benchkey` label, or (submitter pods) resolved from `job_name`.
    pub key: Option<String>,
    /// `batch.kubernetes.io/job-name`: a RayJob's submitter carries its RayJob's name.
    pub job_name: Option<(String, String)>,
    /// A machine of the job (head, worker or CPU pod), not a submitter.
    pub machine: bool,
    pub bound_at: Option<Instant>,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub admitted: HashMap<String, Instant>,
    /// Kueue only: when the job's Workload appeared (it entered Kueue's queues).
    pub queued: HashMap<String, Instant>,
    /// Kueue only: when the job's Workload was first seen with `QuotaReserved` True (Kueue's
    /// scheduler decided) and with `Admitted` True (its admission checks passed).
    pub quota_reserved: HashMap<String, Instant>,
    pub kueue_admitted: HashMap<String, Instant>,
    /// When the job's RayJob was first seen with `jobDeploymentStatus: Running` (KubeRay's; it
    /// is what TunePlane's record turns RUNNING on).
    pub ray_running: HashMap<String, Instant>,
    /// When a system first stopped the job's running RayJob: TunePlane deleting it (its
    /// deletion timestamp or its deletion seen), Kueue suspending it again.
    pub stopped: HashMap<String, Instant>,
    /// Kueue only: when the job's Workload was first seen `Evicted`, with the condition's reason
    /// and the `Preempted` condition's reason (`InCohortReclamation`, ...), if any.
    pub evicted: HashMap<String, (Instant, String, Option<String>)>,
    /// By pod uid.
    pub pods: HashMap<String, PodSeen>,
    /// (namespace, workload name) to key, for submitter pods.
    pub workloads: HashMap<(String, String), String>,
    pub last_change: Option<Instant>,
}

impl Snapshot {
    pub fn admitted_at(&self, key: &str) -> Option<Instant> {
        self.admitted.get(key).copied()
    }

    fn key_of(&self, pod: &PodSeen) -> Option<String> {
        pod.key.clone().or_else(|| {
            pod.job_name
                .as_ref()
                .and_then(|w| self.workloads.get(w).cloned())
        })
    }

    /// Bound times of each job's pods, and how many of them are machines.
    pub fn bound_by_job(&self) -> HashMap<String, (Vec<Instant>, usize)> {
        let mut out: HashMap<String, (Vec<Instant>, usize)> = HashMap::new();
        for pod in self.pods.values() {
            let (Some(key), Some(at)) = (self.key_of(pod), pod.bound_at) else {
                continue;
            };
            let e = out.entry(key).or_default();
            e.0.push(at);
            e.1 += usize::from(pod.machine);
        }
        out
    }

    /// When the last of `job`'s pods was bound, once all are (`bound` from [`Self::bound_by_job`],
    /// computed once for all jobs: one pass over the pods, not one per job).
    pub fn all_bound_at(
        &self,
        bound: &HashMap<String, (Vec<Instant>, usize)>,
        job: &Job,
    ) -> Option<Instant> {
        self.admitted.get(&job.key)?;
        let (times, _) = bound.get(&job.key)?;
        (times.len() >= job.pods()).then(|| {
            let mut times = times.clone();
            times.sort();
            times[job.pods() - 1]
        })
    }
}

pub struct Observer {
    pub system: System,
    state: Arc<Mutex<Snapshot>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn label(meta: &kube::api::ObjectMeta, name: &str) -> Option<String> {
    meta.labels.as_ref()?.get(name).cloned()
}

impl Observer {
    /// Starts the watches and returns once each has listed the cluster.
    pub async fn start(client: kube::Client, system: System) -> anyhow::Result<Observer> {
        let state = Arc::new(Mutex::new(Snapshot::default()));
        let mut tasks = Vec::new();
        let mut ready = Vec::new();

        let (tx, rx) = tokio::sync::oneshot::channel();
        ready.push(rx);
        let pods: Api<Pod> = Api::all(client.clone());
        tasks.push(spawn_watch(pods, watcher::Config::default(), tx, {
            let state = state.clone();
            move |pod: Pod, deleted: bool| {
                if deleted {
                    return;
                }
                let meta = &pod.metadata;
                let Some(uid) = meta.uid.clone() else { return };
                let ns = meta.namespace.clone().unwrap_or_default();
                let key = label(meta, KEY_LABEL);
                let job_name = label(meta, "batch.kubernetes.io/job-name").map(|j| (ns, j));
                let bound = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some();
                // Kueue's pod integration creates the Pod gated and admits it by lifting its gate.
                let gated = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_some_and(|g| g.iter().any(|g| g.name == "kueue.x-k8s.io/admission"));
                let mut s = state.lock().unwrap();
                let now = Instant::now();
                // A pod of the job exists (and Kueue has lifted its admission gate, if it set one):
                // its workload was admitted (TunePlane's CPU jobs are their Pod; every other pod
                // follows its workload).
                if let Some(k) = &key
                    && !gated
                    && !s.admitted.contains_key(k)
                {
                    s.admitted.insert(k.clone(), now);
                    s.last_change = Some(now);
                }
                let machine = key.is_some();
                if !s.pods.contains_key(&uid) {
                    // A new pod is progress too (KubeRay creates a gang's pods over time).
                    s.last_change = Some(now);
                }
                let seen = s.pods.entry(uid).or_insert(PodSeen {
                    key,
                    job_name,
                    machine,
                    bound_at: None,
                });
                if bound && seen.bound_at.is_none() {
                    seen.bound_at = Some(now);
                    s.last_change = Some(now);
                }
            }
        }));

        // RayJobs (both systems) and, for Kueue, batch Jobs.
        let (tx, rx) = tokio::sync::oneshot::channel();
        ready.push(rx);
        let rayjobs: Api<DynamicObject> =
            Api::all_with(client.clone(), &crate::kueue::rayjob_resource());
        tasks.push(spawn_watch(
            rayjobs,
            watcher::Config::default().labels(KEY_LABEL),
            tx,
            {
                let state = state.clone();
                move |rj: DynamicObject, deleted: bool| {
                    let suspended = rj.data["spec"]["suspend"] == Value::Bool(true);
                    if !deleted {
                        workload_seen(&state, system, &rj.metadata, suspended);
                    }
                    let running = rj.data["status"]["jobDeploymentStatus"] == "Running";
                    let deleting = deleted || rj.metadata.deletion_timestamp.is_some();
                    rayjob_seen(&state, &rj.metadata, running, suspended, deleting);
                }
            },
        ));
        if system == System::Kueue {
            let (tx, rx) = tokio::sync::oneshot::channel();
            ready.push(rx);
            let jobs: Api<BatchJob> = Api::all(client.clone());
            tasks.push(spawn_watch(
                jobs,
                watcher::Config::default().labels(KEY_LABEL),
                tx,
                {
                    let state = state.clone();
                    move |job: BatchJob, deleted: bool| {
                        if deleted {
                            return;
                        }
                        let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
                        workload_seen(&state, system, &job.metadata, suspended);
                    }
                },
            ));
        }
        if system == System::Kueue {
            // Kueue's Workloads, named after their job through the owner reference.
            let (tx, rx) = tokio::sync::oneshot::channel();
            ready.push(rx);
            let workloads: Api<DynamicObject> = Api::all_with(
                client.clone(),
                &kube::api::ApiResource::from_gvk_with_plural(
                    &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload"),
                    "workloads",
                ),
            );
            tasks.push(spawn_watch(workloads, watcher::Config::default(), tx, {
                let state = state.clone();
                move |wl: DynamicObject, deleted: bool| {
                    if deleted {
                        return;
                    }
                    let Some(owner) = wl
                        .metadata
                        .owner_references
                        .as_ref()
                        .and_then(|o| o.first())
                    else {
                        return;
                    };
                    let is_true = |kind: &str| {
                        wl.data["status"]["conditions"].as_array().is_some_and(|c| {
                            c.iter().any(|c| c["type"] == kind && c["status"] == "True")
                        })
                    };
                    let (reserved, admitted) = (is_true("QuotaReserved"), is_true("Admitted"));
                    let now = Instant::now();
                    let mut s = state.lock().unwrap();
                    s.queued.entry(owner.name.clone()).or_insert(now);
                    if reserved {
                        s.quota_reserved.entry(owner.name.clone()).or_insert(now);
                    }
                    if admitted {
                        s.kueue_admitted.entry(owner.name.clone()).or_insert(now);
                    }
                    let condition = |kind: &str| {
                        wl.data["status"]["conditions"].as_array().and_then(|c| {
                            c.iter()
                                .find(|c| c["type"] == kind && c["status"] == "True")
                                .map(|c| c["reason"].as_str().unwrap_or_default().to_owned())
                        })
                    };
                    if let Some(reason) = condition("Evicted")
                        && !s.evicted.contains_key(&owner.name)
                    {
                        let preempted = condition("Preempted");
                        s.evicted
                            .insert(owner.name.clone(), (now, reason, preempted));
                        s.last_change = Some(now);
                    }
                }
            }));
        }
        for rx in ready {
            tokio::time::timeout(Duration::from_secs(60), rx)
                .await
                .map_err(|_| anyhow::anyhow!("a watch did not list the cluster within 60 s"))??;
        }
        Ok(Observer {
            system,
            state,
            tasks,
        })
    }

    pub fn snapshot(&self) -> Snapshot {
        self.state.lock().unwrap().clone()
    }

    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A workload object seen: record its name and, once it may run, the job's admission.
fn workload_seen(
    state: &Mutex<Snapshot>,
    system: System,
    meta: &kube::api::ObjectMeta,
    suspended: bool,
) {
    let Some(key) = label(meta, KEY_LABEL) else {
        return;
    };
    let mut s = state.lock().unwrap();
    let now = Instant::now();
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    s.workloads.insert((ns, name), key.clone());
    // TunePlane creates a workload only once it admitted the job; Kueue admits by unsuspending.
    let admitted = match system {
        System::TunePlane => true,
        System::Kueue => !suspended,
    };
    if admitted && !s.admitted.contains_key(&key) {
        s.admitted.insert(key, now);
        s.last_change = Some(now);
    }
}

/// A RayJob seen (or its deletion, `deleting`): when it first ran, and when a system stopped it
/// once it had run.
fn rayjob_seen(
    state: &Mutex<Snapshot>,
    meta: &kube::api::ObjectMeta,
    running: bool,
    suspended: bool,
    deleting: bool,
) {
    let Some(key) = label(meta, KEY_LABEL) else {
        return;
    };
    let mut s = state.lock().unwrap();
    let now = Instant::now();
    if running && !deleting && !suspended {
        s.ray_running.entry(key.clone()).or_insert(now);
    }
    if (deleting || suspended) && s.ray_running.contains_key(&key) && !s.stopped.contains_key(&key)
    {
        s.stopped.insert(key, now);
        s.last_change = Some(now);
    }
}

/// Watches `api`; `on` gets every object listed or changed (`false`) and every deleted one
/// (`true`).
fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    ready: tokio::sync::oneshot::Sender<()>,
    mut on: impl FnMut(K, bool) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(async move {
        let mut ready = Some(ready);
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => on(o, false),
                Ok(Event::Delete(o)) => on(o, true),
                Ok(Event::InitDone) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("[kueue-compare] watch error (retrying): {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    })
}
