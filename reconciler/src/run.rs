//! The running reconciler: reflectors, the Lease, and the pass loop, all polled inside one future
//! so that dropping it (a crash, a test aborting the task) stops everything at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tuneplane_core::constants::{MANAGED_BY, MANAGED_BY_LABEL};
use tuneplane_core::store::{BlobStore, JobStore};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::kube_io::{Kube, is_not_found};
use crate::leader::Elector;
use crate::metrics::Metrics;
use crate::rayjob::{self, RayJob};
use crate::watch_trim;
use crate::watched_pod::WatchedPod;
use crate::{Config, Ctx};

/// A reconciler ready to run.
pub struct Reconciler {
    ctx: Arc<Ctx>,
    elector: Elector,
}

/// What every watch shares: the pass loop it wakes and the metrics it counts failures in.
struct Watches {
    notify: Arc<Notify>,
    metrics: Arc<Metrics>,
}

impl Watches {
    /// Mirrors `api` into `writer`'s store, each object reduced by `strip` to what a pass reads
    /// (see `watch_trim::strip_pod`) before it is stored, and wakes the pass loop on every change;
    /// counts watch failures in `tuneplane_watch_errors_total`.
    fn reflect<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        strip: fn(&mut K),
        writer: reflector::store::Writer<K>,
    ) -> impl Future<Output = ()> + use<K>
    where
        K: crate::kube_io::Watched,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        let (notify, metrics) = (self.notify.clone(), self.metrics.clone());
        watcher(api, config)
            .default_backoff()
            .modify(strip)
            .reflect(writer)
            .applied_objects()
            .for_each(move |event| {
                if let Err(e) = event {
                    metrics.inc_watch_errors();
                    tracing::warn!(error = %e, "watch error; the watcher retries with backoff");
                }
                notify.notify_one();
                std::future::ready(())
            })
    }
}

impl Reconciler {
    /// Checks the RayJob CRD is served and assembles the reconciler.
    pub async fn new(
        config: Config,
        client: kube::Client,
        jobs: Arc<dyn JobStore>,
        blobs: Arc<dyn BlobStore>,
        metrics: Arc<Metrics>,
    ) -> Result<Reconciler> {
        let kube = Kube::new(
            client.clone(),
            config.kube_qps,
            config.kube_burst,
            metrics.clone(),
        );
        // RayJobs are read only in the job namespaces (as the RBAC allows).
        let first = config
            .watched_namespaces()
            .into_iter()
            .next()
            .unwrap_or_default();
        let api: Api<RayJob> = Api::namespaced_with(client, &first, &rayjob::resource());
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Err(Error::MissingCrd(e)),
            Err(e) => return Err(Error::kube("list", "rayjobs.ray.io", e)),
        }
        let elector = Elector::new(
            kube.clone(),
            &config.namespace,
            &config.lease_name,
            &config.identity,
            config.lease_duration,
        );
        let ctx = Ctx::new(config, kube, jobs, blobs, metrics, elector.state.clone());
        Ok(Reconciler {
            ctx: Arc::new(ctx),
            elector,
        })
    }

    /// The shared context (for tests and the render command).
    pub fn ctx(&self) -> Arc<Ctx> {
        self.ctx.clone()
    }

    /// Runs until `shutdown` completes, then releases the Lease.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let client = self.ctx.kube.client.clone();
        let notify = self.ctx.wake.clone();
        // However this future ends (shutdown, an error, dropped by a crash), the archives it
        // and the creates it started stop with it.
        let _archives = AbortArchives(self.ctx.clone());
        let (nodes, nodes_w) = reflector::store::<Node>();
        let (pods, pods_w) = reflector::store::<WatchedPod>();
        let all = watcher::Config::default;
        let w = Watches {
            notify: notify.clone(),
            metrics: self.ctx.metrics.clone(),
        };
        // Nodes and pods cluster-wide (capacity needs every pod on every node); Events and
        // RayJobs only in the namespaces jobs and playgrounds run in, one watch each.
        let mut watches: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> = vec![
            Box::pin(w.reflect(
                Api::all(client.clone()),
                all(),
                watch_trim::strip_node,
                nodes_w,
            )),
            Box::pin(w.reflect(
                Api::all(client.clone()),
                all(),
                watch_trim::strip_pod,
                pods_w,
            )),
        ];
        let (mut events, mut rayjobs) = (Vec::new(), Vec::new());
        for ns in self.ctx.config.watched_namespaces() {
            let (store, writer) = reflector::store::<Event>();
            let warnings = all().fields("type=Warning");
            let api = Api::namespaced(client.clone(), &ns);
            watches.push(Box::pin(w.reflect(
                api,
                warnings,
                watch_trim::strip_event,
                writer,
            )));
            events.push(store);
            let writer = reflector::store::Writer::<RayJob>::new(rayjob::resource());
            rayjobs.push(writer.as_reader());
            let managed = all().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
            let api = Api::namespaced_with(client.clone(), &ns, &rayjob::resource());
            watches.push(Box::pin(w.reflect(
                api,
                managed,
                watch_trim::strip_rayjob,
                writer,
            )));
        }
        let watches = futures_util::future::join_all(watches);
        let stores = Stores {
            nodes,
            pods,
            events,
            rayjobs,
        };
        let outcome = supervise(
            watches.map(drop),
            self.elector.run(&self.ctx.metrics, &self.ctx.wake),
            passes_and_callbacks(&self.ctx, &stores, &notify),
            shutdown,
        )
        .await;
        self.elector.release().await;
        self.ctx.metrics.set_leader(false);
        outcome
    }
}

/// The pass loop and, beside it on the leader, the callback sender; ends when the pass loop does
/// (the sender never ends by itself).
async fn passes_and_callbacks(ctx: &Arc<Ctx>, stores: &Stores, notify: &Arc<Notify>) {
    let sender = crate::callback::Sender::new(
        ctx.jobs.clone(),
        ctx.config.callbacks.clone(),
        ctx.metrics.callbacks.clone(),
    );
    tokio::select! {
        _ = pass_loop(ctx, stores, notify) => {}
        _ = sender.run(Some(ctx.leadership.clone())) => {}
    }
}

/// Aborts the archives still being written and the creates in flight when dropped.
struct AbortArchives(Arc<Ctx>);

impl Drop for AbortArchives {
    fn drop(&mut self) {
        self.0.archives.abort_all();
        self.0.creates.abort_all();
    }
}

/// Runs the reconciler's loops until `shutdown` completes (`Ok`) or one of them ends, which they
/// only do when something is broken (a watch stream closed, the stores never became ready): then
/// an error, so that the process exits non-zero and is restarted.
async fn supervise(
    watches: impl Future<Output = ()>,
    leases: impl Future<Output = ()>,
    passes: impl Future<Output = ()>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let ended = tokio::select! {
        _ = watches => "the watches",
        _ = leases => "the lease loop",
        _ = passes => "the pass loop",
        _ = shutdown => {
            tracing::info!("shutting down");
            return Ok(());
        }
    };
    tracing::error!(ended, "a reconciler loop ended");
    Err(Error::LoopEnded(ended))
}

struct Stores {
    nodes: Store<Node>,
    pods: Store<WatchedPod>,
    /// One per watched namespace.
    events: Vec<Store<Event>>,
    /// One per watched namespace.
    rayjobs: Vec<Store<RayJob>>,
}

impl Stores {
    async fn ready(&self) -> bool {
        if self.nodes.wait_until_ready().await.is_err()
            || self.pods.wait_until_ready().await.is_err()
        {
            return false;
        }
        for s in &self.events {
            if s.wait_until_ready().await.is_err() {
                return false;
            }
        }
        for s in &self.rayjobs {
            if s.wait_until_ready().await.is_err() {
                return false;
            }
        }
        true
    }

    fn snapshot(&self) -> Cluster {
        Cluster::new(
            self.nodes.state(),
            self.pods.state(),
            self.rayjobs.iter().flat_map(Store::state).collect(),
            self.events.iter().flat_map(Store::state).collect(),
        )
    }
}

/// How long the loop waits after `failures` failed passes in a row (a pass fails when it cannot
/// list jobs or publish capacity): nothing after a good pass, then the pass interval doubling up
/// to [`MAX_BACKOFF`], so a dead store or API server is not hammered by a pass per watch event.
pub fn backoff_after(failures: u32, pass_interval: Duration) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32 << (failures - 1).min(16);
    pass_interval.saturating_mul(factor).min(MAX_BACKOFF)
}

/// A pass at least this long is logged with its phases' times.
pub const SLOW_PASS: Duration = Duration::from_secs(1);

/// The longest wait between passes while passes keep failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

async fn pass_loop(ctx: &Arc<Ctx>, stores: &Stores, notify: &Notify) {
    if !stores.ready().await {
        tracing::error!("reflector stores never became ready");
        return;
    }
    // Watch events come in bursts: run at most one pass per gap, and one per interval without events.
    let gap = (ctx.config.pass_interval / 10)
        .clamp(Duration::from_millis(20), Duration::from_millis(500));
    let mut failures: u32 = 0;
    let mut step_failed = false;
    // A pass that left planned admissions for later (its budget, see `Config::requests_per_pass`)
    // is followed by the next one after the gap, without waiting for an event.
    let mut deferred = false;
    loop {
        if !deferred {
            tokio::select! {
                _ = tokio::time::sleep(ctx.config.pass_interval) => {}
                _ = notify.notified() => {}
            }
        }
        deferred = false;
        let now = tuneplane_core::clock::now_ms();
        ctx.metrics.heartbeat(now);
        if ctx.leadership.is_leader() {
            let started = tokio::time::Instant::now();
            let cluster = stores.snapshot();
            let outcome = crate::pass::pass(ctx, &cluster, now).await;
            let ok = matches!(&outcome, Ok(r) if r.errors == 0);
            if let Err(e) = &outcome {
                ctx.metrics.inc_step_error(e);
                tracing::warn!(error = %e, "pass failed");
            }
            let elapsed = started.elapsed();
            ctx.metrics.observe_pass(elapsed, ok);
            // A pass longer than a second delays every job that arrives meanwhile: say where
            // its time went.
            if let Ok(r) = &outcome
                && elapsed >= SLOW_PASS
            {
                tracing::info!(
                    elapsed_ms = elapsed.as_millis() as u64,
                    admitted = r.admitted,
                    deferred = r.deferred,
                    phases = %r.phase_summary(),
                    "slow pass"
                );
            }
            // A failed step of one job is retried next pass at the normal pace (at most once per
            // pass interval, not once per watch event); a failed pass backs off exponentially.
            step_failed = matches!(&outcome, Ok(r) if r.errors > 0);
            deferred = matches!(&outcome, Ok(r) if r.deferred > 0);
            failures = if outcome.is_err() {
                failures.saturating_add(1)
            } else {
                0
            };
        }
        let mut backoff = backoff_after(failures, ctx.config.pass_interval);
        if step_failed {
            backoff = backoff.max(ctx.config.pass_interval);
        }
        if failures > 0 {
            tracing::info!(
                failures,
                backoff_ms = backoff.as_millis() as u64,
                "passes failing; backing off"
            );
        }
        if !backoff.is_zero() {
            ctx.metrics.observe_backoff(backoff);
        }
        tokio::time::sleep(gap.max(backoff)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_pass_interval_and_is_capped() {
        let i = Duration::from_secs(5);
        assert_eq!(backoff_after(0, i), Duration::ZERO);
        assert_eq!(backoff_after(1, i), i);
        assert_eq!(backoff_after(3, i), Duration::from_secs(20));
        assert_eq!(backoff_after(10, i), MAX_BACKOFF);
        assert_eq!(backoff_after(u32::MAX, i), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn ended_watches_are_an_error_so_the_process_exits_non_zero() {
        let pending = std::future::pending::<()>;
        let outcome = supervise(async {}, pending(), pending(), pending()).await;
        assert!(matches!(outcome, Err(Error::LoopEnded("the watches"))));
        let outcome = supervise(pending(), pending(), async {}, pending()).await;
        assert!(matches!(outcome, Err(Error::LoopEnded("the pass loop"))));
    }

    #[tokio::test]
    async fn shutdown_ends_the_loops_without_an_error() {
        let pending = std::future::pending::<()>;
        let outcome = supervise(pending(), pending(), pending(), async {}).await;
        assert!(outcome.is_ok());
    }
}
