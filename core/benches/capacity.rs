//! Capacity computation at scale: `compute_capacity` over 1,000 nodes and 10,000 pods (issue 8
//! target: under 5 ms), and 5,000 nodes × 50,000 pods to show growth, on one thread. The reconciler
//! converts Kubernetes objects into these structs first; that conversion is measured by
//! `cargo bench --bench reconcile`. Run with
//! `cargo bench -p tuneplane-core --bench capacity`; prints figures, asserts none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location

use std::time::Instant;

use tuneplane_core::capacity_compute::{NodeInfo, PodInfo, compute_capacity};

const SERIES: [&str; 4] = ["h200", "h100", "l40s", "a10g"];

fn nodes(count: usize) -> Vec<NodeInfo> {
    // Reverse name order: the function must sort, as reflector stores are unordered.
    (0..count)
        .rev()
        .map(|i| NodeInfo {
            name: format!("node-{i:05}"),
            series: (i % 10 != 9).then(|| SERIES[i % SERIES.len()].to_owned()),
            gpus_capacity: if i % 10 == 9 { 0 } else { 8 },
            gpus_allocatable: (i % 10 != 9).then_some(8),
            cpus: 192.0,
            memory_gb: 2048.0,
            cordoned: i % 89 == 0,
            ready: i % 97 != 0,
        })
        .collect()
}

fn pods(count: usize, nodes: usize) -> Vec<PodInfo> {
    (0..count)
        .map(|i| PodInfo {
            node_name: (i % 17 != 0).then(|| format!("node-{:05}", (i * 7919) % nodes)),
            terminal: i % 13 == 0,
            gpus_requested: (i % 3) as u32,
            gpus_admitted: (i % 5 == 0).then_some(1),
            cpus: 2.0,
            memory_gb: 8.0,
            // Jobs of a few pods each, as the reconciler sees them.
            job_id: Some(format!("job-{:06}", i / 4)),
        })
        .collect()
}

fn main() {
    println!("compute_capacity, one thread (median / best of the rounds):");
    for (n, p, rounds) in [(1_000, 10_000, 51), (5_000, 50_000, 21)] {
        let (ns, ps) = (nodes(n), pods(p, n));
        let mut times = Vec::new();
        let mut snap = compute_capacity(0, &ns, &ps);
        for _ in 0..rounds {
            let start = Instant::now();
            snap = compute_capacity(0, &ns, &ps);
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let used: u32 = snap.nodes.iter().map(|x| x.gpus_used).sum();
        println!(
            "  {n:>5} nodes x {p:>6} pods: median {:>6.3} ms, best {:>6.3} ms ({} series, {used} GPUs used)",
            times[times.len() / 2],
            times[0],
            snap.series.len()
        );
    }
}
