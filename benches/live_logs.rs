//! Live logs at fleet scale: how many log reads per second the reconciler sends toward the API
//! server, and how many blob writes it makes, with 10,000 running jobs of which 100 are followed,
//! and one-off readers (a plain `tuneplane logs` or `status`) looking at jobs as they come.
//!
//! The reconciler decides whom to read with `tuneplane_core::live::{Budget, plan_reads}` at the
//! end of each pass, and the API marks a one-off reader's interest with
//! `tuneplane_core::live::readers::mark`; this bench runs exactly that code over a simulated
//! clock (a pass every 3 s, the production default, for 30 simulated minutes), counting every
//! read it plans and the blob writes those reads cause in the worst case (every read finds new
//! output: one segment per container and one segment list per job; a read that answers a reader
//! and finds nothing new writes the list alone, fewer). A reader looks at a job drawn at random
//! (followed or not); its wait is the simulated time from its look to the pass that reads the
//! job (the read itself, a fraction of a second, comes on top), and a reader whose job is not
//! read within the API's wait (`READER_WAIT_MS`) gets the output shipped so far. It also times
//! one planning step over the 10,000 candidates (wall time, the CPU the reconciler spends
//! deciding).
//!
//! Run: `cargo bench --bench live_logs`. Sizes: `TUNEPLANE_BENCH_RUNNING` (default 10,000),
//! `TUNEPLANE_BENCH_FOLLOWED` (100), `TUNEPLANE_BENCH_CONTAINERS` (log reads per job round, 1),
//! `TUNEPLANE_BENCH_READERS_PER_SECOND` (one-off readers, 1),
//! `TUNEPLANE_BENCH_READS_PER_SECOND` (the budget, default the production one). Prints figures,
//! asserts none.

#![allow(missing_docs)]

use std::time::Instant;

use tuneplane_core::live::readers::{Marks, READER_WAIT_MS, Reader, mark, owed};
use tuneplane_core::live::{Budget, Candidate, LiveSettings, plan_reads};

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A deterministic stream of job indexes (a 64-bit LCG), so runs compare.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }
}

/// One job's state in the simulation.
#[derive(Clone, Default)]
struct Sim {
    last_read: i64,
    marks: Marks,
    answered: Option<i64>,
    /// Looks of readers not answered yet (their times).
    waiting: Vec<i64>,
}

fn percentile(sorted: &[i64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() {
    let running: usize = env_num("TUNEPLANE_BENCH_RUNNING", 10_000);
    let followed: usize = env_num("TUNEPLANE_BENCH_FOLLOWED", 100);
    let containers: u32 = env_num("TUNEPLANE_BENCH_CONTAINERS", 1);
    let readers_per_second: f64 = env_num("TUNEPLANE_BENCH_READERS_PER_SECOND", 1.0);
    let mut settings = LiveSettings::default();
    settings.reads_per_second = env_num(
        "TUNEPLANE_BENCH_READS_PER_SECOND",
        settings.reads_per_second,
    );
    let pass_ms: i64 = 3_000;
    let minutes: i64 = 30;

    let ids: Vec<String> = (0..running).map(|i| format!("j-{i:05}")).collect();
    // Jobs began running spread over the last background interval, as in a steady fleet.
    let mut jobs: Vec<Sim> = (0..running)
        .map(|i| Sim {
            last_read: -(i as i64 * settings.background_interval_ms / running.max(1) as i64),
            ..Sim::default()
        })
        .collect();
    let always_followed = |i: usize| i < followed;

    let mut draw = Draw(42);
    let mut budget = Budget::new();
    let mut reads: u64 = 0;
    let mut blob_writes: u64 = 0;
    let mut followed_gap_max: i64 = 0;
    let mut background_gap_max: i64 = 0;
    let mut reader_waits: Vec<i64> = Vec::new();
    let mut readers_late: u64 = 0;
    let mut record_writes: u64 = 0;
    let mut plan_ns: Vec<u128> = Vec::new();
    let end = minutes * 60_000;
    // The first background interval warms up (jobs all start "just read"); measure after it.
    let warm = settings.background_interval_ms * 2;
    let mut looks_due = 0.0;
    let mut now = 0;
    while now < end {
        // The readers who looked since the last pass, spread over it.
        looks_due += readers_per_second * pass_ms as f64 / 1000.0;
        let looks = looks_due.floor() as i64;
        looks_due -= looks as f64;
        for k in 0..looks {
            let at = now - pass_ms + (k + 1) * pass_ms / (looks + 1);
            let job = &mut jobs[draw.below(running)];
            if let Some(m) = mark(job.marks, Reader::OneOff, at) {
                job.marks = m;
                record_writes += u64::from(now >= warm);
            }
            // A look within a second of another shares its want; when a read answered that one
            // already, the API answers at once.
            if job
                .marks
                .wanted_at_ms
                .is_some_and(|w| job.answered.is_some_and(|a| a >= w))
            {
                if at >= warm {
                    reader_waits.push(0);
                }
                continue;
            }
            job.waiting.push(at);
        }
        let candidates: Vec<Candidate<'_>> = ids
            .iter()
            .zip(&jobs)
            .enumerate()
            .map(|(i, (id, j))| Candidate {
                job_id: id.as_str(),
                followed: always_followed(i) || j.marks.followed_until_ms.is_some_and(|t| t > now),
                waited: owed(j.marks.wanted_at_ms, j.answered, now).is_some(),
                last_read_ms: j.last_read,
                reads: containers,
            })
            .collect();
        let t = Instant::now();
        let tokens = budget.refill(now, &settings, containers);
        let (chosen, used) = plan_reads(&candidates, now, &settings, tokens);
        budget.spend(used);
        plan_ns.push(t.elapsed().as_nanos());
        let chosen: Vec<usize> = chosen
            .into_iter()
            .map(|id| id[2..].parse().unwrap_or(0))
            .collect();
        drop(candidates);
        for i in chosen {
            let job = &mut jobs[i];
            let gap = now - job.last_read;
            if now >= warm {
                reads += u64::from(containers);
                blob_writes += u64::from(containers) + 1;
                if always_followed(i) {
                    followed_gap_max = followed_gap_max.max(gap);
                } else {
                    background_gap_max = background_gap_max.max(gap);
                }
            }
            job.last_read = now;
            // The read answers every look before it (the API wrote their want before the pass).
            job.answered = job.marks.wanted_at_ms.max(job.answered);
            for at in job.waiting.drain(..) {
                if at >= warm {
                    // Past the API's wait, the reader had the output shipped so far by then.
                    reader_waits.push((now - at).min(READER_WAIT_MS));
                    readers_late += u64::from(now - at > READER_WAIT_MS);
                }
            }
        }
        // A reader not answered within the API's wait has had its answer (the output shipped so
        // far); it waits no longer.
        for job in &mut jobs {
            job.waiting.retain(|at| {
                let late = now - at > READER_WAIT_MS;
                if late && *at >= warm {
                    readers_late += 1;
                    reader_waits.push(READER_WAIT_MS);
                }
                !late
            });
        }
        now += pass_ms;
    }
    // Jobs never read in the window count with their whole wait.
    for (i, j) in jobs.iter().enumerate() {
        let gap = end - j.last_read;
        if always_followed(i) {
            followed_gap_max = followed_gap_max.max(gap);
        } else {
            background_gap_max = background_gap_max.max(gap);
        }
    }
    let secs = (end - warm) as f64 / 1000.0;
    plan_ns.sort_unstable();
    reader_waits.sort_unstable();
    let median_ms = plan_ns[plan_ns.len() / 2] as f64 / 1e6;
    let max_ms = plan_ns.last().copied().unwrap_or(0) as f64 / 1e6;
    println!(
        "live logs: {running} running jobs ({containers} container(s) each), {followed} followed, \
         {readers_per_second} one-off readers/s; budget {} reads/s; followed every {} s, others \
         every {} s; pass every {} s; {} simulated s measured",
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
        "  one-off readers: {} looks, {:.2} job-record writes/s; wait for the answering read: \
         median {:.1} s, p99 {:.1} s, max {:.1} s; {} not answered within {} s",
        reader_waits.len(),
        record_writes as f64 / secs,
        percentile(&reader_waits, 0.5),
        percentile(&reader_waits, 0.99),
        percentile(&reader_waits, 1.0),
        readers_late,
        READER_WAIT_MS / 1000
    );
    println!(
        "  planning one pass over {running} jobs: median {median_ms:.2} ms, max {max_ms:.2} ms"
    );
}
