//! The planner's own tests: best-fit selection against a plain reference.

use super::search::{best_nodes, total_order_bits};
use super::*;
use crate::capacity::NodeCapacity;
use proptest::prelude::*;

/// What `best_nodes` must return: every candidate sorted by the key compared field by field
/// (the number by `total_cmp`), then by index, and the first `count` kept.
fn reference(
    mut candidates: Vec<usize>,
    count: usize,
    key: impl Fn(usize) -> (bool, u32, f64),
) -> Vec<usize> {
    candidates.sort_by(|a, b| {
        let (ka, kb) = (key(*a), key(*b));
        ka.0.cmp(&kb.0)
            .then(ka.1.cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(a.cmp(b))
    });
    candidates.truncate(count);
    candidates
}

/// A best-fit pick that stops after the bucket of free GPUs where enough nodes fit chooses
/// exactly the nodes, in the order, that ranking every fitting node of the scope would; for
/// CPU-only machines too (the CPU scope: CPU nodes, then GPU nodes by free GPUs, some of them
/// without a series), and a misfit counts every node. A reservation's candidates, taken by
/// buckets, lead to the nodes a walk of the whole scope would reserve.
#[test]
fn a_best_fit_pick_that_stops_early_chooses_what_a_whole_scan_would() {
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut picked = 0;
    for round in 0..300 {
        let nodes: Vec<NodeCapacity> = (0..40)
            .map(|i| {
                // Mostly GPU nodes of two series; some CPU nodes and GPU nodes without a series.
                let kind = rnd(8);
                let gpus = if kind == 0 { 0 } else { 8 };
                NodeCapacity {
                    name: format!("n{i:02}"),
                    series: match kind {
                        0 | 1 => None,
                        _ => Some(["a", "b"][rnd(2) as usize].into()),
                    },
                    gpus,
                    gpus_capacity: gpus,
                    gpus_used: rnd(u64::from(gpus) + 1) as u32,
                    cpus: 64.0,
                    cpus_used: rnd(64) as f64,
                    memory_gb: 512.0,
                    memory_gb_used: rnd(512) as f64,
                    ready: true,
                    ..NodeCapacity::default()
                }
            })
            .collect();
        let cap = CapacitySnapshot::from_nodes(0, nodes);
        let mut p = Planner::new(&cap);
        // Takes and reservations, so that free GPUs and the open view vary.
        for _ in 0..rnd(20) {
            let i = rnd(p.free.len() as u64) as usize;
            let taken = Shape {
                gpus: rnd(4) as u32,
                cpus: rnd(8) as f64,
                memory_gb: rnd(64) as f64,
                cpu_only: false,
            };
            p.take(i, &taken);
        }
        for _ in 0..rnd(6) {
            let i = rnd(p.free.len() as u64) as usize;
            if p.reserved[i].is_none() {
                p.reserve_node(i, 0);
            }
        }
        // Takes after reservations too (reserved nodes leave the CPU scope's order), and takes
        // given back.
        for _ in 0..rnd(6) {
            let i = rnd(p.free.len() as u64) as usize;
            let taken = Shape {
                gpus: rnd(3) as u32,
                cpus: rnd(8) as f64,
                memory_gb: rnd(64) as f64,
                cpu_only: false,
            };
            let before = p.free[i];
            p.take(i, &taken);
            if rnd(3) == 0 {
                p.restore(i, before);
            }
        }
        let gpu_shape = Shape {
            gpus: 1 + rnd(8) as u32,
            cpus: rnd(40) as f64,
            memory_gb: rnd(300) as f64,
            cpu_only: false,
        };
        // No CPUs, often: then nodes whose CPUs the free GPUs keep all tie at none left.
        let cpu_shape = Shape {
            gpus: 0,
            cpus: if rnd(3) == 0 { 0.0 } else { rnd(48) as f64 },
            memory_gb: rnd(400) as f64,
            cpu_only: true,
        };
        let count = 1 + rnd(6) as u32;
        for scope in 0..p.scopes.len() {
            let shape = if scope == CPU_SCOPE {
                cpu_shape
            } else {
                gpu_shape
            };
            for view in [View::Open, View::All] {
                p.begin();
                let got = p.pick(scope, &shape, count, view);
                if let Err(counts) = &got {
                    let all = p.scopes[scope]
                        .nodes
                        .iter()
                        .filter(|&&i| !(view == View::Open && p.reserved[i].is_some()))
                        .filter(|&&i| p.fits(i, &p.free[i], &shape))
                        .count();
                    assert_eq!(counts.all as usize, all, "round {round}, scope {scope}");
                }
                let got = got.ok();
                let fitting: Vec<usize> = p.scopes[scope]
                    .nodes
                    .iter()
                    .copied()
                    .filter(|&i| !(view == View::Open && p.reserved[i].is_some()))
                    .filter(|&i| p.fits(i, &p.free[i], &shape))
                    .collect();
                let want = (fitting.len() >= count as usize).then(|| {
                    reference(fitting, count as usize, |i| {
                        let r = p.room(i, &p.free[i], &shape);
                        (shape.cpu_only && p.gpu_node[i], r.gpus, r.cpus)
                    })
                });
                assert_eq!(got, want, "round {round}, scope {scope}, {view:?}");
                picked += usize::from(got.is_some());
            }
            // A reservation chooses, from the buckets it walks, what choosing among every open
            // node that fits when idle would.
            p.begin();
            let idle_fit: Vec<usize> = p.scopes[scope]
                .nodes
                .iter()
                .copied()
                .filter(|&n| {
                    p.reserved[n].is_none()
                        && !(shape.cpu_only && p.gpu_node[n])
                        && p.fits(n, &p.idle[n], &shape)
                })
                .collect();
            let candidates = p.reserve_candidates(scope, &shape, count);
            assert_eq!(
                candidates.len() >= count as usize,
                idle_fit.len() >= count as usize,
                "round {round}, scope {scope}"
            );
            let key = |n: usize| {
                let r = p.room(n, &p.free[n], &shape);
                (false, u32::MAX - r.gpus, -r.cpus)
            };
            assert_eq!(
                best_nodes(candidates, count as usize, key),
                reference(idle_fit, count as usize, key),
                "round {round}, scope {scope}"
            );
        }
    }
    assert!(
        picked > 100,
        "only {picked} picks found nodes: the check says little"
    );
}

proptest! {
    #[test]
    fn total_order_bits_order_as_total_cmp(a in any::<f64>(), b in any::<f64>()) {
        prop_assert_eq!(total_order_bits(a).cmp(&total_order_bits(b)), a.total_cmp(&b));
    }

    /// Packed keys choose the same nodes in the same order as comparing the keys themselves,
    /// ties (many nodes share a key) included.
    #[test]
    fn best_nodes_choose_as_the_plain_comparison(
        keys in prop::collection::vec((any::<bool>(), 0u32..4, prop::sample::select(vec![-8.0, -0.0, 0.0, 0.5, 4.0, 96.0, f64::INFINITY])), 0..60),
        count in 0usize..70,
    ) {
        let key = |i: usize| keys[i];
        let candidates: Vec<usize> = (0..keys.len()).rev().collect();
        prop_assert_eq!(
            best_nodes(candidates.clone(), count, key),
            reference(candidates, count, key)
        );
    }
}
