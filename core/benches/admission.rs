//! Admission planning at scale: one `plan_admissions` round over 3,200 queued jobs and a fleet of
//! 1,000 GPU nodes in four series (compare: Armada's scheduler needs ~173 ms per cycle for 3,200
//! jobs). Run with `cargo bench -p tuneplane-core --bench admission`; prints figures, asserts none.

use std::time::Instant;

use tuneplane_core::admission::plan_admissions;
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::job::JobRecord;
use tuneplane_core::spec::JobSpec;

const SERIES: [&str; 4] = ["h200", "h100", "l40s", "a10g"];

fn fleet(nodes: usize) -> CapacitySnapshot {
    let nodes = (0..nodes)
        .map(|i| NodeCapacity {
            name: format!("node-{i:05}"),
            series: Some(SERIES[i % SERIES.len()].to_owned()),
            gpus: 8,
            gpus_used: (i % 3) as u32 * 2,
            cpus: 192.0,
            memory_gb: 2048.0,
            ready: true,
            ..NodeCapacity::default()
        })
        .collect();
    CapacitySnapshot::from_nodes(0, nodes)
}

fn queue(jobs: usize) -> Vec<JobRecord> {
    (0..jobs)
        .map(|i| {
            let series = SERIES[i % SERIES.len()];
            let pools = if i % 5 == 0 {
                serde_json::json!([
                    {"name": "main", "series": series, "nodes": 2, "gpus_per_node": 8, "cpus": 32.0, "memory_gb": 256.0},
                    {"name": "eval", "series": SERIES[(i + 1) % SERIES.len()], "nodes": 1, "gpus_per_node": 2, "cpus": 8.0, "memory_gb": 64.0}
                ])
            } else {
                serde_json::json!([{"name": "main", "series": series, "nodes": 1 + (i % 3) as u32, "gpus_per_node": 2 + (i % 4) as u32 * 2, "cpus": 16.0, "memory_gb": 128.0}])
            };
            let spec: JobSpec = serde_json::from_value(serde_json::json!({
                "name": "b", "plugin": "custom/custom", "image": "img", "entrypoint": "true", "env": {},
                "pools": pools, "deadlines": {"pre_running_seconds": 600, "run_seconds": 3600},
                "priority": (i % 7) as i32, "labels": {}, "namespace": "ns", "platform_version": "0"
            }))
            .unwrap_or_else(|e| panic!("spec: {e}"));
            JobRecord::new_queued(format!("job-{i:05}"), "t", spec, "ab", i as i64)
        })
        .collect()
}

fn main() {
    for (jobs, nodes) in [(3_200, 1_000), (10_000, 1_000)] {
        let (q, cap) = (queue(jobs), fleet(nodes));
        let mut best = f64::MAX;
        let mut admitted = 0;
        for _ in 0..5 {
            let start = Instant::now();
            let plan = plan_admissions(&q, &cap, &[]);
            best = best.min(start.elapsed().as_secs_f64() * 1e3);
            admitted = plan.admit.len();
        }
        println!(
            "plan_admissions: {jobs} jobs, {nodes} nodes: {best:.1} ms per round (best of 5), {admitted} admitted"
        );
    }
}
