//! What the workspace's tests share (a dev-dependency only; no product code uses it): polling a
//! condition with a bound on time, a free port on the loopback interface, and queued job records
//! built from a small spec ([`records`]). Every loop here stops by itself: a condition that never
//! holds fails the test with what it waited for.
//!
//! It depends on core, so core's own unit tests cannot use [`records`] (they would see another
//! copy of core's types); core's integration tests and every other crate can.

pub mod records;

use std::future::Future;
use std::time::Duration;

/// Polls `check` every `every` until it returns `Some`, failing the test after `secs` seconds
/// with `what` in the message.
pub async fn poll_every<T, F, Fut>(every: Duration, secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}

/// [`poll_every`] 20 ms.
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_every(Duration::from_millis(20), secs, what, check).await
}

/// A port nothing listens on at 127.0.0.1 right now (the OS's choice; another process may take
/// it before the caller binds, which a test retries or tolerates).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port on 127.0.0.1: {e}"))
}

/// The value of the sample `name` (with its labels as the exposition writes them, e.g.
/// `tuneplane_preemptions_total{reason="reclaim"}`) in a Prometheus text exposition; `None` when
/// no such sample is there.
pub fn metric(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_read_by_its_full_name_and_labels() {
        let text = "# HELP tuneplane_x_total x\n# TYPE tuneplane_x_total counter\n\
                    tuneplane_x_total 3\ntuneplane_x_total_more 9\n\
                    tuneplane_y_total{reason=\"reclaim\"} 1 1700000000\n";
        assert_eq!(metric(text, "tuneplane_x_total"), Some(3.0));
        assert_eq!(
            metric(text, "tuneplane_y_total{reason=\"reclaim\"}"),
            Some(1.0)
        );
        assert_eq!(metric(text, "tuneplane_y_total{reason=\"priority\"}"), None);
        assert_eq!(metric(text, "tuneplane_x"), None);
    }

    #[tokio::test]
    async fn polling_returns_the_first_value_and_a_free_port_binds() {
        let mut n = 0;
        let got = wait_for(5, "the third poll", || {
            n += 1;
            let v = (n == 3).then_some(n);
            async move { v }
        })
        .await;
        assert_eq!(got, 3);
        let port = free_port();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 0s waiting for nothing")]
    async fn a_condition_that_never_holds_fails_with_what_it_waited_for() {
        poll_every(Duration::from_millis(1), 0, "nothing", || async {
            None::<()>
        })
        .await;
    }
}
