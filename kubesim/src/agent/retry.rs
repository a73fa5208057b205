//! Bounded retries of the agent's API calls: exponential back-off for transport errors and 5xx /
//! 429 answers, no retry for other API errors (they would answer the same again).

use std::future::Future;
use std::time::Duration;

/// Attempts of one call before giving up.
pub(crate) const ATTEMPTS: u32 = 6;

/// Longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The wait after `failures` consecutive failures: 200 ms, doubling, at most 10 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    (Duration::from_millis(200) * 2u32.pow(exp)).min(MAX_BACKOFF)
}

/// The HTTP code of an API error answer, if the error is one.
pub(crate) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether trying the same call again may succeed.
pub(crate) fn retriable(e: &kube::Error) -> bool {
    match status_code(e) {
        Some(code) => code == 429 || code >= 500,
        None => true,
    }
}

/// Runs `call` up to [`ATTEMPTS`] times while it fails with a retriable error, logging each
/// failure with `what`.
pub(crate) async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut failures = 0;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if retriable(&e) && failures + 1 < ATTEMPTS => {
                failures += 1;
                let wait = backoff(failures);
                tracing::warn!(error = %e, what, attempt = failures, ?wait, "API call failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_bound() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..kube::core::Status::default()
        }))
    }

    #[test]
    fn only_server_side_and_throttling_errors_are_retried() {
        assert!(retriable(&api_error(503)));
        assert!(retriable(&api_error(429)));
        assert!(!retriable(&api_error(404)));
        assert!(!retriable(&api_error(422)));
        assert_eq!(status_code(&api_error(409)), Some(409));
    }

    #[tokio::test]
    async fn retries_stop_at_a_final_error_and_go_on_after_a_passing_one() {
        let mut calls = 0;
        let r: Result<(), _> = retry("test", || {
            calls += 1;
            async { Err(api_error(404)) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls, 1);
        let mut calls = 0;
        let r = retry("test", || {
            calls += 1;
            let first = calls == 1;
            async move { if first { Err(api_error(503)) } else { Ok(7) } }
        })
        .await;
        assert_eq!(r.ok(), Some(7));
        assert_eq!(calls, 2);
    }
}
