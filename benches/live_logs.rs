//! Live logs at fleet scale: how many log reads per second the reconciler sends toward the API
//! server, and how many blob writes it makes, with 10,000 running jobs of which 100 are followed.
//!
//! The reconciler decides whom to read with `tuneplane_core::live::{Budget, plan_reads}` at the
//! end of each pass; this bench runs exactly that code over a simulated clock (a pass every 3 s,
//! the production default, for 30 simulated minutes), counting every read it plans and the blob
//! writes those reads cause in the worst case (every read finds new output: one segment per
//! container and one segment list per job). It also times one planning step over the 10,000
//! candidates (wall time, the CPU the reconciler spends deciding).
//!
//! Run: `cargo bench --bench live_logs`. Sizes: `TUNEPLANE_BENCH_RUNNING` (default 10,000),
//! `TUNEPLANE_BENCH_FOLLOWED` (100), `TUNEPLANE_BENCH_CONTAINERS` (log reads per job round, 1),
//! `TUNEPLANE_BENCH_READS_PER_SECOND` (the budget, default the production one). Prints figures,
//! asserts none.

#![allow(missing_docs)]

use std::collections::HashMap;
use std::time::Instant;

use tuneplane_core::live::{Budget, Candidate, LiveSettings, plan_reads};

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let running: usize = env_num("TUNEPLANE_BENCH_RUNNING", 10_000);
    let followed: usize = env_num("TUNEPLANE_BENCH_FOLLOWED", 100);
    let containers: u32 = env_num("TUNEPLANE_BENCH_CONTAINERS", 1);
    let mut settings = LiveSettings::default();
    settings.reads_per_second = env_num(
        "TUNEPLANE_BENCH_READS_PER_SECOND",
        settings.reads_per_second,
    );
    let pass_ms: i64 = 3_000;
    let minutes: i64 = 30;

    let ids: Vec<String> = (0..running).map(|i| format!("j-{i:05}")).collect();
    // Jobs began running spread over the last background interval, as in a steady fleet.
    let mut last_read: HashMap<&str, i64> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let began = -(i as i64 * settings.background_interval_ms / running.max(1) as i64);
            (id.as_str(), began)
        })
        .collect();
    let is_followed = |i: usize| i < followed;

    let mut budget = Budget::new();
    let mut reads: u64 = 0;
    let mut blob_writes: u64 = 0;
    let mut followed_gap_max: i64 = 0;
    let mut background_gap_max: i64 = 0;
    let mut plan_ns: Vec<u128> = Vec::new();
    let end = minutes * 60_000;
    // The first background interval warms up (jobs all start "just read"); measure after it.
    let warm = settings.background_interval_ms * 2;
    let mut now = 0;
    while now < end {
        let candidates: Vec<Candidate<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| Candidate {
                job_id: id.as_str(),
                followed: is_followed(i),
                last_read_ms: last_read[id.as_str()],
                reads: containers,
            })
            .collect();
        let t = Instant::now();
        let tokens = budget.refill(now, &settings, containers);
        let (chosen, used) = plan_reads(&candidates, now, &settings, tokens);
        budget.spend(used);
        plan_ns.push(t.elapsed().as_nanos());
        for id in chosen {
            let gap = now - last_read[id];
            let i: usize = id[2..].parse().unwrap_or(0);
            if now >= warm {
                reads += u64::from(containers);
                blob_writes += u64::from(containers) + 1;
                if is_followed(i) {
                    followed_gap_max = followed_gap_max.max(gap);
                } else {
                    background_gap_max = background_gap_max.max(gap);
                }
            }
            last_read.insert(id, now);
        }
        now += pass_ms;
    }
    // Jobs never read in the window count with their whole wait.
    for (i, id) in ids.iter().enumerate() {
        let gap = end - last_read[id.as_str()];
        if is_followed(i) {
            followed_gap_max = followed_gap_max.max(gap);
        } else {
            background_gap_max = background_gap_max.max(gap);
        }
    }
    let secs = (end - warm) as f64 / 1000.0;
    plan_ns.sort_unstable();
    let median_ms = plan_ns[plan_ns.len() / 2] as f64 / 1e6;
    let max_ms = plan_ns.last().copied().unwrap_or(0) as f64 / 1e6;
    println!(
        "live logs: {running} running jobs ({containers} container(s) each), {followed} followed; \
         budget {} reads/s; followed every {} s, others every {} s; pass every {} s; {} simulated s measured",
        settings.reads_per_second,
        settings.followed_interval_ms / 1000,
        settings.background_interval_ms / 1000,
        pass_ms / 1000,
        secs
    );
    println!(
        "  log reads toward the API server: {:.1}/s (budget {})",
        reads as f64 / secs,
        settings.reads_per_second
    );
    println!(
        "  blob writes (worst case, new output at every read): {:.1}/s",
        blob_writes as f64 / secs
    );
    println!(
        "  longest wait between reads: followed {:.1} s, others {:.1} s",
        followed_gap_max as f64 / 1000.0,
        background_gap_max as f64 / 1000.0
    );
    println!(
        "  planning one pass over {running} jobs: median {median_ms:.2} ms, max {max_ms:.2} ms"
    );
}
