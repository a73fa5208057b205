//! Preemption planning at fleet scale: a full fleet of 1,000 GPU nodes (8 GPUs each, four series)
//! held by 10,000 running jobs of 50 tenants (8,000 one-GPU jobs and 2,000 CPU-only ones beside
//! them), half the tenants borrowing above their limits, and a queue of waiting jobs: 8-GPU jobs of
//! tenants within their limits (reclaim) and high-priority jobs of tenants at their caps
//! (priority). Measures, on one thread, what a pass adds when something needs preempting:
//! `plan_admissions` (the pass's plan, for reference), `preemption_candidates` and
//! `plan_preemptions` (at most 8 preemptions per pass, each victim set searched exactly up to 24
//! candidates on a node set, greedily beyond). Also the case where nothing can preempt (no quotas,
//! one priority): what every pass of a busy fleet without preemption pays. Run with
//! `cargo bench -p tuneplane-core --bench preemption`; prints figures, asserts none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location

use std::collections::HashMap;
use std::time::Instant;

use tuneplane_core::admission::{
    CheckpointSeen, PreemptionRules, plan_admissions, plan_preemptions, preemption_candidates,
};
use tuneplane_core::capacity::{CapacitySnapshot, Holder, NodeCapacity};
use tuneplane_core::job::{JobRecord, JobState, PoolPlacement};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::spec::{Deadlines, JobSpec, Pool};

const SERIES: [&str; 4] = ["h200", "h100", "l40s", "a10g"];
const NOW: i64 = 1_000_000_000;
const NODES: usize = 1_000;
const TENANTS: usize = 50;

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

fn spec(series: Option<&str>, nodes: u32, gpus: u32, priority: i32) -> JobSpec {
    JobSpec {
        name: "bench".into(),
        plugin: "custom/custom".into(),
        image: "img".into(),
        entrypoint: "true".into(),
        env: Default::default(),
        pools: vec![Pool {
            name: "main".into(),
            series: series.map(str::to_owned),
            nodes,
            gpus_per_node: gpus,
            cpus: if series.is_some() { 4.0 } else { 1.0 },
            memory_gb: 16.0,
        }],
        deadlines: Deadlines {
            pre_running_seconds: 600,
            run_seconds: 86_400,
            grace_seconds: 30,
        },
        retries: Default::default(),
        checkpoints: Default::default(),
        priority,
        preemptible: true,
        array: None,
        depends_on: Vec::new(),
        labels: Default::default(),
        namespace: "ns".into(),
        platform_version: "0".into(),
        notify: Vec::new(),
    }
}

fn tenant(i: usize) -> String {
    format!("team-{:02}", i % TENANTS)
}

/// The busy fleet, its running jobs and their newest checkpoints.
fn fleet() -> (CapacitySnapshot, Vec<JobRecord>, HashMap<String, i64>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut nodes: Vec<NodeCapacity> = (0..NODES)
        .map(|i| {
            NodeCapacity::ready(
                &format!("node-{i:05}"),
                Some(SERIES[i % SERIES.len()]),
                8,
                192.0,
                2048.0,
            )
        })
        .collect();
    let mut jobs = Vec::new();
    let mut checkpoints = HashMap::new();
    let place =
        |job: &mut JobRecord, node: usize, gpus: u32, cpus: f64, nodes: &mut Vec<NodeCapacity>| {
            let n = &mut nodes[node];
            n.gpus_used += gpus;
            n.cpus_used += cpus;
            n.memory_gb_used += 16.0;
            n.holders.push(Holder {
                job_id: job.id.clone(),
                gpus,
                cpus,
                memory_gb: 16.0,
            });
            job.placements = vec![PoolPlacement {
                pool: "main".into(),
                nodes: vec![n.name.clone()],
            }];
        };
    for i in 0..10_000 {
        let gpu = i < 8_000;
        let node = if gpu { i / 8 } else { i % NODES };
        let series = gpu.then_some(SERIES[node % SERIES.len()]);
        let mut j = JobRecord::new_queued(
            format!("run-{i:05}").parse().unwrap(),
            tenant(i).parse().unwrap(),
            spec(series, 1, u32::from(gpu), 0),
            "ab",
            NOW - 7_200_000,
        );
        j.state = JobState::Running;
        let started = NOW - 3_600_000 + rng.below(3_000_000) as i64;
        j.admitted_at_ms = Some(started - 10_000);
        j.running_at_ms = Some(started);
        place(
            &mut j,
            node,
            u32::from(gpu),
            if gpu { 4.0 } else { 1.0 },
            &mut nodes,
        );
        // Two thirds save checkpoints, at various ages.
        if rng.below(3) != 0 {
            checkpoints.insert(j.id.to_string(), NOW - rng.below(1_800_000) as i64);
        }
        jobs.push(j);
    }
    (CapacitySnapshot::from_nodes(0, nodes), jobs, checkpoints)
}

/// Tenants 0-24 have a limit of 64 GPUs per series and hold ~40 each: within; 25-49 a limit of
/// 16 with borrowing and hold ~40: above it.
fn quotas() -> Vec<TenantQuota> {
    (0..TENANTS)
        .map(|t| {
            let mut q = TenantQuota::unlimited(&tenant(t).parse().unwrap());
            for s in SERIES {
                if t < 25 {
                    q.set_gpu_limit(s, 64, false);
                } else {
                    q.set_gpu_limit(s, 16, true);
                }
            }
            q
        })
        .collect()
}

/// `count` waiting jobs: 8-GPU jobs of tenants within their limits, and (`urgent`) every fourth
/// a priority-9 one-GPU job of a borrowing tenant.
fn waiting(count: usize, urgent: bool) -> Vec<JobRecord> {
    (0..count)
        .map(|i| {
            let (t, s) = if urgent && i % 4 == 3 {
                (25 + i % 25, spec(Some(SERIES[i % 4]), 1, 1, 9))
            } else {
                (i % 25, spec(Some(SERIES[i % 4]), 1, 8, 0))
            };
            JobRecord::new_queued(
                format!("wait-{i:04}").parse().unwrap(),
                tenant(t).parse().unwrap(),
                s,
                "ab",
                NOW - 60_000 + i as i64,
            )
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (cap, running, checkpoints) = fleet();
    let lookup = |j: &JobRecord| {
        checkpoints.get(j.id.as_str()).map(|t| CheckpointSeen {
            name: format!("step-{t}"),
            completed_at_ms: *t,
        })
    };
    let rules = PreemptionRules {
        min_run_ms: 600_000,
        ..PreemptionRules::at(NOW)
    };
    println!(
        "preemption planning, one thread, {NODES} nodes, {} running jobs of {TENANTS} tenants (median of 11 rounds):",
        running.len()
    );
    for (label, waiting_jobs, with_quotas) in [
        (
            "nothing can preempt (no quotas, one priority, 100 waiting)",
            100,
            false,
        ),
        ("reclaim and priority, 100 waiting", 100, true),
        ("reclaim and priority, 1,000 waiting", 1_000, true),
    ] {
        let mut queue = running.clone();
        queue.extend(waiting(waiting_jobs, with_quotas));
        let quotas = if with_quotas { quotas() } else { Vec::new() };
        let (mut plan_ms, mut cand_ms, mut pre_ms) = (Vec::new(), Vec::new(), Vec::new());
        let (mut candidates, mut decided, mut victims, mut lost) = (0, 0, 0, 0);
        for _ in 0..11 {
            let t = Instant::now();
            let plan = plan_admissions(&queue, &cap, &[], &quotas);
            plan_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            candidates = preemption_candidates(&queue, &plan, &quotas, &rules).len();
            cand_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let got = plan_preemptions(&queue, &cap, &[], &quotas, &plan, &lookup, &rules);
            pre_ms.push(t.elapsed().as_secs_f64() * 1e3);
            decided = got.len();
            victims = got.iter().map(|p| p.victims.len()).sum::<usize>();
            lost = got.iter().map(|p| p.lost_gpu_seconds).sum::<u64>();
        }
        println!(
            "  {label}: plan_admissions {:.2} ms, preemption_candidates {:.2} ms ({candidates} candidates), plan_preemptions {:.2} ms ({decided} preemptions, {victims} victims, {lost} GPU-seconds lost at most)",
            median(plan_ms),
            median(cand_ms),
            median(pre_ms),
        );
    }
}
