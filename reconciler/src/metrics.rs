//! Prometheus metrics and the `/metrics` + `/healthz` server.
//!
//! A handful of counters and gauges kept in atomics and written in the text exposition format:
//! queue depth, admissions, pass duration, deadline failures, terminal outcomes, API retries and
//! client-side throttling, and leadership.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tuneplane_core::quota::TenantUsage;

use crate::error::{Error, Result};

/// A label value escaped for the text exposition format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The reconciler's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    queue_depth: AtomicU64,
    active_jobs: AtomicU64,
    admissions: AtomicU64,
    deadline_failures: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    stopped: AtomicU64,
    orphans_deleted: AtomicU64,
    passes: AtomicU64,
    pass_errors: AtomicU64,
    pass_micros_sum: AtomicU64,
    last_pass_micros: AtomicU64,
    api_retries: AtomicU64,
    watch_errors: AtomicU64,
    kube_errors: AtomicU64,
    store_errors: AtomicU64,
    other_errors: AtomicU64,
    backoff_micros: AtomicU64,
    throttled_micros: AtomicU64,
    leader: AtomicU64,
    heartbeat_ms: AtomicI64,
    /// Per tenant: admitted GPUs per series and queued jobs, replaced whole every pass.
    tenants: std::sync::Mutex<BTreeMap<String, TenantUsage>>,
}

impl Metrics {
    /// Records a finished pass.
    pub fn observe_pass(&self, took: Duration, ok: bool) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.passes.fetch_add(1, Relaxed);
        self.pass_micros_sum.fetch_add(micros, Relaxed);
        self.last_pass_micros.store(micros, Relaxed);
        if !ok {
            self.pass_errors.fetch_add(1, Relaxed);
        }
    }
    /// Sets queued and active job gauges.
    pub fn set_jobs(&self, queued: usize, active: usize) {
        self.queue_depth.store(queued as u64, Relaxed);
        self.active_jobs.store(active as u64, Relaxed);
    }
    /// Replaces the per-tenant gauges with what each tenant's active jobs hold and wait for
    /// (tenants without active jobs drop out).
    pub fn set_tenants(&self, usage: &BTreeMap<String, TenantUsage>) {
        *self.tenants.lock().unwrap_or_else(|p| p.into_inner()) = usage.clone();
    }
    /// Counts an admission.
    pub fn inc_admissions(&self) {
        self.admissions.fetch_add(1, Relaxed);
    }
    /// Counts a pre-running or run deadline failure.
    pub fn inc_deadline_failures(&self) {
        self.deadline_failures.fetch_add(1, Relaxed);
    }
    /// Counts a terminal outcome.
    pub fn inc_terminal(&self, state: tuneplane_core::job::JobState) {
        use tuneplane_core::job::JobState::*;
        match state {
            Succeeded => &self.succeeded,
            Failed => &self.failed,
            _ => &self.stopped,
        }
        .fetch_add(1, Relaxed);
    }
    /// Counts a deleted orphan workload.
    pub fn inc_orphans(&self) {
        self.orphans_deleted.fetch_add(1, Relaxed);
    }
    /// Counts a retried API call.
    pub fn inc_api_retries(&self) {
        self.api_retries.fetch_add(1, Relaxed);
    }
    /// Counts a step that failed for good (after any retries) by what failed: the API server,
    /// a store, or anything else (render, transition, archive).
    pub fn inc_step_error(&self, error: &Error) {
        match error {
            Error::Kube { .. } | Error::MissingCrd(_) => &self.kube_errors,
            Error::Store(_) => &self.store_errors,
            _ => &self.other_errors,
        }
        .fetch_add(1, Relaxed);
    }
    /// Adds time the pass loop waited after failed passes.
    pub fn observe_backoff(&self, waited: Duration) {
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.backoff_micros.fetch_add(micros, Relaxed);
    }
    /// API calls retried so far.
    pub fn api_retries(&self) -> u64 {
        self.api_retries.load(Relaxed)
    }
    /// Counts a failed watch (list or watch request, or a broken stream).
    pub fn inc_watch_errors(&self) {
        self.watch_errors.fetch_add(1, Relaxed);
    }
    /// Watch failures so far.
    pub fn watch_errors(&self) -> u64 {
        self.watch_errors.load(Relaxed)
    }
    /// Steps failed because of the API server, because of a store, and otherwise.
    pub fn step_errors(&self) -> (u64, u64, u64) {
        (
            self.kube_errors.load(Relaxed),
            self.store_errors.load(Relaxed),
            self.other_errors.load(Relaxed),
        )
    }
    /// Passes that hit an error so far.
    pub fn pass_errors(&self) -> u64 {
        self.pass_errors.load(Relaxed)
    }
    /// Adds time spent waiting on the client-side rate limit.
    pub fn observe_throttle(&self, waited: Duration) {
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.throttled_micros.fetch_add(micros, Relaxed);
    }
    /// Sets whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(u64::from(leader), Relaxed);
    }
    /// Marks the loop alive at `now_ms`.
    pub fn heartbeat(&self, now_ms: i64) {
        self.heartbeat_ms.store(now_ms, Relaxed);
    }
    /// Admissions so far.
    pub fn admissions(&self) -> u64 {
        self.admissions.load(Relaxed)
    }
    /// Passes so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Relaxed)
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut put = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let secs = |a: &AtomicU64| format!("{:.6}", a.load(Relaxed) as f64 / 1e6);
        let n = |a: &AtomicU64| a.load(Relaxed).to_string();
        put(
            "tuneplane_queue_depth",
            "gauge",
            "Jobs waiting in QUEUED.",
            n(&self.queue_depth),
        );
        put(
            "tuneplane_active_jobs",
            "gauge",
            "Non-terminal jobs.",
            n(&self.active_jobs),
        );
        put(
            "tuneplane_admissions_total",
            "counter",
            "Jobs admitted.",
            n(&self.admissions),
        );
        put(
            "tuneplane_deadline_failures_total",
            "counter",
            "Jobs failed by a deadline.",
            n(&self.deadline_failures),
        );
        put(
            "tuneplane_jobs_succeeded_total",
            "counter",
            "Jobs ended SUCCEEDED.",
            n(&self.succeeded),
        );
        put(
            "tuneplane_jobs_failed_total",
            "counter",
            "Jobs ended FAILED.",
            n(&self.failed),
        );
        put(
            "tuneplane_jobs_stopped_total",
            "counter",
            "Jobs ended STOPPED.",
            n(&self.stopped),
        );
        put(
            "tuneplane_orphans_deleted_total",
            "counter",
            "Workloads deleted without a live job.",
            n(&self.orphans_deleted),
        );
        put(
            "tuneplane_pass_duration_seconds_sum",
            "counter",
            "Total time in passes.",
            secs(&self.pass_micros_sum),
        );
        put(
            "tuneplane_pass_duration_seconds_count",
            "counter",
            "Passes run.",
            n(&self.passes),
        );
        put(
            "tuneplane_last_pass_duration_seconds",
            "gauge",
            "Duration of the last pass.",
            secs(&self.last_pass_micros),
        );
        put(
            "tuneplane_pass_errors_total",
            "counter",
            "Passes that hit an error.",
            n(&self.pass_errors),
        );
        put(
            "tuneplane_kube_retries_total",
            "counter",
            "API calls retried (429/5xx/transport).",
            n(&self.api_retries),
        );
        put(
            "tuneplane_watch_errors_total",
            "counter",
            "Failed watches (list, watch or stream errors; each restarts with backoff).",
            n(&self.watch_errors),
        );
        put(
            "tuneplane_kube_errors_total",
            "counter",
            "Steps that failed on an API call after its retries (retried next pass).",
            n(&self.kube_errors),
        );
        put(
            "tuneplane_store_errors_total",
            "counter",
            "Steps that failed on a job or blob store call (retried next pass).",
            n(&self.store_errors),
        );
        put(
            "tuneplane_step_errors_other_total",
            "counter",
            "Steps that failed otherwise (render, conflicting transition, archive).",
            n(&self.other_errors),
        );
        put(
            "tuneplane_pass_backoff_seconds_total",
            "counter",
            "Time the pass loop waited after failed passes.",
            secs(&self.backoff_micros),
        );
        put(
            "tuneplane_kube_throttled_seconds_total",
            "counter",
            "Time waiting on the client-side rate limit.",
            secs(&self.throttled_micros),
        );
        put(
            "tuneplane_leader",
            "gauge",
            "1 while this replica holds the Lease.",
            n(&self.leader),
        );
        self.render_tenants(&mut out);
        out
    }

    /// The labelled per-tenant families.
    fn render_tenants(&self, out: &mut String) {
        let tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(
            out,
            "# HELP tuneplane_tenant_admitted_gpus GPUs held by a tenant's admitted jobs, per series.\n# TYPE tuneplane_tenant_admitted_gpus gauge"
        );
        for (tenant, u) in tenants.iter() {
            for (series, gpus) in &u.admitted.gpus {
                let _ = writeln!(
                    out,
                    "tuneplane_tenant_admitted_gpus{{tenant=\"{}\",series=\"{}\"}} {gpus}",
                    label(tenant),
                    label(series)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP tuneplane_tenant_queued_gpus GPUs a tenant's queued jobs ask for, per series.\n# TYPE tuneplane_tenant_queued_gpus gauge"
        );
        for (tenant, u) in tenants.iter() {
            for (series, gpus) in &u.queued.gpus {
                let _ = writeln!(
                    out,
                    "tuneplane_tenant_queued_gpus{{tenant=\"{}\",series=\"{}\"}} {gpus}",
                    label(tenant),
                    label(series)
                );
            }
        }
        for (name, help, pick) in [
            (
                "tuneplane_tenant_queued_jobs",
                "Jobs of a tenant waiting in QUEUED.",
                (|u: &TenantUsage| u.queued_jobs) as fn(&TenantUsage) -> u32,
            ),
            (
                "tuneplane_tenant_admitted_jobs",
                "Jobs of a tenant admitted and not finished.",
                |u: &TenantUsage| u.admitted_jobs,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (tenant, u) in tenants.iter() {
                let _ = writeln!(out, "{name}{{tenant=\"{}\"}} {}", label(tenant), pick(u));
            }
        }
    }
}

async fn exposition(State(m): State<Arc<Metrics>>) -> String {
    m.render()
}

async fn healthz(State(m): State<Arc<Metrics>>) -> (StatusCode, &'static str) {
    // Alive when the main loop ticked within the last two minutes (it ticks every few seconds).
    let age = tuneplane_core::clock::now_ms() - m.heartbeat_ms.load(Relaxed);
    if age < 120_000 {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loop stalled\n")
    }
}

/// The `/metrics` and `/healthz` router.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(exposition))
        .route("/healthz", get(healthz))
        .with_state(metrics)
}

/// Binds `addr` and serves the router until the task is dropped.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    axum::serve(listener, router(metrics))
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })
}
