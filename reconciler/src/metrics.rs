//! Prometheus metrics and the `/metrics` + `/healthz` server.
//!
//! Counters, gauges and a pass-duration histogram kept with `prometheus-client` and written in
//! its text exposition format (OpenMetrics): queue depth, admissions, pass duration, deadline
//! failures, terminal outcomes by state, failed steps by cause, API retries and client-side
//! throttling, leadership, and per-tenant usage.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tuneplane_core::job::JobState;
use tuneplane_core::preemption::PreemptionRule;
use tuneplane_core::quota::TenantUsage;

use crate::error::{Error, Result};

/// Upper bounds of the pass-duration buckets, seconds: a pass over a small fleet takes
/// milliseconds, one over 10,000 jobs about a second.
const PASS_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantSeriesLabel {
    tenant: String,
    series: String,
}

/// Causes of a failed step, as the `cause` label of `tuneplane_step_errors_total`.
const CAUSES: [&str; 3] = ["kube", "store", "other"];
/// Terminal states, as the `state` label of `tuneplane_jobs_terminal_total`.
const TERMINAL: [JobState; 3] = [JobState::Succeeded, JobState::Failed, JobState::Stopped];

/// Every metric of the reconciler in one registry, shared (`Arc`) by the passes, the watches, the
/// lease loop and the API client, and written by [`serve`] on `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    queue_depth: Gauge,
    active_jobs: Gauge,
    admissions: Counter,
    deadline_failures: Counter,
    terminal: Family<StateLabel, Counter>,
    orphans_deleted: Counter,
    requeued: Counter,
    preemptions: Family<RuleLabel, Counter>,
    preemption_lost: Counter<f64, AtomicU64>,
    pass_duration: Histogram,
    passes: AtomicU64,
    last_pass: Gauge<f64, AtomicU64>,
    pass_errors: Counter,
    api_retries: Counter,
    watch_errors: Counter,
    step_errors: Family<CauseLabel, Counter>,
    backoff: Counter<f64, AtomicU64>,
    throttled: Counter<f64, AtomicU64>,
    leader: Gauge,
    heartbeat_ms: AtomicI64,
    tenant_admitted_gpus: Family<TenantSeriesLabel, Gauge>,
    tenant_queued_gpus: Family<TenantSeriesLabel, Gauge>,
    tenant_queued_jobs: Family<TenantLabel, Gauge>,
    tenant_admitted_jobs: Family<TenantLabel, Gauge>,
    tenant_gpu_seconds: Family<TenantSeriesLabel, Counter<f64, AtomicU64>>,
    tenant_cpu_seconds: Family<TenantLabel, Counter<f64, AtomicU64>>,
    /// When the usage counters last advanced (Unix ms; 0 before the first pass).
    usage_at_ms: AtomicI64,
    /// Held while the tenant families are replaced and while they are written, so a scrape sees
    /// one pass's tenants, never a mix.
    tenants: Mutex<()>,
    /// The callback sender's counters.
    pub callbacks: Arc<CallbackMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            queue_depth: Gauge::default(),
            active_jobs: Gauge::default(),
            admissions: Counter::default(),
            deadline_failures: Counter::default(),
            terminal: Family::default(),
            orphans_deleted: Counter::default(),
            requeued: Counter::default(),
            preemptions: Family::default(),
            preemption_lost: Counter::default(),
            pass_duration: Histogram::new(PASS_BUCKETS),
            passes: AtomicU64::new(0),
            last_pass: Gauge::default(),
            pass_errors: Counter::default(),
            api_retries: Counter::default(),
            watch_errors: Counter::default(),
            step_errors: Family::default(),
            backoff: Counter::default(),
            throttled: Counter::default(),
            leader: Gauge::default(),
            heartbeat_ms: AtomicI64::new(0),
            tenant_admitted_gpus: Family::default(),
            tenant_queued_gpus: Family::default(),
            tenant_queued_jobs: Family::default(),
            tenant_admitted_jobs: Family::default(),
            tenant_gpu_seconds: Family::default(),
            tenant_cpu_seconds: Family::default(),
            usage_at_ms: AtomicI64::new(0),
            tenants: Mutex::new(()),
            callbacks: Arc::default(),
            registry: Registry::default(),
        };
        // Every labelled counter starts at 0, so a rate over it exists before the first event.
        for state in TERMINAL {
            let _ = m.terminal.get_or_create(&StateLabel {
                state: state.as_str(),
            });
        }
        for cause in CAUSES {
            let _ = m.step_errors.get_or_create(&CauseLabel { cause });
        }
        for rule in [PreemptionRule::Reclaim, PreemptionRule::Priority] {
            let _ = m.preemptions.get_or_create(&RuleLabel {
                reason: rule.as_str(),
            });
        }
        let r = &mut registry;
        r.register(
            "tuneplane_queue_depth",
            "Jobs waiting in QUEUED.",
            m.queue_depth.clone(),
        );
        r.register(
            "tuneplane_active_jobs",
            "Non-terminal jobs.",
            m.active_jobs.clone(),
        );
        r.register(
            "tuneplane_admissions",
            "Jobs admitted.",
            m.admissions.clone(),
        );
        r.register(
            "tuneplane_deadline_failures",
            "Jobs failed by a deadline.",
            m.deadline_failures.clone(),
        );
        r.register(
            "tuneplane_jobs_terminal",
            "Jobs that reached a terminal state, by state.",
            m.terminal.clone(),
        );
        r.register(
            "tuneplane_jobs_requeued",
            "Attempts lost to the infrastructure (or failed with application retries left) after which the job was queued again.",
            m.requeued.clone(),
        );
        r.register(
            "tuneplane_preemptions",
            "Running jobs preempted (stopped to be queued again), by rule: reclaim (a tenant within its quota took back GPUs another held above its own) or priority (a higher-priority job of the same tenant).",
            m.preemptions.clone(),
        );
        r.register(
            "tuneplane_preemption_lost_gpu_seconds",
            "GPU-seconds of work preempted jobs had done since their newest complete checkpoint when told to stop (at most what they lost; a CPU-only machine counts as one GPU).",
            m.preemption_lost.clone(),
        );
        r.register(
            "tuneplane_orphans_deleted",
            "Workloads deleted without a live job.",
            m.orphans_deleted.clone(),
        );
        r.register(
            "tuneplane_pass_duration_seconds",
            "Duration of passes.",
            m.pass_duration.clone(),
        );
        r.register(
            "tuneplane_last_pass_duration_seconds",
            "Duration of the last pass.",
            m.last_pass.clone(),
        );
        r.register(
            "tuneplane_pass_errors",
            "Passes that hit an error.",
            m.pass_errors.clone(),
        );
        r.register(
            "tuneplane_kube_retries",
            "API calls retried (429/5xx/transport).",
            m.api_retries.clone(),
        );
        r.register(
            "tuneplane_watch_errors",
            "Failed watches (list, watch or stream errors; each restarts with backoff).",
            m.watch_errors.clone(),
        );
        r.register(
            "tuneplane_step_errors",
            "Steps that failed after their retries (retried next pass), by cause: an API call \
             (kube), a job or blob store call (store), or anything else (render, conflicting \
             transition, archive).",
            m.step_errors.clone(),
        );
        r.register(
            "tuneplane_pass_backoff_seconds",
            "Time the pass loop waited after failed passes.",
            m.backoff.clone(),
        );
        r.register(
            "tuneplane_kube_throttled_seconds",
            "Time waiting on the client-side rate limit.",
            m.throttled.clone(),
        );
        r.register(
            "tuneplane_leader",
            "1 while this replica holds the Lease.",
            m.leader.clone(),
        );
        r.register(
            "tuneplane_tenant_admitted_gpus",
            "GPUs held by a tenant's admitted jobs, per series.",
            m.tenant_admitted_gpus.clone(),
        );
        r.register(
            "tuneplane_tenant_queued_gpus",
            "GPUs a tenant's queued jobs ask for, per series.",
            m.tenant_queued_gpus.clone(),
        );
        r.register(
            "tuneplane_tenant_queued_jobs",
            "Jobs of a tenant waiting in QUEUED.",
            m.tenant_queued_jobs.clone(),
        );
        r.register(
            "tuneplane_tenant_admitted_jobs",
            "Jobs of a tenant admitted and not finished.",
            m.tenant_admitted_jobs.clone(),
        );
        r.register(
            "tuneplane_tenant_gpu_seconds",
            "GPU-seconds a tenant's admitted jobs and playgrounds held, per series, as the passes of this replica saw them (the ledger of record is GET /v1/usage).",
            m.tenant_gpu_seconds.clone(),
        );
        r.register(
            "tuneplane_tenant_cpu_seconds",
            "CPU-seconds a tenant's admitted jobs held, as the passes of this replica saw them.",
            m.tenant_cpu_seconds.clone(),
        );
        m.callbacks.register(r);
        Metrics { registry, ..m }
    }
}

fn gauge_value(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl Metrics {
    /// Records a finished pass.
    pub fn observe_pass(&self, took: Duration, ok: bool) {
        let secs = took.as_secs_f64();
        self.pass_duration.observe(secs);
        self.passes.fetch_add(1, Relaxed);
        self.last_pass.set(secs);
        if !ok {
            self.pass_errors.inc();
        }
    }
    /// Sets queued and active job gauges.
    pub fn set_jobs(&self, queued: usize, active: usize) {
        self.queue_depth.set(gauge_value(queued));
        self.active_jobs.set(gauge_value(active));
    }
    /// Replaces the per-tenant gauges with what each tenant's active jobs hold and wait for
    /// (tenants without active jobs drop out).
    pub fn set_tenants(&self, usage: &BTreeMap<String, TenantUsage>) {
        let _replacing = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        // The usage counters advance by what is held now times the time since the last pass
        // (at most a minute: a replica that just took the lead does not count its wait).
        let now = crate::now_ms();
        let last = self.usage_at_ms.swap(now, Relaxed);
        let secs = if last == 0 {
            0.0
        } else {
            ((now - last).clamp(0, 60_000) as f64) / 1000.0
        };
        if secs > 0.0 {
            for (tenant, u) in usage {
                for (series, n) in &u.admitted.gpus {
                    let labels = TenantSeriesLabel {
                        tenant: tenant.clone(),
                        series: series.clone(),
                    };
                    self.tenant_gpu_seconds
                        .get_or_create(&labels)
                        .inc_by(f64::from(*n) * secs);
                }
                let labels = TenantLabel {
                    tenant: tenant.clone(),
                };
                self.tenant_cpu_seconds
                    .get_or_create(&labels)
                    .inc_by(u.admitted.cpus * secs);
            }
        }
        self.tenant_admitted_gpus.clear();
        self.tenant_queued_gpus.clear();
        self.tenant_queued_jobs.clear();
        self.tenant_admitted_jobs.clear();
        for (tenant, u) in usage {
            let per_series = |family: &Family<TenantSeriesLabel, Gauge>,
                              gpus: &BTreeMap<String, u32>| {
                for (series, n) in gpus {
                    let labels = TenantSeriesLabel {
                        tenant: tenant.clone(),
                        series: series.clone(),
                    };
                    family.get_or_create(&labels).set(i64::from(*n));
                }
            };
            per_series(&self.tenant_admitted_gpus, &u.admitted.gpus);
            per_series(&self.tenant_queued_gpus, &u.queued.gpus);
            let labels = TenantLabel {
                tenant: tenant.clone(),
            };
            self.tenant_queued_jobs
                .get_or_create(&labels)
                .set(i64::from(u.queued_jobs));
            self.tenant_admitted_jobs
                .get_or_create(&labels)
                .set(i64::from(u.admitted_jobs));
        }
    }
    /// Counts an admission.
    pub fn inc_admissions(&self) {
        self.admissions.inc();
    }
    /// Counts a pre-running or run deadline failure.
    pub fn inc_deadline_failures(&self) {
        self.deadline_failures.inc();
    }
    /// Counts a terminal outcome (a non-terminal `state` counts as STOPPED).
    pub fn inc_terminal(&self, state: JobState) {
        let state = match state {
            JobState::Succeeded | JobState::Failed => state,
            _ => JobState::Stopped,
        };
        self.terminal
            .get_or_create(&StateLabel {
                state: state.as_str(),
            })
            .inc();
    }
    /// Counts a job queued again for its next attempt.
    pub fn inc_requeued(&self) {
        self.requeued.inc();
    }
    /// Counts a preempted job and the GPU-seconds it stood to lose.
    pub fn inc_preemption(&self, rule: PreemptionRule, lost_gpu_seconds: u64) {
        self.preemptions
            .get_or_create(&RuleLabel {
                reason: rule.as_str(),
            })
            .inc();
        // f64 holds every integer below 2^53 exactly: ~285 million GPU-years.
        #[allow(clippy::cast_precision_loss)]
        self.preemption_lost.inc_by(lost_gpu_seconds as f64);
    }
    /// Counts a deleted orphan workload.
    pub fn inc_orphans(&self) {
        self.orphans_deleted.inc();
    }
    /// Counts a retried API call.
    pub fn inc_api_retries(&self) {
        self.api_retries.inc();
    }
    /// Counts a step that failed for good (after any retries) by what failed: the API server,
    /// a store, or anything else (render, transition, archive).
    pub fn inc_step_error(&self, error: &Error) {
        let cause = match error {
            Error::Kube { .. } | Error::MissingCrd(_) => "kube",
            Error::Store(_) => "store",
            _ => "other",
        };
        self.step_errors.get_or_create(&CauseLabel { cause }).inc();
    }
    /// Adds time the pass loop waited after failed passes.
    pub fn observe_backoff(&self, waited: Duration) {
        self.backoff.inc_by(waited.as_secs_f64());
    }
    /// API calls retried so far.
    pub fn api_retries(&self) -> u64 {
        self.api_retries.get()
    }
    /// Counts a failed watch (list or watch request, or a broken stream).
    pub fn inc_watch_errors(&self) {
        self.watch_errors.inc();
    }
    /// Watch failures so far.
    pub fn watch_errors(&self) -> u64 {
        self.watch_errors.get()
    }
    /// Steps failed because of the API server, because of a store, and otherwise.
    pub fn step_errors(&self) -> (u64, u64, u64) {
        let [kube, store, other] =
            CAUSES.map(|cause| self.step_errors.get_or_create(&CauseLabel { cause }).get());
        (kube, store, other)
    }
    /// Passes that hit an error so far.
    pub fn pass_errors(&self) -> u64 {
        self.pass_errors.get()
    }
    /// Adds time spent waiting on the client-side rate limit.
    pub fn observe_throttle(&self, waited: Duration) {
        self.throttled.inc_by(waited.as_secs_f64());
    }
    /// Sets whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
    /// Marks the loop alive at `now_ms`.
    pub fn heartbeat(&self, now_ms: i64) {
        self.heartbeat_ms.store(now_ms, Relaxed);
    }
    /// Admissions so far.
    pub fn admissions(&self) -> u64 {
        self.admissions.get()
    }
    /// Passes so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Relaxed)
    }

    /// The text exposition (OpenMetrics text, which Prometheus reads).
    pub fn render(&self) -> String {
        let _reading = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Metrics {
    /// [`Metrics::render`] without the per-tenant families (`tuneplane_tenant_*`): what an
    /// unauthenticated scrape gets, so tenant names and usage are not published to whoever can
    /// reach the port.
    pub fn render_public(&self) -> String {
        let mut out = String::new();
        for line in self.render().lines() {
            let name = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
                .or_else(|| line.strip_prefix("# UNIT "))
                .unwrap_or(line);
            if !name.starts_with(TENANT_PREFIX) {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// Prefix of the per-tenant metric families.
const TENANT_PREFIX: &str = "tuneplane_tenant_";

/// Content type of [`Metrics::render`]'s output.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the server shares: the metrics and the scrape token that unlocks tenant series.
#[derive(Clone)]
struct Served {
    metrics: Arc<Metrics>,
    token: Option<Arc<str>>,
}

/// Whether the request carries `Authorization: Bearer <token>` (compared in constant time).
fn authorized(headers: &axum::http::HeaderMap, token: &str) -> bool {
    let Some(sent) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (sent.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn exposition(State(s): State<Served>, headers: axum::http::HeaderMap) -> impl IntoResponse {
    let full = s.token.as_deref().is_some_and(|t| authorized(&headers, t));
    let body = if full {
        s.metrics.render()
    } else {
        s.metrics.render_public()
    };
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))],
        body,
    )
}

async fn healthz(State(s): State<Served>) -> (StatusCode, &'static str) {
    let m = s.metrics;
    // Alive when the main loop ticked within the last two minutes (it ticks every few seconds).
    let age = tuneplane_core::clock::now_ms() - m.heartbeat_ms.load(Relaxed);
    if age < 120_000 {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loop stalled\n")
    }
}

/// The `/metrics` and `/healthz` router.
pub fn router(metrics: Arc<Metrics>, token: Option<&str>) -> Router {
    Router::new()
        .route("/metrics", get(exposition))
        .route("/healthz", get(healthz))
        .with_state(Served {
            metrics,
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
        })
}

/// Binds `addr` and serves the router until the task is dropped.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, token: Option<String>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    axum::serve(listener, router(metrics, token.as_deref()))
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// The sender's counters, on the reconciler's `/metrics`.
#[derive(Debug, Default)]
pub struct CallbackMetrics {
    pub(crate) delivered: Counter,
    pub(crate) failed: Counter,
    pub(crate) given_up: Counter,
    pub(crate) outstanding: Gauge,
}

impl CallbackMetrics {
    /// Registers the counters in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tuneplane_callbacks_delivered",
            "Callback deliveries a receiver answered 2xx.",
            self.delivered.clone(),
        );
        registry.register(
            "tuneplane_callback_attempts_failed",
            "Callback delivery attempts that failed (retried with backoff unless given up).",
            self.failed.clone(),
        );
        registry.register(
            "tuneplane_callbacks_given_up",
            "Callback deliveries given up: a refused address, 410 Gone, a day without success, or the tenant's cap.",
            self.given_up.clone(),
        );
        registry.register(
            "tuneplane_callbacks_outstanding",
            "Callback deliveries waiting to succeed (as of the sender's last tick).",
            self.outstanding.clone(),
        );
    }

    /// Deliveries answered 2xx so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.get()
    }

    /// Deliveries given up so far.
    pub fn given_up(&self) -> u64 {
        self.given_up.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(gpus: u32, cpus: f64) -> BTreeMap<String, TenantUsage> {
        let mut u = TenantUsage::default();
        u.admitted.gpus.insert("h200".into(), gpus);
        u.admitted.cpus = cpus;
        BTreeMap::from([("acme".to_owned(), u)])
    }

    #[test]
    fn usage_counters_add_what_is_held_times_the_time_between_passes() {
        let m = Metrics::default();
        m.set_tenants(&held(8, 32.0));
        // As if the first pass had been 2.5 s ago.
        m.usage_at_ms.store(crate::now_ms() - 2_500, Relaxed);
        m.set_tenants(&held(8, 32.0));
        let text = m.render();
        let value = |name: &str| -> f64 {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1.0)
        };
        let gpu = value("tuneplane_tenant_gpu_seconds_total{tenant=\"acme\",series=\"h200\"}");
        assert!((20.0..20.5).contains(&gpu), "8 GPUs × 2.5 s: {gpu}\n{text}");
        let cpu = value("tuneplane_tenant_cpu_seconds_total{tenant=\"acme\"}");
        assert!((80.0..82.0).contains(&cpu), "32 CPUs × 2.5 s: {cpu}");
        assert!(
            !m.render_public().contains("tuneplane_tenant_gpu_seconds"),
            "tenant figures only for a scrape with the token"
        );
    }
}
