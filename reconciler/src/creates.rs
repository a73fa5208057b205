//! Workload creates run beside the passes: a pass decides, starts the creates its request budget
//! allows (in `pass::create_order`) and goes on, so a pass stays short however slowly the API
//! server answers creates under load (a pass that waited for 200 creates at ~0.3 s each, 16 at a
//! time, ran for 3.5 s, and a job that arrived meanwhile waited for it: BENCHMARKS.md, "Deciding
//! ahead of the creates"). A create that fails is logged and counted; the job stays ADMITTED with
//! its workload missing, and a later pass starts its create again (creates are idempotent).
//!
//! At most [`AT_ONCE`] creates are in flight; the client's rate limit paces them. The creates a
//! pass may start are its budget less the requests still in flight ([`Creates::in_flight`]), and
//! no more than [`AT_ONCE`] jobs' creates at once, so a tenant whose first job was just decided
//! gets the first free turn.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

use crate::error::Result;
use crate::metrics::Metrics;

/// Most creates in flight at once; a pass starts no more than this (so none queues behind the
/// others, where a later pass could not put a newly arrived tenant's job ahead of it). A loaded
/// API server answered ~40 pod creates a second here whatever the client's rate, and with the
/// client's whole second of creates started at once, a late tenant's create waited 3-8 s behind
/// them (BENCHMARKS.md, "Deciding ahead of the creates").
pub const AT_ONCE: usize = 32;

/// The creates in flight, by job id, with the requests each makes.
pub struct Creates {
    running: Arc<Mutex<HashMap<String, (usize, AbortHandle)>>>,
    turns: Arc<Semaphore>,
}

impl Default for Creates {
    fn default() -> Creates {
        Creates {
            running: Arc::new(Mutex::new(HashMap::new())),
            turns: Arc::new(Semaphore::new(AT_ONCE)),
        }
    }
}

impl std::fmt::Debug for Creates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creates")
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl Creates {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, AbortHandle)>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `job_id`'s create is in flight (or waits for its turn).
    pub fn is_running(&self, job_id: &str) -> bool {
        self.running().contains_key(job_id)
    }

    /// Jobs whose create is in flight.
    pub fn running_jobs(&self) -> usize {
        self.running().len()
    }

    /// Requests of the creates in flight.
    pub fn in_flight(&self) -> usize {
        self.running().values().map(|(cost, _)| cost).sum()
    }

    /// Starts `create` for `job_id` (`cost`: the requests it makes) unless one is in flight; its
    /// failure is logged and counted in `metrics`.
    pub fn start<F>(&self, job_id: &str, cost: usize, metrics: Arc<Metrics>, create: F)
    where
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let mut running = self.running();
        if running.contains_key(job_id) {
            return;
        }
        let (all, turns, id) = (self.running.clone(), self.turns.clone(), job_id.to_owned());
        let task = tokio::spawn(async move {
            // The semaphore is never closed; without a permit the create still runs.
            let _turn = turns.acquire_owned().await.ok();
            if let Err(e) = create.await {
                metrics.inc_step_error(&e);
                tracing::warn!(job_id = %id, error = %e, "create failed; retrying next pass");
            }
            all.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        });
        running.insert(job_id.to_owned(), (cost, task.abort_handle()));
    }

    /// Aborts every create in flight (the reconciler stops); their jobs stay ADMITTED and the
    /// next leader creates them.
    pub fn abort_all(&self) {
        for (_, (_, task)) in self.running().drain() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_create_runs_beside_the_caller_once_and_counts_its_requests_until_it_ends() {
        let creates = Creates::default();
        let metrics = Arc::new(Metrics::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        creates.start("j", 3, metrics.clone(), async move {
            let _ = rx.await;
            Ok(())
        });
        assert!(creates.is_running("j"));
        assert_eq!(creates.in_flight(), 3);
        // A second start while it runs changes nothing.
        creates.start("j", 5, metrics, async { Ok(()) });
        assert_eq!(creates.in_flight(), 3);
        let _ = tx.send(());
        for _ in 0..100 {
            if !creates.is_running("j") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!creates.is_running("j"));
        assert_eq!(creates.in_flight(), 0);
    }

    #[tokio::test]
    async fn stopping_aborts_what_is_in_flight() {
        let creates = Creates::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        creates.start("j", 1, Arc::new(Metrics::default()), async move {
            let _ = rx.await;
            Ok(())
        });
        creates.abort_all();
        assert_eq!(creates.in_flight(), 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(tx.is_closed());
    }
}
