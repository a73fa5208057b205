//! CPU-only and GPU jobs sharing one fleet: CPU nodes first, spill-over onto GPU nodes that never
//! takes what a GPU job needs, reservations and the reasons each side is told.

use super::*;

fn sized(name: &str, series: Option<&str>, gpus: u32, cpus: f64, memory_gb: f64) -> NodeCapacity {
    NodeCapacity::ready(name, series, gpus, cpus, memory_gb)
}

fn cpu_pool(cpus: f64, memory_gb: f64) -> serde_json::Value {
    serde_json::json!({"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
        "cpus": cpus, "memory_gb": memory_gb})
}

fn gpu_pool(series: &str, nodes: u32, gpus: u32) -> serde_json::Value {
    // The JobSpec defaults: 4 CPUs and 32 GiB per GPU.
    serde_json::json!({"name": "main", "series": series, "nodes": nodes, "gpus_per_node": gpus,
        "cpus": 4.0 * f64::from(gpus), "memory_gb": 32.0 * f64::from(gpus)})
}

/// The sample fleet (`examples/fleet.yaml`): h200 × 4 (one cordoned), l40s × 2, cpu × 2.
fn sample_fleet() -> Vec<NodeCapacity> {
    let mut nodes: Vec<NodeCapacity> = (0..4)
        .map(|i| sized(&format!("h200-{i}"), Some("h200"), 8, 192.0, 2048.0))
        .collect();
    nodes[3].cordoned = true;
    nodes.extend((0..2).map(|i| sized(&format!("l40s-{i}"), Some("l40s"), 4, 64.0, 512.0)));
    nodes.extend((0..2).map(|i| sized(&format!("cpu-{i}"), None, 0, 32.0, 128.0)));
    nodes
}

/// Takes the admitted jobs' machines from `cap` on their planned nodes, as the next pass sees it.
fn apply(cap: &mut CapacitySnapshot, queue: &[JobRecord], plan: &AdmissionPlan) {
    for a in &plan.admit {
        let Some(job) = queue.iter().find(|j| j.id == a.job_id) else {
            continue;
        };
        for placement in &a.placements {
            let Some(pool) = job.spec.pools.iter().find(|p| p.name == placement.pool) else {
                continue;
            };
            for name in &placement.nodes {
                let Some(n) = cap.nodes.iter_mut().find(|n| &n.name == name) else {
                    continue;
                };
                n.gpus_used += pool.gpus_per_node;
                n.cpus_used += pool.cpus;
                n.memory_gb_used += pool.memory_gb;
                n.holders.push(crate::capacity::Holder {
                    job_id: job.id.clone(),
                    gpus: pool.gpus_per_node,
                    cpus: pool.cpus,
                    memory_gb: pool.memory_gb,
                });
            }
        }
    }
    *cap = CapacitySnapshot::from_nodes(cap.taken_at_ms, std::mem::take(&mut cap.nodes));
}

#[test]
fn the_new_user_scenario_uses_cpu_nodes_first_and_keeps_the_h200_gpus_usable() {
    // 30 small CPU jobs and 8 jobs of 30 CPUs, then an h200 × 3 × 8 job.
    let mut queue: Vec<JobRecord> = (0..30)
        .map(|i| job(&format!("small-{i:02}"), 0, i, vec![cpu_pool(1.0, 2.0)]))
        .collect();
    queue.extend((0..8).map(|i| job(&format!("wide-{i}"), 0, 100 + i, vec![cpu_pool(30.0, 8.0)])));
    let mut cap = snapshot(sample_fleet());
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(plan.admit.len(), 38, "{:?}", plan.waiting);
    for i in 0..30 {
        let on = nodes_of(&plan, &format!("small-{i:02}"));
        assert!(
            on[0].starts_with("cpu-"),
            "small-{i:02} on {on:?}: CPU nodes come first"
        );
    }
    apply(&mut cap, &queue, &plan);
    // Every h200 node keeps 4 CPUs and 32 GiB for each of its 8 free GPUs.
    for n in cap
        .nodes
        .iter()
        .filter(|n| n.series.as_deref() == Some("h200") && !n.cordoned)
    {
        assert!(
            n.cpus - n.cpus_used >= 32.0,
            "{}: {} CPUs used",
            n.name,
            n.cpus_used
        );
    }
    let gpu = job("h200-3x8", 0, 1_000, vec![gpu_pool("h200", 3, 8)]);
    let plan = plan_admissions(std::slice::from_ref(&gpu), &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["h200-3x8"], "{:?}", plan.waiting);
    let mut planned = nodes_of(&plan, "h200-3x8");
    planned.sort_unstable();
    assert_eq!(planned, ["h200-0", "h200-1", "h200-2"]);
}

#[test]
fn cpu_jobs_spilled_onto_gpu_nodes_never_take_what_free_gpus_keep() {
    // CPU nodes full; CPU jobs spill onto one 8-GPU node of 96 CPUs: they may use 96 - 8 × 4 = 64.
    let mut full = sized("cpu-0", None, 0, 32.0, 128.0);
    full.cpus_used = 32.0;
    let cap = snapshot(vec![full, sized("h-0", Some("h200"), 8, 96.0, 1024.0)]);
    let queue: Vec<JobRecord> = (0..3)
        .map(|i| job(&format!("spill-{i}"), 0, i, vec![cpu_pool(30.0, 8.0)]))
        .chain([job("gpu", 0, 10, vec![gpu_pool("h200", 1, 8)])])
        .collect();
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["spill-0", "spill-1", "gpu"]);
    assert_eq!(
        reason(&plan, "spill-2"),
        Some(PendingReason::InsufficientCpu)
    );
    assert!(
        message(&plan, "spill-2").contains("GPU nodes keep 4 CPUs and 32 GiB per free GPU"),
        "{}",
        message(&plan, "spill-2")
    );
}

#[test]
fn cpu_jobs_larger_than_every_cpu_node_never_hold_gpu_nodes_from_a_gpu_job() {
    // Issue 29's scenario on the sample fleet: two 32-CPU jobs fill the CPU nodes, six
    // 90-CPU jobs spill onto the three h200 nodes (three run, three wait), then a job for
    // 3 × 8 h200 GPUs comes.
    let mut queue: Vec<JobRecord> = (0..2)
        .map(|i| job(&format!("cpu32-{i}"), 0, i, vec![cpu_pool(32.0, 8.0)]))
        .collect();
    queue.extend((0..6).map(|i| job(&format!("cpu90-{i}"), 0, 10 + i, vec![cpu_pool(90.0, 8.0)])));
    let mut cap = snapshot(sample_fleet());
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(
        admitted(&plan),
        ["cpu32-0", "cpu32-1", "cpu90-0", "cpu90-1", "cpu90-2"]
    );
    apply(&mut cap, &queue, &plan);
    let left: Vec<JobRecord> = queue
        .iter()
        .filter(|j| !plan.admit.iter().any(|a| a.job_id == j.id))
        .cloned()
        .chain([job("h200-3x8", 0, 100, vec![gpu_pool("h200", 3, 8)])])
        .collect();
    let plan = plan_admissions(&left, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["h200-3x8"], "{:?}", plan.waiting);
    for id in ["cpu90-3", "cpu90-4", "cpu90-5"] {
        assert_eq!(reason(&plan, id), Some(PendingReason::InsufficientCpu));
        let m = message(&plan, id);
        assert!(
            m.contains("no CPU node is that large, so it waits for spare CPU on GPU nodes, where GPU jobs go first"),
            "{m}"
        );
        // True of the snapshot the plan saw: no h200 node has 90 CPUs beyond its GPUs' share.
        assert!(m.contains("0 GPU node(s) have it free now"), "{m}");
    }
    // And once the GPU job holds the nodes, the CPU jobs still wait for the same reason.
    apply(&mut cap, &left, &plan);
    let rest: Vec<JobRecord> = left.into_iter().filter(|j| j.id != "h200-3x8").collect();
    let plan = plan_admissions(&rest, &cap, &[], &[]);
    assert!(plan.admit.is_empty());
    assert_eq!(
        reason(&plan, "cpu90-3"),
        Some(PendingReason::InsufficientCpu)
    );
}

#[test]
fn a_cpu_job_that_fits_only_gpu_nodes_waits_for_their_reservation_without_making_one() {
    // One h200 node reserved by a waiting GPU job: the big CPU job would fit it without the
    // reservation, so it says whose the node is, and it reserves nothing itself.
    let mut h = sized("h-0", Some("h200"), 8, 192.0, 2048.0);
    h.gpus_used = 4;
    let cap = snapshot(vec![h, sized("cpu-0", None, 0, 32.0, 128.0)]);
    let queue = [
        job("gpu8", 5, 1, vec![gpu_pool("h200", 1, 8)]),
        job("cpu90", 0, 2, vec![cpu_pool(90.0, 8.0)]),
        job("cpu30", 0, 3, vec![cpu_pool(30.0, 8.0)]),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["cpu30"], "{:?}", plan.waiting);
    assert_eq!(nodes_of(&plan, "cpu30"), ["cpu-0"]);
    assert_eq!(
        reason(&plan, "cpu90"),
        Some(PendingReason::QueuedBehindOthers)
    );
    let m = message(&plan, "cpu90");
    assert!(
        m.contains("spare CPU on GPU nodes, where GPU jobs go first"),
        "{m}"
    );
    assert!(m.contains("held for job gpu8"), "{m}");
}

#[test]
fn a_gpu_job_short_of_cpu_says_cpu_and_names_the_holders() {
    let mut a = sized("h-0", Some("h200"), 8, 64.0, 1024.0);
    a.cpus_used = 60.0;
    a.holders = vec![crate::capacity::Holder {
        job_id: JobId::parse("hog").unwrap(),
        gpus: 0,
        cpus: 60.0,
        memory_gb: 8.0,
    }];
    let cap = snapshot(vec![a]);
    let queue = [job("j", 0, 1, vec![gpu_pool("h200", 1, 8)])];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientCpu));
    let m = message(&plan, "j");
    assert!(m.contains("1 have the GPUs, 0 also the CPUs"), "{m}");
    assert!(
        m.contains("CPUs on h200 nodes held by hog (60 CPUs)"),
        "{m}"
    );

    let mut b = sized("h-0", Some("h200"), 8, 64.0, 300.0);
    b.memory_gb_used = 200.0;
    let queue = [job("j", 0, 1, vec![gpu_pool("h200", 1, 8)])];
    let plan = plan_admissions(&queue, &snapshot(vec![b]), &[], &[]);
    assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientMemory));
}

#[test]
fn a_small_cpu_job_behind_a_waiting_gpu_job_is_admitted_in_the_same_pass() {
    let mut busy = sized("h-0", Some("h200"), 8, 96.0, 1024.0);
    busy.gpus_used = 4;
    let cap = snapshot(vec![busy, sized("cpu-0", None, 0, 32.0, 128.0)]);
    let queue = [
        job("head", 5, 1, vec![gpu_pool("h200", 1, 8)]),
        job("tiny", 0, 2, vec![cpu_pool(1.0, 1.0)]),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["tiny"]);
    assert_eq!(nodes_of(&plan, "tiny"), ["cpu-0"]);
    assert_eq!(reason(&plan, "head"), Some(PendingReason::InsufficientGpu));
}

#[test]
fn a_big_job_is_not_starved_by_a_stream_of_small_ones() {
    // Twelve 8-GPU nodes, each busy with a 4-GPU job. A 10-node job waits; every pass, four new
    // 4-GPU jobs arrive and running ones end two passes after admission. Without reservations the
    // small jobs would refill each node as it drains and the big job would never start.
    let names: Vec<String> = (0..12).map(|i| format!("n-{i:02}")).collect();
    let mut running: Vec<(String, String, u32, usize)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("old-{i}"), n.clone(), 4, i % 3))
        .collect();
    let mut queue = vec![job("big", 0, 0, vec![gpu_pool("h200", 10, 8)])];
    let mut big_admitted_at = None;
    for pass in 0..20_usize {
        running.retain(|r| r.3 > pass);
        queue.extend((0..4).map(|k| {
            let id = format!("small-{pass}-{k}");
            job(
                &id,
                0,
                1 + (pass * 4 + k) as i64,
                vec![gpu_pool("h200", 1, 4)],
            )
        }));
        let nodes = names
            .iter()
            .map(|n| {
                let used: u32 = running.iter().filter(|r| &r.1 == n).map(|r| r.2).sum();
                let mut c = sized(n, Some("h200"), 8, 96.0, 1024.0);
                c.gpus_used = used;
                c.cpus_used = f64::from(used) * 4.0;
                c.memory_gb_used = f64::from(used) * 32.0;
                c
            })
            .collect();
        let plan = plan_admissions(&queue, &snapshot(nodes), &[], &[]);
        for a in &plan.admit {
            let Some(job) = queue.iter().find(|j| j.id == a.job_id) else {
                continue;
            };
            let gpus = job.spec.pools[0].gpus_per_node;
            for n in &a.placements[0].nodes {
                running.push((a.job_id.to_string(), n.clone(), gpus, pass + 2));
            }
        }
        if plan.admit.iter().any(|a| a.job_id == "big") {
            big_admitted_at = Some(pass);
            break;
        }
        let admitted_ids: Vec<String> = admitted(&plan).into_iter().map(String::from).collect();
        drop(plan);
        queue.retain(|j| !admitted_ids.iter().any(|a| *a == j.id));
    }
    let pass = big_admitted_at.expect("the big job starved for 20 passes");
    // The old jobs end by pass 3 and nothing new lands on the ten reserved nodes.
    assert!(pass <= 3, "admitted at pass {pass}");
}

#[test]
fn admitted_but_unbound_machines_keep_their_planned_nodes() {
    let cap = snapshot(vec![
        node("h-0", Some("h200"), 8, 0),
        node("h-1", Some("h200"), 8, 0),
    ]);
    let held = earlier_h200_machine(vec!["h-0".into()]);
    let queue = [job("next", 0, 1, vec![pool("m", Some("h200"), 1, 8)])];
    let plan = plan_admissions(&queue, &cap, &[held], &[]);
    assert_eq!(
        nodes_of(&plan, "next"),
        ["h-1"],
        "h-0 is planned for the earlier job"
    );
}

/// Deterministic xorshift for the property tests.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn insufficient_gpu_is_only_said_when_too_few_nodes_have_the_free_gpus() {
    // Random partly-busy fleets and queues; at most one pool per series per job, so "too few
    // nodes" is a plain count. After applying the plan's admissions (what the next snapshot
    // shows), every job waiting with InsufficientGpu must see fewer nodes of its series with
    // the free GPUs than it needs, and every GPU job waiting with InsufficientCpu/Memory must see
    // enough of them (GPUs were not what it lacked).
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    let series = ["h200", "l40s", "a10g"];
    let mut checked = 0;
    for round in 0..200 {
        let (gpu_nodes, cpu_nodes) = (4 + rng.below(12), rng.below(3));
        let mut nodes: Vec<NodeCapacity> = (0..gpu_nodes)
            .map(|i| {
                let s = series[rng.below(3) as usize];
                let mut n = sized(&format!("n-{i}"), Some(s), 8, 64.0, 512.0);
                n.gpus_used = rng.below(9) as u32;
                n.cpus_used = rng.below(65) as f64;
                n.memory_gb_used = rng.below(513) as f64;
                n.cordoned = rng.below(10) == 0;
                n
            })
            .collect();
        nodes.extend((0..cpu_nodes).map(|i| sized(&format!("c-{i}"), None, 0, 32.0, 128.0)));
        let queue: Vec<JobRecord> = (0..(1 + rng.below(12)))
            .map(|i| {
                let s = series[rng.below(3) as usize];
                let g = [1, 2, 4, 8][rng.below(4) as usize];
                let pools = if rng.below(6) == 0 {
                    vec![cpu_pool(
                        1.0 + rng.below(40) as f64,
                        1.0 + rng.below(100) as f64,
                    )]
                } else {
                    vec![gpu_pool(s, 1 + rng.below(3) as u32, g)]
                };
                job(
                    &format!("r{round}-{i}"),
                    rng.below(3) as i32,
                    i as i64,
                    pools,
                )
            })
            .collect();
        let mut cap = snapshot(nodes);
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        apply(&mut cap, &queue, &plan);
        for w in &plan.waiting {
            let Some(job) = queue.iter().find(|j| j.id == w.job_id) else {
                continue;
            };
            let p = &job.spec.pools[0];
            let Some(s) = p.series.as_deref() else {
                continue;
            };
            let with_gpus = cap
                .nodes
                .iter()
                .filter(|n| n.series.as_deref() == Some(s) && n.free_gpus() >= p.gpus_per_node)
                .count() as u32;
            match w.reason {
                PendingReason::InsufficientGpu => {
                    checked += 1;
                    assert!(
                        with_gpus < p.nodes,
                        "{}: {} ({with_gpus} nodes have the GPUs)",
                        w.job_id,
                        w.message
                    );
                }
                PendingReason::InsufficientCpu | PendingReason::InsufficientMemory => {
                    assert!(with_gpus >= p.nodes, "{}: {}", w.job_id, w.message);
                }
                _ => {}
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} InsufficientGpu cases were generated"
    );
}
