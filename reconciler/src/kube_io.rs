//! Calls toward the API server: a deliberate client-side rate limit (token bucket) and bounded
//! retries with exponential backoff on 429, 5xx and transport errors.
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

/// True for errors worth retrying: throttling, server errors, transport failures.
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
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
}

impl Kube {
    /// Wraps `client`.
    pub fn new(client: kube::Client, qps: u32, burst: u32, metrics: Arc<Metrics>) -> Kube {
        Kube {
            client,
            limiter: Arc::new(RateLimiter::new(qps, burst)),
            metrics,
        }
    }

    /// Runs `call` under the rate limit, retrying retryable failures with backoff (bounded by
    /// [`MAX_ATTEMPTS`]). Non-retryable errors (404, 409, 422) return at once for the caller to judge.
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
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) if retryable(&e) && attempt < MAX_ATTEMPTS => {
                    self.metrics.inc_api_retries();
                    tracing::warn!(op, object, attempt, error = %e, "retrying API call");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                    attempt += 1;
                }
                Err(e) => return Err(Error::kube(op, object, e)),
            }
        }
    }
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
    }
}
