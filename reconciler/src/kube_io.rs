//! Calls toward the API server: a deliberate client-side rate limit (token bucket) and bounded
//! retries with exponential backoff on 429, 5xx and transport errors.
//!
//! This is the only retry layer: the client is built with kube-rs's own retry layer off
//! ([`client_config`]). That layer retries 429/503/504 up to 15 times per request with backoff
//! growing to minutes, inside one call and invisible to metrics; nested under [`Kube::call`] it
//! would turn 5 attempts into up to 80 and hold a pass for minutes during an API server outage.
//!
//! Watches (reflectors) do not pass through here: they hold one long request each. Every other call
//! (creates, deletes, log reads, lease updates) does, so the API server sees at most `qps` requests
//! per second from the reconciler with bursts of `burst`, and the `kube_throttled_seconds` metric
//! shows when the limit bites instead of hiding it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Attempts per call, the first included.
pub const MAX_ATTEMPTS: u32 = 5;

/// A token bucket: `qps` tokens per second, at most `burst` stored.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(qps: u32, burst: u32) -> RateLimiter {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps: f64::from(qps.max(1)),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Waits for one token; returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        let (tokens, last) = *state;
        let refilled = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        if refilled >= 1.0 {
            *state = (refilled - 1.0, now);
            return Duration::ZERO;
        }
        let wait = Duration::from_secs_f64((1.0 - refilled) / self.qps);
        // Holding the lock while sleeping keeps waiters in FIFO order.
        tokio::time::sleep(wait).await;
        *state = (0.0, Instant::now());
        wait
    }
}

/// Longest an attempt may take. kube-rs sets no read timeout, so without this an API server (or a
/// half-open connection) that never answers would hold a call, and with it a whole pass, forever.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait between two attempts, whatever the server's `Retry-After` asks.
pub const MAX_DELAY: Duration = Duration::from_secs(5);

/// Read timeout of the client's connections unless configured: longer than a watch's server-side
/// timeout (290 s), so only a connection that went silent (a half-open socket, a hung server) ends.
pub const READ_TIMEOUT: Duration = Duration::from_secs(295);

/// The reconciler's client configuration: `config` with kube-rs's built-in retry layer off, so
/// [`Kube::call`] alone retries (bounded, counted in `tuneplane_kube_retries_total`) and watches
/// see errors at once and back off in their watcher; and a read timeout ([`READ_TIMEOUT`]), which
/// kube-rs does not set, so a watch on a connection that went silent fails and is restarted
/// instead of leaving a reflector stale forever.
pub fn client_config(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config.read_timeout.get_or_insert(READ_TIMEOUT);
    config
}

/// The wait a 429 asks for (`details.retryAfterSeconds`), if any.
pub fn retry_after(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) if s.code == 429 => s
            .details
            .as_ref()
            .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds)))
            .filter(|d| !d.is_zero()),
        _ => None,
    }
}

/// True for errors worth retrying: throttling, server errors, transport failures.
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// An attempt that took longer than its timeout, as a (retryable) transport error.
fn timed_out(after: Duration) -> kube::Error {
    kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {after:?}"),
    )))
}

/// True if the error is a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// True if the error is a 409 (AlreadyExists or a stale resourceVersion).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The kube client with the rate limit and retry policy applied to each call.
#[derive(Clone)]
pub struct Kube {
    /// The underlying client (for building `Api`s).
    pub client: kube::Client,
    limiter: Arc<RateLimiter>,
    metrics: Arc<Metrics>,
    attempt_timeout: Duration,
}

impl Kube {
    /// Wraps `client`.
    pub fn new(client: kube::Client, qps: u32, burst: u32, metrics: Arc<Metrics>) -> Kube {
        Kube {
            client,
            limiter: Arc::new(RateLimiter::new(qps, burst)),
            metrics,
            attempt_timeout: ATTEMPT_TIMEOUT,
        }
    }

    /// The same client with another per-attempt timeout (tests).
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Kube {
        self.attempt_timeout = timeout;
        self
    }

    /// Runs `call` under the rate limit, retrying retryable failures with backoff (bounded by
    /// [`MAX_ATTEMPTS`]; a 429's `Retry-After` lengthens the wait, up to [`MAX_DELAY`]).
    /// Non-retryable errors (404, 409, 422) return at once for the caller to judge.
    ///
    /// Retrying a write whose answer was lost is safe for the callers' writes: creates use
    /// deterministic names and take 409 AlreadyExists as success, deletes take 404 as success.
    pub async fn call<T, F, Fut>(&self, op: &'static str, object: &str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            let waited = self.limiter.acquire().await;
            self.metrics.observe_throttle(waited);
            let outcome = tokio::time::timeout(self.attempt_timeout, call())
                .await
                .unwrap_or_else(|_| Err(timed_out(self.attempt_timeout)));
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) if retryable(&e) && attempt < MAX_ATTEMPTS => {
                    self.metrics.inc_api_retries();
                    tracing::warn!(op, object, attempt, error = %e, "retrying API call");
                    let wait = retry_after(&e).map_or(delay, |r| r.clamp(delay, MAX_DELAY));
                    tokio::time::sleep(wait).await;
                    delay = (delay * 2).min(MAX_DELAY);
                    attempt += 1;
                }
                Err(e) => return Err(Error::kube(op, object, e)),
            }
        }
    }

    /// Runs `call` once under the rate limit and the attempt timeout: for requests whose
    /// failure the caller handles by going on without them (a retry would only delay that).
    pub async fn once<T, Fut>(&self, op: &'static str, object: &str, call: Fut) -> Result<T>
    where
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let waited = self.limiter.acquire().await;
        self.metrics.observe_throttle(waited);
        tokio::time::timeout(self.attempt_timeout, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(self.attempt_timeout)))
            .map_err(|e| Error::kube(op, object, e))
    }
}

/// What kube-rs's watcher and reflector need of a watched resource type; every Kubernetes type
/// the reconciler watches is one.
pub trait Watched:
    kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bucket_allows_the_burst_then_paces_at_qps() {
        let limiter = RateLimiter::new(10, 3);
        for _ in 0..3 {
            assert_eq!(limiter.acquire().await, Duration::ZERO);
        }
        let waited = limiter.acquire().await;
        assert!(waited > Duration::ZERO && waited <= Duration::from_millis(100));
    }

    #[test]
    fn throttling_and_server_errors_are_retryable_but_conflicts_are_not() {
        let status = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            }))
        };
        assert!(retryable(&status(429)) && retryable(&status(503)));
        assert!(!retryable(&status(409)) && !retryable(&status(404)));
        assert!(is_conflict(&status(409)) && is_not_found(&status(404)));
        assert_eq!(retry_after(&status(429)), None);
        let details = serde_json::from_value(serde_json::json!({"retryAfterSeconds": 2})).unwrap();
        let throttled = kube::Error::Api(Box::new(kube::core::Status {
            code: 429,
            details: Some(details),
            ..kube::core::Status::default()
        }));
        assert_eq!(retry_after(&throttled), Some(Duration::from_secs(2)));
    }

    #[tokio::test]
    async fn an_attempt_that_never_answers_times_out_and_is_retried_a_bounded_number_of_times() {
        let url = "http://127.0.0.1:1".parse().unwrap();
        let client = kube::Client::try_from(client_config(kube::Config::new(url))).unwrap();
        let metrics = Arc::new(Metrics::default());
        let kube = Kube::new(client, 100, 100, metrics.clone())
            .with_attempt_timeout(Duration::from_millis(10));
        let mut attempts = 0;
        let outcome: Result<()> = kube
            .call("get", "hung", || {
                attempts += 1;
                std::future::pending()
            })
            .await;
        assert!(matches!(outcome, Err(Error::Kube { ref source, .. }) if retryable(source)));
        assert_eq!(attempts, MAX_ATTEMPTS);
        assert_eq!(metrics.api_retries(), u64::from(MAX_ATTEMPTS - 1));
    }

    #[test]
    fn the_client_configuration_turns_the_built_in_retry_layer_off() {
        let url = "http://127.0.0.1:1".parse().unwrap();
        assert!(kube::Config::new(url).default_retry);
        let url = "http://127.0.0.1:1".parse().unwrap();
        let config = client_config(kube::Config::new(url));
        assert!(!config.default_retry);
        assert_eq!(config.read_timeout, Some(READ_TIMEOUT));
    }
}
