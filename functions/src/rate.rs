//! Rate limits in the app, beside API Gateway's API-wide throttle: a token bucket per API key and
//! one per source address, so one tenant's loop or one address's flood of bad keys cannot spend
//! what everyone shares. A request over either limit is a 429 `rate_limited` with `Retry-After`.
//!
//! Grant routes (`/v1/jobs/{id}/grant/...`) are the exception. Job pods call them from the
//! cluster's shared NAT address, so charging them to that address's bucket would let one
//! tenant's flood delay every other tenant's checkpoint uploads. A request whose bearer is a
//! valid grant of the job in its path (an HMAC check, no store read) is charged to a bucket of
//! that job alone (`grant:<job id>`, at the per-key rate) and to neither the source nor a key
//! bucket. A grant that does not verify is charged like any other request.
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

use tuneplane_core::grant::GrantKey;

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
        self.check_as(&Charge::Caller { source, bearer }, now)
    }

    /// Takes a token for `charge` at `now`; `Err(seconds)` to wait when over a limit.
    pub fn check_as(&self, charge: &Charge<'_>, now: Instant) -> Result<(), f64> {
        let (source, bearer) = match *charge {
            Charge::Grant { job_id } => {
                // Grants share the per-key rate: a job's runner is one caller, like a key.
                return match self.per_key {
                    Some(rate) => self.take(format!("grant:{job_id}"), rate, now),
                    None => Ok(()),
                };
            }
            Charge::Caller { source, bearer } => (source, bearer),
        };
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

/// Whose bucket a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge<'a> {
    /// A valid grant of job `job_id`: that job's own bucket only.
    Grant {
        /// The job the grant verified for.
        job_id: &'a str,
    },
    /// Anyone else: the source address's bucket and the presented key's.
    Caller {
        /// The caller's address.
        source: &'a str,
        /// The bearer presented, if any.
        bearer: Option<&'a str>,
    },
}

/// The job id of a grant route's path (`/v1/jobs/{id}/grant/...`), else `None`.
pub fn grant_route_job(path: &str) -> Option<&str> {
    let (id, rest) = path.strip_prefix("/v1/jobs/")?.split_once('/')?;
    (!id.is_empty() && rest.starts_with("grant/")).then_some(id)
}

/// Whom a request to `path` from `source` presenting `bearer` is charged to: the job's grant
/// bucket when `path` is a grant route and `bearer` verifies under `grant_key` for its job, else
/// the caller's buckets.
pub fn charge_of<'a>(
    grant_key: Option<&GrantKey>,
    path: &'a str,
    source: &'a str,
    bearer: Option<&'a str>,
) -> Charge<'a> {
    if let (Some(key), Some(job_id), Some(token)) = (grant_key, grant_route_job(path), bearer)
        && key.verify(job_id, token).is_some()
    {
        return Charge::Grant { job_id };
    }
    Charge::Caller { source, bearer }
}

/// What the middleware needs: the limits and the key grants are verified with.
#[derive(Debug, Clone)]
pub struct Limiter {
    /// The limits and their buckets.
    pub limits: Arc<RateLimits>,
    /// The installation's grant key (none: no request is charged as a grant).
    pub grant_key: Option<GrantKey>,
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
pub async fn limit(State(limiter): State<Limiter>, req: Request, next: Next) -> Response {
    let source = source_of(&req);
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let path = req.uri().path().to_owned();
    let charge = charge_of(
        limiter.grant_key.as_ref(),
        &path,
        &source,
        bearer.as_deref(),
    );
    match limiter.limits.check_as(&charge, Instant::now()) {
        Ok(()) => next.run(req).await,
        Err(wait) => {
            let seconds = wait.ceil().max(1.0) as u64;
            let mut response = ApiError::RateLimited(format!(
                "too many requests from this key, grant or address; retry in {seconds} s"
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
    fn only_grant_routes_name_a_grant_job() {
        assert_eq!(grant_route_job("/v1/jobs/j-1/grant/presign"), Some("j-1"));
        assert_eq!(
            grant_route_job("/v1/jobs/j-1/grant/checkpoints/latest"),
            Some("j-1")
        );
        for other in [
            "/v1/jobs/j-1",
            "/v1/jobs/j-1/outputs",
            "/v1/jobs//grant/presign",
            "/v1/jobs/j-1/grants",
            "/v1/playgrounds/j-1/grant/presign",
        ] {
            assert_eq!(grant_route_job(other), None, "{other}");
        }
    }

    #[test]
    fn a_verified_grant_is_charged_to_its_jobs_bucket_and_anything_else_to_the_caller() {
        let key = GrantKey::from_bytes(vec![7; 32]).unwrap_or_else(|e| panic!("{e}"));
        let token = key.token("j-1", 1);
        let path = "/v1/jobs/j-1/grant/presign";
        assert_eq!(
            charge_of(Some(&key), path, "10.0.0.1", Some(&token)),
            Charge::Grant { job_id: "j-1" }
        );
        let caller = |bearer| Charge::Caller {
            source: "10.0.0.1",
            bearer,
        };
        // Another job's grant, a forged one, none, another route, no key: the caller.
        let other = key.token("j-2", 1);
        assert_eq!(
            charge_of(Some(&key), path, "10.0.0.1", Some(&other)),
            caller(Some(&other))
        );
        assert_eq!(
            charge_of(Some(&key), path, "10.0.0.1", Some("tpg1.1.00")),
            caller(Some("tpg1.1.00"))
        );
        assert_eq!(charge_of(Some(&key), path, "10.0.0.1", None), caller(None));
        assert_eq!(
            charge_of(Some(&key), "/v1/jobs/j-1", "10.0.0.1", Some(&token)),
            caller(Some(&token))
        );
        assert_eq!(
            charge_of(None, path, "10.0.0.1", Some(&token)),
            caller(Some(&token))
        );
    }

    #[test]
    fn a_grants_bucket_is_its_jobs_alone_and_spends_nothing_of_the_source() {
        let rate = Rate {
            per_second: 1.0,
            burst: 2.0,
        };
        let limits = RateLimits::new(Some(rate), Some(rate));
        let t0 = Instant::now();
        // The shared address is spent by junk keys.
        for i in 0..2 {
            assert_eq!(
                limits.check("10.0.0.1", Some(&format!("junk{i}")), t0),
                Ok(())
            );
        }
        assert!(limits.check("10.0.0.1", Some("junk9"), t0).is_err());
        // A job's grant still goes, up to its own burst; another job's grant is apart.
        let job = |job_id| Charge::Grant { job_id };
        assert_eq!(limits.check_as(&job("j-1"), t0), Ok(()));
        assert_eq!(limits.check_as(&job("j-1"), t0), Ok(()));
        assert!(limits.check_as(&job("j-1"), t0).is_err());
        assert_eq!(limits.check_as(&job("j-2"), t0), Ok(()));
        // Grants took nothing from a fresh source either.
        let fresh = RateLimits::new(Some(rate), Some(rate));
        for _ in 0..5 {
            let _ = fresh.check_as(&job("j-1"), t0);
        }
        assert_eq!(fresh.check("10.0.0.1", None, t0), Ok(()));
        assert_eq!(fresh.check("10.0.0.1", None, t0), Ok(()));
        // With the per-key limit off, grants are not limited.
        let off = RateLimits::new(None, Some(rate));
        for _ in 0..5 {
            assert_eq!(off.check_as(&job("j-1"), t0), Ok(()));
        }
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
