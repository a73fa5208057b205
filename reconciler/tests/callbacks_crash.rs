//! Callbacks under the crash harness: 100 jobs of every kind name a callback to a receiver that
//! fails one delivery in five, while the reconciler (and with it the sender) is killed after a
//! seeded random lifetime and restarted, over and over. Afterwards every state change each job
//! went through (its platform events, written with the outbox entries) arrived once after
//! deduplication, signed, and in the order the changes happened.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod receiver;
mod scale;

use std::time::Duration;

use common::*;
use receiver::{Policy, Receiver, by_job};
use scale::{Rng, Run};
use tuneplane_core::callback::outbox::{event_id, kind_of};
use tuneplane_core::callback::{EventKind, Format, Notify};
use tuneplane_core::store::EventQuery;
use tuneplane_reconciler::callback::CallbackSettings;

const JOBS: usize = 100;
const WAVES: usize = 4;
const WAVE_GAP: Duration = Duration::from_secs(2);
const MAX_KILLS: usize = 120;
const KILL_PHASE: Duration = Duration::from_secs(25);
const LIFETIME_MS: (u64, u64) = (20, 700);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_jobs_lose_no_callback_while_the_reconciler_is_killed_at_random_points() {
    let seed = scale::seed(0xCA11_BAC5);
    println!(
        "callbacks_crash: seed {seed} (TUNEPLANE_CRASH_SEED={seed} replays the kill schedule)"
    );
    let mut rng = Rng::new(seed);
    let rx = Receiver::start(
        Policy {
            fail_first: 0,
            fail_one_in: 5,
            max_delay: Duration::from_millis(20),
        },
        seed,
    )
    .await;
    let mut run = Run::start("k", JOBS, WAVES, WAVE_GAP).await;
    run.notify = vec![Notify {
        url: rx.url("hook"),
        events: EventKind::ALL.to_vec(),
        format: Format::Json,
    }];
    let config = |identity: &str| {
        let mut c = test_config(identity);
        c.callbacks = CallbackSettings {
            allow_loopback: true,
            interval: Duration::from_millis(50),
            ..CallbackSettings::default()
        };
        c
    };
    let started = run.started;
    let mut kills = 0usize;
    loop {
        run.submit_due_waves().await;
        let done = run.all_submitted() && run.active().await == 0;
        if done || kills >= MAX_KILLS || started.elapsed() >= KILL_PHASE {
            break;
        }
        let (task, _ctx) = run.h.reconciler(config("crashy")).await;
        tokio::time::sleep(Duration::from_millis(
            rng.range(LIFETIME_MS.0, LIFETIME_MS.1),
        ))
        .await;
        task.abort();
        let _ = task.await;
        kills += 1;
    }
    assert!(
        run.all_submitted(),
        "the kill phase ended before every wave was submitted"
    );
    assert!(
        kills >= 10,
        "only {kills} kills: the test did not test much"
    );

    // One last reconciler runs undisturbed until every job ended and the outbox is empty.
    let (task, _ctx) = run.h.reconciler(config("crashy")).await;
    run.check().await;
    wait_for(90, "the outbox drained", || async {
        run.h
            .jobs
            .list_outbox(10)
            .await
            .ok()?
            .is_empty()
            .then_some(())
    })
    .await;
    task.abort();

    let secret = run
        .h
        .jobs
        .get_callback_secret(&"acme".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let per_job = by_job(&rx.accepted_once(&secret.secret));
    let mut broken = Vec::new();
    let mut delivered = 0usize;
    for (id, _) in &run.jobs {
        let events = run
            .h
            .jobs
            .list_events(id, &EventQuery::first(500))
            .await
            .unwrap()
            .items;
        let mut changes: Vec<(i64, String)> = events
            .iter()
            .filter(|e| kind_of(e).is_some())
            .map(|e| (e.at_ms, event_id(id, &e.key)))
            .collect();
        changes.sort();
        let got = per_job.get(id).cloned().unwrap_or_default();
        delivered += got.len();
        let mut got_ids: Vec<String> = got.iter().map(|g| g.id.to_string()).collect();
        // Arrival order follows the changes' times.
        let times: Vec<i64> = got
            .iter()
            .map(|g| g.json()["at_ms"].as_i64().unwrap_or_default())
            .collect();
        if times.windows(2).any(|w| w[0] > w[1]) {
            broken.push(format!("{id}: out of order: {times:?}"));
        }
        got_ids.sort();
        let mut want: Vec<String> = changes.into_iter().map(|(_, id)| id).collect();
        want.sort();
        if got_ids != want {
            broken.push(format!("{id}: got {got_ids:?}, want {want:?}"));
        }
    }
    println!(
        "callbacks_crash: seed {seed}: {kills} kills; {} requests, {delivered} events delivered once",
        rx.got().len()
    );
    assert!(
        broken.is_empty(),
        "{} jobs broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
    assert!(delivered >= JOBS * 2, "too few events: {delivered}");
}
