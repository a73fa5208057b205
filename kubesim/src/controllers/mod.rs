//! The simulated control plane and node agents, run as one periodic loop over the store: pod
//! garbage collector and taint-eviction controller, scheduler, kubelet, Job controller and KubeRay
//! operator. Each step reads current objects and writes only
//! what changed (no-op writes do not bump resourceVersions), so a pass is idempotent and a restart
//! of the loop resumes from the objects alone.

pub mod disruption;
pub mod events;
pub mod jobs;
pub mod kubelet;
pub mod kuberay;
pub mod lifecycle;
pub mod scheduler;

use std::sync::Arc;

use crate::config::SimConfig;
use crate::exec::Executor;
use crate::store::Store;

/// Every simulated controller with its state between passes.
pub struct Controllers {
    store: Arc<Store>,
    recorder: events::Recorder,
    scheduler: scheduler::Scheduler,
    kubelet: kubelet::Kubelet,
    kuberay: Option<kuberay::KubeRay>,
    pod_gc: disruption::PodGc,
    taint_eviction: disruption::TaintEviction,
    exec: Option<Executor>,
    event_ttl: std::time::Duration,
    passes: u64,
}

impl Controllers {
    /// Controllers for a simulator configured by `config`.
    pub fn new(store: Arc<Store>, config: &SimConfig) -> Self {
        Self {
            recorder: events::Recorder::new(store.clone()),
            scheduler: scheduler::Scheduler::default(),
            kubelet: kubelet::Kubelet::new(config.scenario.clone()),
            kuberay: config
                .kuberay
                .then(|| kuberay::KubeRay::new(config.scenario.clone(), config.exec_dir.is_some())),
            pod_gc: disruption::PodGc::new(config.pod_gc_quarantine),
            taint_eviction: disruption::TaintEviction::default(),
            exec: config
                .exec_dir
                .clone()
                .map(|d| Executor::new(d, store.clone())),
            event_ttl: config.event_ttl,
            passes: 0,
            store,
        }
    }

    /// One pass of every controller.
    pub async fn tick(&mut self) {
        self.passes += 1;
        if self.passes.is_multiple_of(100) {
            events::expire(&self.store, self.event_ttl);
        }
        self.pod_gc.step(&self.store);
        self.taint_eviction.step(&self.store, &mut self.recorder);
        if let Some(k) = self.kuberay.as_mut() {
            k.step(&self.store, &mut self.recorder);
        }
        jobs::step(&self.store);
        self.scheduler.step(&self.store, &mut self.recorder);
        self.kubelet
            .step(&self.store, &mut self.recorder, self.exec.as_mut());
        // Let request handlers run between passes on a busy runtime.
        tokio::task::yield_now().await;
    }
}
