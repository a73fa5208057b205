//! Admission planning at scale: one `plan_admissions` round over a mixed queue (1–4 pools per job,
//! 1–16 nodes per pool, four GPU series plus some CPU-only jobs, seven priorities) against a fleet of
//! GPU nodes that is already partly busy, on one thread. Issue 8 target: 10,000 jobs × 1,000 nodes
//! under 20 ms (Armada's scheduler needs ~173 ms per cycle for 3,200 jobs); 100,000 × 5,000 shows
//! how the cost grows. Issue 15 target: 10,000 jobs of 50 tenants, every tenant with a quota per
//! series (a third of them borrowing, weights 1-3) and some jobs already running, × 1,000 nodes
//! under 20 ms. Run with `cargo bench -p tuneplane-core --bench admission`; prints figures (median
//! and best of several rounds), asserts none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location

use std::time::Instant;

use tuneplane_core::admission::{Reservation, plan_admissions};
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::ids::JobId;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::spec::{Deadlines, JobSpec, Pool};

const SERIES: [&str; 4] = ["h200", "h100", "l40s", "a10g"];

/// Deterministic xorshift, so every run plans the same queue.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `nodes` GPU nodes of 8 GPUs in four series; a third idle, the rest partly used.
fn fleet(nodes: usize) -> CapacitySnapshot {
    let nodes = (0..nodes)
        .map(|i| NodeCapacity {
            name: format!("node-{i:05}"),
            series: Some(SERIES[i % SERIES.len()].to_owned()),
            gpus: 8,
            gpus_capacity: 8,
            gpus_used: (i % 3) as u32 * 2,
            cpus: 192.0,
            cpus_used: (i % 3) as f64 * 16.0,
            memory_gb: 2048.0,
            memory_gb_used: (i % 3) as f64 * 128.0,
            ready: i % 97 != 0,
            cordoned: i % 89 == 0,
            ..Default::default()
        })
        .collect();
    CapacitySnapshot::from_nodes(0, nodes)
}

fn pool(rng: &mut Rng, k: usize, series: Option<&str>) -> Pool {
    let gpu = series.is_some();
    Pool {
        name: format!("p{k}"),
        series: series.map(str::to_owned),
        nodes: if gpu { 1 + rng.below(16) as u32 } else { 1 },
        gpus_per_node: if gpu {
            [1, 2, 4, 8][rng.below(4) as usize]
        } else {
            0
        },
        cpus: 1.0 + rng.below(32) as f64,
        memory_gb: 4.0 + rng.below(256) as f64,
    }
}

/// `jobs` queued jobs: 5% CPU-only, the rest 1–4 GPU pools over random series, 1–16 nodes each.
fn queue(jobs: usize) -> Vec<JobRecord> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..jobs)
        .map(|i| {
            let pools = if rng.below(20) == 0 {
                vec![pool(&mut rng, 0, None)]
            } else {
                let count = 1 + rng.below(4) as usize;
                (0..count)
                    .map(|k| {
                        let s = SERIES[rng.below(SERIES.len() as u64) as usize];
                        pool(&mut rng, k, Some(s))
                    })
                    .collect()
            };
            let spec = JobSpec {
                name: "bench".into(),
                plugin: "custom/custom".into(),
                image: "img".into(),
                entrypoint: "true".into(),
                env: Default::default(),
                pools,
                deadlines: Deadlines {
                    pre_running_seconds: 600,
                    run_seconds: 3600,
                    grace_seconds: 120,
                },
                retries: Default::default(),
                checkpoints: Default::default(),
                priority: rng.below(7) as i32,
                preemptible: true,
                array: None,
                depends_on: Vec::new(),
                labels: Default::default(),
                namespace: "ns".into(),
                platform_version: "0".into(),
                notify: Vec::new(),
            };
            JobRecord::new_queued(
                format!("job-{i:06}").parse().unwrap(),
                "t".parse().unwrap(),
                spec,
                "ab",
                i as i64,
            )
        })
        .collect()
}

/// A few admitted-but-unbound jobs, as a real pass has.
fn reservations(count: usize) -> Vec<Reservation> {
    (0..count)
        .map(|i| Reservation {
            job_id: JobId::parse(format!("r{i}")).expect("a valid id"),
            series: Some(SERIES[i % SERIES.len()].to_owned()),
            gpus: 2,
            cpus: 8.0,
            memory_gb: 64.0,
            machines: 2,
            nodes: Vec::new(),
        })
        .collect()
}

/// Spreads `queue` over `tenants` tenants, marks every tenth job running (it holds its GPUs), and
/// gives every tenant a quota per series (a third borrowing) and a weight of 1-3.
fn tenants(mut q: Vec<JobRecord>, tenants: usize) -> (Vec<JobRecord>, Vec<TenantQuota>) {
    for (i, j) in q.iter_mut().enumerate() {
        j.tenant = format!("team-{:02}", i % tenants).parse().unwrap();
        if i % 10 == 0 {
            j.state = JobState::Running;
        }
    }
    let quotas = (0..tenants)
        .map(|t| {
            let mut quota = TenantQuota::unlimited(&format!("team-{t:02}").parse().unwrap());
            quota.weight = 1.0 + (t % 3) as f64;
            for s in SERIES {
                quota.set_gpu_limit(s, 64 + 32 * (t % 4) as u32, t % 3 == 0);
            }
            quota
        })
        .collect();
    (q, quotas)
}

/// The CPU model and the load average, so that figures from different machines and spells can be
/// told apart.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned());
    format!("{model}, load {load}")
}

/// With `ADMISSION_DIGEST` set, a digest of the whole plan (every admission with its nodes, every
/// waiting job with its reason and message), so that a change meant to be faster can show it
/// decides exactly as the code before it did: run both and compare.
fn digest(plan: &tuneplane_core::admission::AdmissionPlan) -> String {
    use std::hash::{Hash, Hasher};
    if std::env::var_os("ADMISSION_DIGEST").is_none() {
        return String::new();
    }
    // SipHash with fixed keys: the same plan gives the same digest in every build.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    format!("{:?}", plan.admit).hash(&mut h);
    format!("{:?}", plan.waiting).hash(&mut h);
    format!(", plan digest {:016x}", h.finish())
}

fn main() {
    println!(
        "plan_admissions, one thread (median / best of the rounds) on {}:",
        machine()
    );
    for (jobs, nodes, rounds, tenant_count) in [
        (3_200, 1_000, 21, 0),
        (10_000, 1_000, 21, 0),
        (10_000, 1_000, 21, 50),
        (10_000, 5_000, 11, 0),
        (100_000, 5_000, 5, 0),
        // The Armada-scale case (issue 49): 10,000 nodes, 100,000 queued jobs of 500 tenants
        // with quotas.
        (100_000, 10_000, 5, 500),
    ] {
        // `cargo bench --bench admission -- 100000` runs only the cases of that many jobs;
        // `10000x1000` only the one-tenant case of that size; `10000/50` only the case with 50
        // tenants.
        let only: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        let wanted = |o: &String| {
            *o == jobs.to_string()
                || (tenant_count == 0 && *o == format!("{jobs}x{nodes}"))
                || (tenant_count > 0 && *o == format!("{jobs}/{tenant_count}"))
        };
        if !only.is_empty() && !only.iter().any(wanted) {
            continue;
        }
        let (q, quotas) = if tenant_count == 0 {
            (queue(jobs), Vec::new())
        } else {
            tenants(queue(jobs), tenant_count)
        };
        let (cap, res) = (fleet(nodes), reservations(nodes / 20));
        let mut times = Vec::new();
        let mut plan = plan_admissions(&q, &cap, &res, &quotas); // warm-up
        for _ in 0..rounds {
            let start = Instant::now();
            plan = plan_admissions(&q, &cap, &res, &quotas);
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let held = plan
            .waiting
            .iter()
            .filter(|w| w.reason == tuneplane_core::job::PendingReason::QuotaExceeded)
            .count();
        let who = if tenant_count == 0 {
            "one tenant, no quotas".to_owned()
        } else {
            format!("{tenant_count} tenants with quotas, {held} held by quota")
        };
        println!(
            "  {jobs:>7} jobs x {nodes:>5} nodes ({who}): median {:>7.2} ms, best {:>7.2} ms ({} admitted, {} waiting){}",
            times[times.len() / 2],
            times[0],
            plan.admit.len(),
            plan.waiting.len(),
            digest(&plan)
        );
    }
}
