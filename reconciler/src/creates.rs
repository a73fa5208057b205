//! Workload creates run beside the passes: a pass decides, hands the workloads still to create to
//! [`Creates::offer`] (in `pass::create_order`) and goes on, so a pass stays short however slowly
//! the API server answers creates under load (a pass that waited for 200 creates at ~0.3 s each,
//! 16 at a time, ran for 3.5 s, and a job that arrived meanwhile waited for it: BENCHMARKS.md,
//! "Deciding ahead of the creates"). A create that fails is logged and counted; the job stays
//! ADMITTED with its workload missing, and a later pass offers its create again (creates are
//! idempotent).
//!
//! Each pass replaces the queue with its own order, and a create that ends starts the next one at
//! the front at once, not at the next pass: a tenant whose first job a pass just decided is at the
//! front, and its create starts as soon as any slot frees. No more than [`AT_ONCE`] jobs' creates
//! and the requests the client's rate limit sends in about a second (`limit`) are in flight, so
//! none waits long in the client's rate limiter behind the others, where no later order could
//! reach it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

use crate::error::Result;
use crate::metrics::Metrics;

/// Most jobs' creates in flight at once. A loaded API server answered ~40 pod creates a second
/// here whatever the client's rate, and with the client's whole second of creates started at
/// once, a late tenant's create waited 3-8 s behind them (BENCHMARKS.md, "Deciding ahead of the
/// creates").
pub const AT_ONCE: usize = 32;

/// The requests in flight for a client limited to `qps` a second: a quarter of a second of its
/// rate (at least 4), so a create started now waits at most about that long in the client's rate
/// limiter. With a second's worth (50 at QPS 50) a late tenant's pod was created 1.6 s after its
/// decision, behind the 49 requests ahead of it (BENCHMARKS.md, "Deciding ahead of the creates").
pub fn in_flight_limit(qps: u32) -> usize {
    (qps as usize / 4).max(4)
}

/// A create not yet started.
pub type CreateFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// A create a pass offers: its job, the requests it makes and the create itself.
pub struct Offer {
    /// The job whose workload it creates.
    pub job_id: String,
    /// The requests it makes.
    pub cost: usize,
    /// The create.
    pub create: CreateFuture,
}

#[derive(Default)]
struct State {
    /// Creates in flight, by job id, with the requests each makes.
    running: HashMap<String, (usize, AbortHandle)>,
    /// Creates offered and not started, in the order the last pass gave.
    waiting: VecDeque<Offer>,
}

struct Inner {
    state: Mutex<State>,
    /// Most requests in flight (at least one create runs, however costly).
    limit: usize,
    metrics: Arc<Metrics>,
}

/// The creates in flight and the ones waiting for a free slot.
#[derive(Clone)]
pub struct Creates(Arc<Inner>);

impl std::fmt::Debug for Creates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creates")
            .field("in_flight", &self.in_flight())
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

impl Creates {
    /// No more than `limit` requests (and [`AT_ONCE`] jobs' creates) in flight; failures counted
    /// in `metrics`.
    pub fn new(limit: usize, metrics: Arc<Metrics>) -> Creates {
        Creates(Arc::new(Inner {
            state: Mutex::new(State::default()),
            limit: limit.max(1),
            metrics,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state()
    }

    /// Whether `job_id`'s create is in flight.
    pub fn is_running(&self, job_id: &str) -> bool {
        self.state().running.contains_key(job_id)
    }

    /// Jobs whose create is in flight.
    pub fn running_jobs(&self) -> usize {
        self.state().running.len()
    }

    /// Requests of the creates in flight.
    pub fn in_flight(&self) -> usize {
        self.state().running.values().map(|(cost, _)| cost).sum()
    }

    /// Creates offered and not started yet.
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// Replaces the creates waiting with `offers`, in their order (those whose create is in
    /// flight are dropped), and starts what the free slots allow. Returns how many still wait.
    pub fn offer(&self, offers: Vec<Offer>) -> usize {
        let mut state = self.state();
        let waiting: VecDeque<Offer> = offers
            .into_iter()
            .filter(|o| !state.running.contains_key(&o.job_id))
            .collect();
        state.waiting = waiting;
        self.0.start_next(&mut state);
        state.waiting.len()
    }

    /// Aborts every create in flight and drops the waiting ones (the reconciler stops); their
    /// jobs stay ADMITTED and the next leader creates them.
    pub fn abort_all(&self) {
        let mut state = self.state();
        state.waiting.clear();
        for (_, (_, task)) in state.running.drain() {
            task.abort();
        }
    }
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts waiting creates from the front while the slots allow.
    fn start_next(self: &Arc<Self>, state: &mut State) {
        loop {
            let Some(front) = state.waiting.front() else {
                return;
            };
            let in_flight: usize = state.running.values().map(|(cost, _)| cost).sum();
            let busy = !state.running.is_empty();
            if state.running.len() >= AT_ONCE || (busy && in_flight + front.cost > self.limit) {
                return;
            }
            let Some(offer) = state.waiting.pop_front() else {
                return;
            };
            let inner = Arc::clone(self);
            let id = offer.job_id.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = offer.create.await {
                    inner.metrics.inc_step_error(&e);
                    tracing::warn!(job_id = %offer.job_id, error = %e, "create failed; retrying next pass");
                }
                let mut state = inner.state();
                state.running.remove(&offer.job_id);
                inner.start_next(&mut state);
            });
            state.running.insert(id, (offer.cost, task.abort_handle()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::oneshot;

    /// A create of `id` that ends when its sender is used (or dropped), and records its start.
    fn held(
        id: &str,
        cost: usize,
        started: &Arc<Mutex<Vec<String>>>,
    ) -> (Offer, oneshot::Sender<()>) {
        let (tx, rx) = oneshot::channel::<()>();
        let (started, name) = (started.clone(), id.to_owned());
        let create = Box::pin(async move {
            started.lock().unwrap().push(name);
            let _ = rx.await;
            Ok(())
        });
        (
            Offer {
                job_id: id.to_owned(),
                cost,
                create,
            },
            tx,
        )
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        for _ in 0..200 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("never: {what}");
    }

    #[test]
    fn a_quarter_second_of_the_clients_rate_is_in_flight_and_never_fewer_than_four() {
        assert_eq!(
            [1, 20, 50, 200, 500].map(in_flight_limit),
            [4, 5, 12, 50, 125]
        );
    }

    #[tokio::test]
    async fn a_create_runs_beside_the_caller_once_and_counts_its_requests_until_it_ends() {
        let creates = Creates::new(10, Arc::new(Metrics::default()));
        let started = Arc::new(Mutex::new(Vec::new()));
        let (offer, tx) = held("j", 3, &started);
        assert_eq!(creates.offer(vec![offer]), 0);
        assert!(creates.is_running("j"));
        assert_eq!(creates.in_flight(), 3);
        // Offered again while it runs: not started twice.
        let (again, _tx2) = held("j", 5, &started);
        assert_eq!(creates.offer(vec![again]), 0);
        assert_eq!(creates.in_flight(), 3);
        let _ = tx.send(());
        until("j ended", || !creates.is_running("j")).await;
        assert_eq!(creates.in_flight(), 0);
        assert_eq!(*started.lock().unwrap(), vec!["j".to_owned()]);
    }

    #[tokio::test]
    async fn a_freed_slot_goes_at_once_to_the_front_of_the_latest_order() {
        // Room for two requests: a-0 and a-1 run, a-2.. wait.
        let creates = Creates::new(2, Arc::new(Metrics::default()));
        let started = Arc::new(Mutex::new(Vec::new()));
        let mut senders = HashMap::new();
        let mut offers = Vec::new();
        for i in 0..5 {
            let (o, tx) = held(&format!("a-{i}"), 1, &started);
            offers.push(o);
            senders.insert(format!("a-{i}"), tx);
        }
        assert_eq!(creates.offer(offers), 3);
        assert_eq!(creates.running_jobs(), 2);
        // The next pass puts another tenant's job first.
        let (b, b_tx) = held("b-0", 1, &started);
        let mut next = vec![b];
        for i in 2..5 {
            let (o, tx) = held(&format!("a-{i}"), 1, &started);
            next.push(o);
            senders.insert(format!("a-{i}"), tx);
        }
        assert_eq!(creates.offer(next), 4);
        // One of a's creates ends: b's starts then, without another offer.
        let _ = senders.remove("a-0").map(|tx| tx.send(()));
        until("b-0 started", || creates.is_running("b-0")).await;
        assert_eq!(
            *started.lock().unwrap(),
            vec!["a-0".to_owned(), "a-1".to_owned(), "b-0".to_owned()]
        );
        assert_eq!(creates.waiting(), 3);
        let _ = b_tx.send(());
        until("a-2 started", || creates.is_running("a-2")).await;
        assert!(!creates.is_running("a-3"), "a-1 still holds the other slot");
    }

    #[tokio::test]
    async fn one_create_runs_however_costly_and_the_limit_holds_the_rest() {
        let creates = Creates::new(2, Arc::new(Metrics::default()));
        let started = Arc::new(Mutex::new(Vec::new()));
        let (big, big_tx) = held("big", 5, &started);
        let (small, _small_tx) = held("small", 1, &started);
        assert_eq!(creates.offer(vec![big, small]), 1);
        assert!(creates.is_running("big") && !creates.is_running("small"));
        let _ = big_tx.send(());
        until("small started", || creates.is_running("small")).await;
    }

    #[tokio::test]
    async fn a_failed_create_is_counted_and_frees_its_slot() {
        let metrics = Arc::new(Metrics::default());
        let creates = Creates::new(1, metrics.clone());
        let started = Arc::new(Mutex::new(Vec::new()));
        let failing = Offer {
            job_id: "f".into(),
            cost: 1,
            create: Box::pin(async { Err(crate::error::Error::LoopEnded("a test create")) }),
        };
        let (next, _tx) = held("n", 1, &started);
        creates.offer(vec![failing, next]);
        until("n started after f failed", || creates.is_running("n")).await;
        assert!(
            metrics
                .render()
                .lines()
                .any(|l| l.starts_with("tuneplane_step_errors_total{cause=\"other\"} 1")),
            "{}",
            metrics.render()
        );
    }

    #[tokio::test]
    async fn stopping_aborts_what_is_in_flight_and_drops_what_waits() {
        let creates = Creates::new(1, Arc::new(Metrics::default()));
        let started = Arc::new(Mutex::new(Vec::new()));
        let (a, a_tx) = held("a", 1, &started);
        let (b, _b_tx) = held("b", 1, &started);
        creates.offer(vec![a, b]);
        creates.abort_all();
        assert_eq!((creates.in_flight(), creates.waiting()), (0, 0));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(a_tx.is_closed());
        // b waited for a's slot and was dropped: it never starts.
        assert!(!started.lock().unwrap().contains(&"b".to_owned()));
    }
}
