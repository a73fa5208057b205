//! Lease failover under load: two reconcilers (distinct identities, a 1 s Lease) while 100 jobs of
//! every kind flow through. The leader is killed (its task dropped, the Lease not released) after
//! a seeded random time and a fresh replica with a new identity takes its place, so two run at all
//! times. Never do two live replicas believe they lead at once; afterwards every job is terminal
//! in its expected state, admitted once, archived, every workload is gone and none was created
//! twice. The failovers and takeover gaps (kill → the new leader's first pass) are printed, not
//! asserted: they are wall time.
//!
//! `TUNEPLANE_CRASH_SEED=<n>` replays a run's kill schedule.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod scale;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use scale::{Rng, Run};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tuneplane_reconciler::Ctx;

const JOBS: usize = 100;
const WAVES: usize = 4;
const WAVE_GAP: Duration = Duration::from_millis(1500);
/// The loop keeps killing leaders until at least this many failovers happened...
const MIN_FAILOVERS: usize = 4;
/// ...of which at least this many while jobs were still active.
const MIN_UNDER_LOAD: usize = 3;
/// ...and kills no more than this many.
const MAX_FAILOVERS: usize = 12;
/// A leader leads this many milliseconds (uniform, from its first pass) before it is killed.
const REIGN_MS: (u64, u64) = (300, 1500);
/// Bound of the whole loop.
const LOOP_BOUND: Duration = Duration::from_secs(75);

struct Replica {
    name: String,
    task: JoinHandle<()>,
    ctx: Arc<Ctx>,
}

async fn replica(h: &Harness, n: usize) -> Replica {
    let name = format!("replica-{n}");
    let (task, ctx) = h.reconciler(test_config(&name)).await;
    Replica { name, task, ctx }
}

/// A kill whose successor has not run its first pass yet.
struct Takeover {
    at: Instant,
    /// When a live replica first believed it leads after the kill.
    led: Option<Duration>,
    /// Passes of each live replica at the kill.
    passes: Vec<(String, u64)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_failover_under_load_keeps_one_leader_and_every_job_whole() {
    let seed = scale::seed(0xFA11_0FE5);
    println!("failover_load: seed {seed} (TUNEPLANE_CRASH_SEED={seed} replays the kill schedule)");
    let mut rng = Rng::new(seed);
    let mut run = Run::start("f", JOBS, WAVES, WAVE_GAP).await;
    let started = run.started;

    let mut replicas = vec![replica(&run.h, 0).await, replica(&run.h, 1).await];
    let mut next_replica = 2;
    let mut samples = 0u64;
    let mut gaps: Vec<Duration> = Vec::new();
    let mut lease_gaps: Vec<Duration> = Vec::new();
    let mut pending: Option<Takeover> = None;
    // The current leader's name, when its reign began (its first pass seen) and how long it lasts.
    let mut reign: Option<(String, Instant, Duration)> = None;
    let mut leaders_seen: Vec<String> = Vec::new();
    let mut admissions = 0u64;
    let mut under_load = 0usize;
    loop {
        run.submit_due_waves().await;

        // Never two live replicas that believe they lead.
        let leading: Vec<&Replica> = replicas
            .iter()
            .filter(|r| r.ctx.leadership.is_leader())
            .collect();
        samples += 1;
        assert!(
            leading.len() <= 1,
            "two leaders at once: {:?}",
            leading.iter().map(|r| &r.name).collect::<Vec<_>>()
        );
        let leader = leading
            .first()
            .map(|r| (r.name.clone(), r.ctx.metrics.passes()));

        if let Some(t) = &mut pending
            && let Some((name, passes)) = &leader
        {
            let led = *t.led.get_or_insert_with(|| t.at.elapsed());
            let before = t.passes.iter().find(|(n, _)| n == name).map_or(0, |p| p.1);
            if *passes > before {
                lease_gaps.push(led);
                gaps.push(t.at.elapsed());
                pending = None;
            }
        }
        match (&reign, &leader) {
            (Some((name, _, _)), Some((l, _))) if name == l => {}
            (_, Some((l, passes))) if *passes > 0 => {
                let length = Duration::from_millis(rng.range(REIGN_MS.0, REIGN_MS.1));
                reign = Some((l.clone(), Instant::now(), length));
                leaders_seen.push(l.clone());
            }
            _ => {}
        }

        let done = run.all_submitted() && run.active().await == 0;
        if done && gaps.len() >= MIN_FAILOVERS && pending.is_none() {
            break;
        }
        assert!(
            started.elapsed() < LOOP_BOUND,
            "after {LOOP_BOUND:?}: {} jobs active, {} failovers, takeover pending: {}",
            run.active().await,
            gaps.len(),
            pending.is_some()
        );

        // The leader's reign is over: kill it and start a fresh replica.
        if pending.is_none()
            && gaps.len() < MAX_FAILOVERS
            && let Some((name, since, length)) = &reign
            && since.elapsed() >= *length
            && let Some(pos) = replicas.iter().position(|r| &r.name == name)
        {
            under_load += usize::from(!run.all_submitted() || run.active().await > 0);
            let dead = replicas.swap_remove(pos);
            dead.task.abort();
            let _ = dead.task.await;
            let at = Instant::now();
            admissions += dead.ctx.metrics.admissions();
            replicas.push(replica(&run.h, next_replica).await);
            next_replica += 1;
            pending = Some(Takeover {
                at,
                led: None,
                passes: replicas
                    .iter()
                    .map(|r| (r.name.clone(), r.ctx.metrics.passes()))
                    .collect(),
            });
            reign = None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let loop_time = started.elapsed();

    let outcome = run.check().await;
    for r in &replicas {
        r.task.abort();
        admissions += r.ctx.metrics.admissions();
    }

    assert!(gaps.len() >= MIN_FAILOVERS, "{} failovers", gaps.len());
    assert!(
        under_load >= MIN_UNDER_LOAD,
        "only {under_load} failovers while jobs were active"
    );
    // Standby or fresh replica: someone other than the first leader led after each kill.
    assert!(
        leaders_seen.len() > gaps.len(),
        "leaders {leaders_seen:?} for {} failovers",
        gaps.len()
    );
    let ms: Vec<u128> = gaps.iter().map(Duration::as_millis).collect();
    let lease_ms: Vec<u128> = lease_gaps.iter().map(Duration::as_millis).collect();
    let mean = ms.iter().sum::<u128>() / ms.len().max(1) as u128;
    println!(
        "failover_load: seed {seed}: {JOBS} jobs in {:.1} s; {} failovers ({under_load} while jobs \
         were active), takeover gaps: kill → \
         a replica holds the Lease {lease_ms:?} ms, kill → the new leader's first pass done \
         {ms:?} ms (mean {mean} ms, max {} ms); leaders in turn \
         {leaders_seen:?}; {} replicas started; {samples} leadership samples, never two leaders; \
         final states {:?}; {} workloads created; admissions counted {admissions}",
        loop_time.as_secs_f64(),
        gaps.len(),
        ms.iter().max().copied().unwrap_or(0),
        next_replica,
        outcome.by_state,
        outcome.workloads,
    );
}
