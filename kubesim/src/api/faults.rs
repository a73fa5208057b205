//! API fault injection, so clients' retry, backoff and relist paths can be tested:
//!
//! - [`Faults::fail_next`]: the next N resource requests fail with a chosen status (429 with
//!   `Retry-After`, 500, 503, 504).
//! - [`FaultPlan`]: a seeded, switchable plan that gives each resource request in its
//!   [`FaultScope`] a probability of an error status (picked from a set), of a dropped connection
//!   (the server reads the request and closes the connection without answering, so the client sees
//!   a transport error), of a lost response (the request is applied, then the connection is closed
//!   before the answer is written: the client cannot tell it from a drop, and a retried create meets
//!   409 AlreadyExists), and of a slow answer (a delay before it is handled).
//!
//! Every resource request is counted, and so is every injected fault by kind ([`FaultCounts`]).
//! Discovery and health paths are never affected.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::error::StatusError;

/// Which resource requests a [`FaultPlan`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultScope {
    /// Every resource request: gets, lists, watches (their initial request) and writes.
    All,
    /// Writes only: POST, PUT, PATCH, DELETE.
    Mutating,
    /// Reads only: GET (gets, lists, watches).
    Reads,
}

impl FaultScope {
    fn covers(self, method: &Method) -> bool {
        let read = method == Method::GET || method == Method::HEAD;
        match self {
            FaultScope::All => true,
            FaultScope::Mutating => !read,
            FaultScope::Reads => read,
        }
    }
}

/// A seeded plan of faults. Each request in scope draws from one PRNG seeded with `seed`: with
/// probability `error_rate` it is answered with a status from `error_codes`, else with probability
/// `drop_rate` its connection is dropped, else with probability `lost_response_rate` it is handled
/// and its connection dropped before the answer; independently, with probability `slow_rate` it is first
/// delayed by a time between `slow_min` and `slow_max`. The sequence of draws is reproducible; which
/// request gets which draw depends on the order requests arrive in.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Seed of the plan's [`SplitMix64`] draws: the same seed and request order give the same
    /// faults.
    pub seed: u64,
    /// Requests the plan applies to.
    pub scope: FaultScope,
    /// If set, only requests whose path contains this (e.g. `/log` for log reads).
    pub path_contains: Option<String>,
    /// Probability (0..=1) of an error status.
    pub error_rate: f64,
    /// Statuses to answer with, picked uniformly (429 carries `Retry-After`).
    pub error_codes: Vec<u16>,
    /// `Retry-After` seconds of a 429 (header and `details.retryAfterSeconds`).
    pub retry_after_secs: u32,
    /// Probability (0..=1) of a dropped connection (when no error status was drawn).
    pub drop_rate: f64,
    /// Probability (0..=1) of a lost response (when neither an error nor a drop was drawn).
    pub lost_response_rate: f64,
    /// Probability (0..=1) of a delay before the request is handled.
    pub slow_rate: f64,
    /// Shortest delay.
    pub slow_min: Duration,
    /// Longest delay.
    pub slow_max: Duration,
}

impl Default for FaultPlan {
    /// No faults; 500, 503 and 429 as error codes and 50–300 ms delays once rates are set.
    fn default() -> Self {
        Self {
            seed: 1,
            scope: FaultScope::All,
            path_contains: None,
            error_rate: 0.0,
            error_codes: vec![500, 503, 429],
            retry_after_secs: 1,
            drop_rate: 0.0,
            lost_response_rate: 0.0,
            slow_rate: 0.0,
            slow_min: Duration::from_millis(50),
            slow_max: Duration::from_millis(300),
        }
    }
}

impl FaultPlan {
    /// Every request in `scope` fails with `code` (an outage).
    pub fn outage(code: u16, scope: FaultScope) -> Self {
        Self {
            scope,
            error_rate: 1.0,
            error_codes: vec![code],
            ..Self::default()
        }
    }
}

/// Counts of resource requests and injected faults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Resource requests received (faulted or not).
    pub requests: u64,
    /// Error statuses injected, by code.
    pub errors: BTreeMap<u16, u64>,
    /// Connections dropped before the request was handled.
    pub drops: u64,
    /// Requests handled whose connection was then dropped before the answer.
    pub lost_responses: u64,
    /// Requests delayed.
    pub slow: u64,
    /// Resource requests by verb and resource, as an audit log names them (`create pods`,
    /// `delete secrets`, `get pods/log`, `list pods`, `watch pods`), faulted or not.
    pub by_verb: BTreeMap<String, u64>,
}

impl FaultCounts {
    /// Error statuses injected, all codes.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// What to do with one request.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Wait this long first.
    pub delay: Option<Duration>,
    /// Then answer this instead of handling the request.
    pub fault: Option<Fault>,
}

/// An injected failure.
#[derive(Debug)]
pub enum Fault {
    /// Answer with an error status.
    Status(Response),
    /// Close the connection without answering.
    Drop,
    /// Handle the request, then close the connection without answering.
    LoseResponse,
}

/// SplitMix64: a small seeded generator (no dependency), so a seed names one sequence of draws.
/// Shared with the tests that inject faults of their own.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi.saturating_sub(lo).saturating_add(1)).max(1)
    }
}

#[derive(Debug, Default)]
struct State {
    next: Option<(u32, u16)>,
    plan: Option<(FaultPlan, SplitMix64)>,
    counts: FaultCounts,
}

/// Pending injected failures, the active plan and the counters.
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<State>,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the next `count` resource requests fail with `code`.
    pub fn fail_next(&self, count: u32, code: u16) {
        self.lock().next = (count > 0).then_some((count, code));
    }

    /// Installs `plan` (replacing any), or clears it with `None`.
    pub fn set_plan(&self, plan: Option<FaultPlan>) {
        self.lock().plan = plan.map(|p| {
            let rng = SplitMix64::new(p.seed);
            (p, rng)
        });
    }

    /// The counters so far.
    pub fn counts(&self) -> FaultCounts {
        self.lock().counts.clone()
    }

    /// Counts one resource request under `verb` (see [`FaultCounts::by_verb`]) and decides its
    /// faults: a pending `fail_next` first, then the plan if the request is in its scope.
    pub fn verdict(&self, method: &Method, path: &str, verb: String) -> Verdict {
        let mut state = self.lock();
        state.counts.requests += 1;
        *state.counts.by_verb.entry(verb).or_default() += 1;
        if let Some((left, code)) = state.next {
            state.next = (left > 1).then_some((left - 1, code));
            *state.counts.errors.entry(code).or_default() += 1;
            return Verdict {
                delay: None,
                fault: Some(Fault::Status(status(code, 1))),
            };
        }
        let State { plan, counts, .. } = &mut *state;
        let in_scope = |p: &FaultPlan| {
            p.scope.covers(method) && p.path_contains.as_deref().is_none_or(|s| path.contains(s))
        };
        let Some((plan, rng)) = plan.as_mut().filter(|(p, _)| in_scope(p)) else {
            return Verdict::default();
        };
        let mut verdict = Verdict::default();
        if rng.unit() < plan.slow_rate {
            let span = plan.slow_max.saturating_sub(plan.slow_min);
            verdict.delay = Some(plan.slow_min + span.mul_f64(rng.unit()));
            counts.slow += 1;
        }
        let draw = rng.unit();
        if draw < plan.error_rate && !plan.error_codes.is_empty() {
            let pick = rng.next_u64() % plan.error_codes.len() as u64;
            let code = plan.error_codes[usize::try_from(pick).unwrap_or(0)];
            *counts.errors.entry(code).or_default() += 1;
            verdict.fault = Some(Fault::Status(status(code, plan.retry_after_secs)));
        } else if draw < plan.error_rate + plan.drop_rate {
            counts.drops += 1;
            verdict.fault = Some(Fault::Drop);
        } else if draw < plan.error_rate + plan.drop_rate + plan.lost_response_rate {
            counts.lost_responses += 1;
            verdict.fault = Some(Fault::LoseResponse);
        }
        verdict
    }
}

/// An error `Status` response for `code` (429 with `Retry-After`).
pub(crate) fn status(code: u16, retry_after_secs: u32) -> Response {
    let (reason, message) = match code {
        429 => (
            "TooManyRequests",
            "too many requests, please try again later",
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        _ => (
            "InternalError",
            "an error on the server (injected by kubesim) has prevented the request from succeeding",
        ),
    };
    let mut err = StatusError::internal(message);
    err.code = code;
    err.reason = reason;
    if code == 429 {
        err.details = Some(json!({"retryAfterSeconds": retry_after_secs}));
    }
    let mut resp = err.into_response();
    if code == 429 {
        resp.headers_mut().insert(
            "retry-after",
            axum::http::HeaderValue::from(retry_after_secs),
        );
    }
    if StatusCode::from_u16(code).is_err() {
        *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    }
    resp
}

/// A handle on one accepted connection that lets a handler drop it (request extension, as
/// `ConnectInfo<ConnHandle>`).
#[derive(Debug, Clone, Default)]
pub struct ConnHandle(Arc<AtomicBool>);

impl ConnHandle {
    /// Makes every later read and write on the connection fail, so the server closes it without
    /// writing the response being prepared.
    pub fn kill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn killed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, FaultListener>>
    for ConnHandle
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, FaultListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// A TCP listener whose connections can be killed from a handler.
pub struct FaultListener {
    inner: TcpListener,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
}

impl FaultListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener) -> Self {
        Self {
            inner,
            accepted: Arc::default(),
        }
    }
}

impl axum::serve::Listener for FaultListener {
    type Io = KillableStream;
    type Addr = ConnHandle;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    self.accepted.fetch_add(1, Ordering::Relaxed);
                    let handle = ConnHandle::default();
                    let io = KillableStream {
                        inner: stream,
                        handle: handle.clone(),
                    };
                    return (io, handle);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(ConnHandle::default())
    }
}

/// A TCP stream that fails every read and write once its handle is killed.
pub struct KillableStream {
    inner: TcpStream,
    handle: ConnHandle,
}

fn dropped() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection dropped by kubesim fault injection",
    )
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.handle.killed() {
            return Poll::Ready(Err(dropped()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.handle.killed() {
            return Poll::Ready(Err(dropped()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.handle.killed() {
            return Poll::Ready(Err(dropped()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts_of(plan: FaultPlan, n: usize, method: &Method) -> FaultCounts {
        let faults = Faults::default();
        faults.set_plan(Some(plan));
        for _ in 0..n {
            let _ = faults.verdict(method, "/api/v1/nodes", String::new());
        }
        faults.counts()
    }

    #[test]
    fn a_seeded_plan_injects_each_kind_at_about_its_rate_reproducibly() {
        let plan = FaultPlan {
            seed: 42,
            error_rate: 0.1,
            drop_rate: 0.05,
            slow_rate: 0.2,
            ..FaultPlan::default()
        };
        let a = counts_of(plan.clone(), 10_000, &Method::POST);
        assert_eq!(a, counts_of(plan, 10_000, &Method::POST));
        assert_eq!(a.requests, 10_000);
        assert!((800..1200).contains(&a.error_total()), "{a:?}");
        assert!((300..700).contains(&a.drops), "{a:?}");
        assert!((1700..2300).contains(&a.slow), "{a:?}");
        for code in [429, 500, 503] {
            assert!(a.errors.get(&code).copied().unwrap_or(0) > 200, "{a:?}");
        }
    }

    #[test]
    fn the_scope_limits_which_requests_are_faulted() {
        let plan = FaultPlan {
            scope: FaultScope::Mutating,
            ..FaultPlan::outage(503, FaultScope::Mutating)
        };
        assert_eq!(counts_of(plan.clone(), 50, &Method::GET).error_total(), 0);
        assert_eq!(counts_of(plan, 50, &Method::DELETE).error_total(), 50);
        let faults = Faults::default();
        faults.set_plan(Some(FaultPlan {
            path_contains: Some("/log".into()),
            ..FaultPlan::outage(500, FaultScope::All)
        }));
        let logs = "/api/v1/namespaces/a/pods/p/log";
        assert!(
            faults
                .verdict(&Method::GET, logs, String::new())
                .fault
                .is_some()
        );
        assert!(
            faults
                .verdict(&Method::GET, "/api/v1/namespaces/a/pods/p", String::new())
                .fault
                .is_none()
        );
    }

    #[test]
    fn fail_next_comes_first_and_a_cleared_plan_injects_nothing() {
        let faults = Faults::default();
        faults.set_plan(Some(FaultPlan::outage(500, FaultScope::All)));
        faults.fail_next(1, 429);
        assert!(
            matches!(faults.verdict(&Method::GET, "/api/v1/nodes", String::new()).fault, Some(Fault::Status(r)) if r.status() == 429)
        );
        assert!(
            matches!(faults.verdict(&Method::GET, "/api/v1/nodes", String::new()).fault, Some(Fault::Status(r)) if r.status() == 500)
        );
        faults.set_plan(None);
        assert!(
            faults
                .verdict(&Method::GET, "/api/v1/nodes", String::new())
                .fault
                .is_none()
        );
        let c = faults.counts();
        assert_eq!(
            (c.requests, c.errors.get(&429), c.errors.get(&500)),
            (3, Some(&1), Some(&1))
        );
    }
}
