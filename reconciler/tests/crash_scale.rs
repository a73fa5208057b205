//! Crash test at scale: 200 jobs of every kind (CPU Pods, GPU RayJobs on one or two series, gang
//! jobs that make the rest queue, failing images, stop requests) run through their whole life while
//! the reconciler is killed (its task dropped, the Lease not released) after a seeded random
//! lifetime and restarted, over and over. Afterwards every job is terminal in the state it must
//! reach, was admitted once, has its logs archive, every workload is gone and none was created
//! twice.
//!
//! The seed is printed; `TUNEPLANE_CRASH_SEED=<n>` replays a run's kill schedule (the timing of
//! the machine still varies). Most restarts keep the identity (a pod coming back under its name),
//! renew their own Lease at once and so race with whatever the killed one had in flight; one in
//! five comes back under a new identity (a replacement pod) and must wait for the Lease to expire.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod scale;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use scale::{Kind, Rng, Run};

const JOBS: usize = 200;
const WAVES: usize = 4;
/// Between waves of submissions.
const WAVE_GAP: Duration = Duration::from_secs(2);
/// The kill phase ends after this many kills or this long, whichever comes first.
const MAX_KILLS: usize = 150;
const KILL_PHASE: Duration = Duration::from_secs(30);
/// A reconciler lives this many milliseconds (uniform) before it is killed.
const LIFETIME_MS: (u64, u64) = (20, 700);
/// One restart in this many comes back under a new identity.
const NEW_IDENTITY_ONE_IN: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_jobs_survive_a_reconciler_killed_at_random_points() {
    let seed = scale::seed(0x7E57_C0DE);
    println!("crash_scale: seed {seed} (TUNEPLANE_CRASH_SEED={seed} replays the kill schedule)");
    let mut rng = Rng::new(seed);
    let mut run = Run::start("s", JOBS, WAVES, WAVE_GAP).await;
    let started = run.started;
    let mut kills = 0usize;
    let mut identities = 1usize;
    let mut lifetimes_ms = 0u64;
    let (mut admissions, mut retries, mut orphans, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let mut tally = |ctx: &tuneplane_reconciler::Ctx| {
        let text = ctx.metrics.render();
        let (kube, store, other) = ctx.metrics.step_errors();
        admissions += ctx.metrics.admissions();
        retries += ctx.metrics.api_retries();
        orphans += scale::metric(&text, "tuneplane_orphans_deleted_total");
        errors += kube + store + other;
    };
    loop {
        run.submit_due_waves().await;
        let done = run.all_submitted() && run.active().await == 0;
        if done || kills >= MAX_KILLS || started.elapsed() >= KILL_PHASE {
            break;
        }
        let lifetime = rng.range(LIFETIME_MS.0, LIFETIME_MS.1);
        if kills > 0 && rng.range(1, NEW_IDENTITY_ONE_IN) == 1 {
            identities += 1;
        }
        let identity = format!("crashy-{identities}");
        let (task, ctx) = run.h.reconciler(test_config(&identity)).await;
        tokio::time::sleep(Duration::from_millis(lifetime)).await;
        task.abort();
        let _ = task.await;
        tally(&ctx);
        kills += 1;
        lifetimes_ms += lifetime;
    }
    let killed_at = started.elapsed();
    let left_after_kills = run.active().await;
    // Every wave was submitted while reconcilers were being killed.
    assert!(
        run.all_submitted(),
        "the kill phase ended before every wave was submitted"
    );
    assert!(
        kills >= 20,
        "only {kills} kills: the test did not test much"
    );

    // One last reconciler runs undisturbed and finishes whatever is left.
    let (task, ctx) = run
        .h
        .reconciler(test_config(&format!("crashy-{identities}")))
        .await;
    let outcome = run.check().await;
    task.abort();
    let _ = task.await;
    tally(&ctx);

    let kinds: BTreeMap<Kind, usize> = run.jobs.iter().fold(BTreeMap::new(), |mut m, (_, k)| {
        *m.entry(*k).or_insert(0) += 1;
        m
    });
    println!(
        "crash_scale: seed {seed}: {JOBS} jobs {kinds:?}; {kills} kills (mean lifetime {} ms, \
         {identities} identities) in \
         {:.1} s, {left_after_kills} jobs left for the last reconciler; finished after {:.1} s; \
         final states {:?}; {} workloads created; admissions counted {admissions}; orphans deleted {orphans}; API retries \
         {retries}; failed steps {errors}",
        lifetimes_ms / kills.max(1) as u64,
        killed_at.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        outcome.by_state,
        outcome.workloads,
    );
}
