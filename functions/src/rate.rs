//! Rate limits in the app, beside API Gateway's API-wide throttle: a token bucket per API key and
//! one per source address, so one tenant's loop or one address's flood of bad keys cannot spend
//! what everyone shares. A request over either limit is a 429 `rate_limited` with `Retry-After`.
//!
//! The buckets live in the function instance's memory: under Lambda each concurrent instance
//! keeps its own, so the bound on the whole API is the limit times the function's concurrency
//! (reserve concurrency to make it definite). Keys are bucketed by a hash of what was presented,
//! before authentication, so wrong keys are limited too; the table is bounded and forgets the
//! buckets idle longest.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Most buckets kept; beyond it the longest idle are forgotten (a full bucket is no loss).
pub const MAX_BUCKETS: usize = 10_000;

/// A sustained rate and a burst.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests per second, sustained.
    pub per_second: f64,
    /// Requests at once after a quiet spell.
    pub burst: f64,
}

impl Rate {
    /// Parses `RATE/BURST` (`20/40`), `RATE` (burst = 2 × rate) or `off`.
    pub fn parse(text: &str) -> Result<Option<Rate>, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let (rate, burst) = match text.split_once('/') {
            Some((r, b)) => (r, Some(b)),
            None => (text, None),
        };
        let number = |s: &str, what: &str| -> Result<f64, String> {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.1 && *v <= 100_000.0)
                .ok_or_else(|| {
                    format!("{what} {s:?} is not a number from 0.1 to 100000 (write RATE/BURST, e.g. 20/40, or off)")
                })
        };
        let per_second = number(rate, "rate")?;
        let burst = match burst {
            Some(b) => number(b, "burst")?,
            None => per_second * 2.0,
        };
        if burst < 1.0 {
            return Err(format!("burst {burst} must allow at least one request"));
        }
        Ok(Some(Rate { per_second, burst }))
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The limits and their buckets (shared by every request of the instance).
#[derive(Debug, Default)]
pub struct RateLimits {
    per_key: Option<Rate>,
    per_source: Option<Rate>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimits {
    /// Limits per API key and per source address; `None` turns one off.
    pub fn new(per_key: Option<Rate>, per_source: Option<Rate>) -> RateLimits {
        RateLimits {
            per_key,
            per_source,
            buckets: Mutex::default(),
        }
    }

    /// Takes one token from bucket `id` of `rate` at `now`; `Err(seconds)` to wait when empty.
    fn take(&self, id: String, rate: Rate, now: Instant) -> Result<(), f64> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&id) {
            // Forget the longest idle tenth at once, so this is rare.
            let mut ages: Vec<(Instant, String)> =
                buckets.iter().map(|(k, b)| (b.at, k.clone())).collect();
            ages.sort();
            for (_, k) in ages.into_iter().take(MAX_BUCKETS / 10) {
                buckets.remove(&k);
            }
        }
        let bucket = buckets.entry(id).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * rate.per_second;
        bucket.tokens = (bucket.tokens + refill).min(rate.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err((1.0 - bucket.tokens) / rate.per_second)
        }
    }

    /// Checks a request from `source` presenting `bearer` (if any) at `now`.
    pub fn check(&self, source: &str, bearer: Option<&str>, now: Instant) -> Result<(), f64> {
        if let Some(rate) = self.per_source {
            self.take(format!("src:{source}"), rate, now)?;
        }
        if let (Some(rate), Some(key)) = (self.per_key, bearer) {
            let digest = Sha256::digest(key.as_bytes());
            self.take(format!("key:{}", hex::encode(&digest[..12])), rate, now)?;
        }
        Ok(())
    }
}

/// The caller's address: API Gateway's `sourceIp` under Lambda, the peer's address when served
/// over plain HTTP, else one shared `unknown`.
fn source_of(req: &Request) -> String {
    use lambda_http::RequestExt;
    if let Some(lambda_http::request::RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref()
        && let Some(ip) = &ctx.http.source_ip
    {
        return ip.clone();
    }
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip().to_string())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Middleware: 429 `rate_limited` with `Retry-After` (whole seconds) over a limit.
pub async fn limit(State(limits): State<Arc<RateLimits>>, req: Request, next: Next) -> Response {
    let source = source_of(&req);
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    match limits.check(&source, bearer.as_deref(), Instant::now()) {
        Ok(()) => next.run(req).await,
        Err(wait) => {
            let seconds = wait.ceil().max(1.0) as u64;
            let mut response = ApiError::RateLimited(format!(
                "too many requests from this key or address; retry in {seconds} s"
            ))
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rates_parse_with_a_default_burst_and_off() {
        assert_eq!(
            Rate::parse("20/40"),
            Ok(Some(Rate {
                per_second: 20.0,
                burst: 40.0
            }))
        );
        assert_eq!(
            Rate::parse(" 5 ").map(|r| r.map(|r| r.burst)),
            Ok(Some(10.0))
        );
        assert_eq!(Rate::parse("OFF"), Ok(None));
        for bad in ["", "fast", "0/1", "10/0.5", "1e9", "NaN/2"] {
            assert!(Rate::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate_and_keys_and_sources_are_apart() {
        let rate = Rate {
            per_second: 2.0,
            burst: 3.0,
        };
        let limits = RateLimits::new(Some(rate), None);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limits.check("a", Some("key-1"), t0), Ok(()));
        }
        let wait = limits
            .check("a", Some("key-1"), t0)
            .err()
            .unwrap_or_default();
        assert!((wait - 0.5).abs() < 1e-9, "{wait}");
        // Another key is its own bucket; no key is not limited per key.
        assert_eq!(limits.check("a", Some("key-2"), t0), Ok(()));
        assert_eq!(limits.check("a", None, t0), Ok(()));
        // Half a second later one more (2 per second).
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(limits.check("a", Some("key-1"), t1), Ok(()));
        assert!(limits.check("a", Some("key-1"), t1).is_err());
        // Per source: whatever key is presented.
        let by_source = RateLimits::new(None, Some(rate));
        for i in 0..3 {
            assert_eq!(
                by_source.check("10.0.0.1", Some(&format!("k{i}")), t0),
                Ok(())
            );
        }
        assert!(by_source.check("10.0.0.1", Some("k9"), t0).is_err());
        assert_eq!(by_source.check("10.0.0.2", None, t0), Ok(()));
    }

    #[test]
    fn the_table_stays_bounded() {
        let limits = RateLimits::new(
            Some(Rate {
                per_second: 1.0,
                burst: 1.0,
            }),
            None,
        );
        let t0 = Instant::now();
        for i in 0..(MAX_BUCKETS + 5) {
            let _ = limits.check("a", Some(&format!("key-{i}")), t0);
        }
        let n = limits.buckets.lock().map(|b| b.len()).unwrap_or_default();
        assert!(n <= MAX_BUCKETS, "{n}");
    }
}
