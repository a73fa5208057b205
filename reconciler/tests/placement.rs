//! Placement follows the plan, on kubesim and on the real control plane: every pod of an admitted
//! workload binds to a node admission planned for its pool, CPU jobs use CPU nodes first and on GPU
//! nodes never what the free GPUs keep, so a full-node GPU job behind them is admitted at once; a
//! planned node that becomes unschedulable before its pod binds is named in the pending reason.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tuneplane_core::job::{JobRecord, JobState, PendingReason};

/// The sample fleet of `examples/fleet.yaml`: h200 × 4 (the last cordoned), l40s × 2, cpu × 2.
const SAMPLE: &str = "\
node_groups:
  - {name: h200, series: h200, count: 4, gpus: 8, cpus: 192, memory_gb: 2048, cordoned: 1, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: l40s, series: l40s, count: 2, gpus: 4, cpus: 64, memory_gb: 512, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: cpu, count: 2, cpus: 32, memory_gb: 128}
";

fn cpu(id: &str, cpus: f64, memory_gb: f64) -> JobRecord {
    let mut p = pool("main", None, 1, 0);
    p["cpus"] = json!(cpus);
    p["memory_gb"] = json!(memory_gb);
    job(id, vec![p], "python:3.12-slim", 600)
}

/// An `h200 × 3 × 8` job with the JobSpec's per-GPU defaults (32 CPUs, 256 GiB per machine).
fn full_h200(id: &str) -> JobRecord {
    let mut p = pool("main", Some("h200"), 3, 8);
    p["cpus"] = json!(32.0);
    p["memory_gb"] = json!(256.0);
    finishing(job(id, vec![p], "ghcr.io/acme/train:1", 600))
}

/// The nodes the job's pods are bound to, once `count` of them are bound.
async fn bound_nodes(h: &Harness, job: &JobRecord, count: usize) -> Vec<String> {
    let api = h.pods();
    let selector = format!("tuneplane.io/job-id={}", job.id);
    wait_for(
        30,
        &format!("{count} bound pod(s) of {}", job.id),
        || async {
            let pods = api
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            let nodes: Vec<String> = pods
                .items
                .iter()
                .filter(|p| {
                    // The KubeRay submitter pod is not one of the job's machines.
                    p.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key("tuneplane.io/pool"))
                })
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            (nodes.len() >= count).then_some(nodes)
        },
    )
    .await
}

/// Waits until job `id` is admitted (or already running).
async fn wait_admitted(h: &Harness, secs: u64, id: &str) -> JobRecord {
    h.wait_job(secs, id, "admitted", |r| {
        matches!(r.state, JobState::Admitted | JobState::Running)
    })
    .await
}

fn planned(job: &JobRecord) -> Vec<String> {
    job.placements
        .iter()
        .flat_map(|p| p.nodes.iter().cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_jobs_use_cpu_nodes_first_every_pod_binds_to_its_planned_node_and_a_full_h200_job_is_admitted_next()
 {
    let h = start(sim_config(SAMPLE, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    // The new user's session: 30 small CPU jobs, then 8 of 30 CPUs.
    let mut jobs: Vec<JobRecord> = (0..30)
        .map(|i| cpu(&format!("small-{i:02}"), 1.0, 2.0))
        .collect();
    jobs.extend((0..8).map(|i| cpu(&format!("wide-{i}"), 30.0, 8.0)));
    for j in &jobs {
        h.submit(j).await;
    }
    for j in &jobs {
        let admitted = wait_admitted(&h, 60, &j.id).await;
        let plan = planned(&admitted);
        assert_eq!(plan.len(), 1, "{}: {plan:?}", j.id);
        let on = bound_nodes(&h, j, 1).await;
        assert_eq!(on, plan, "{}: bound where admission planned", j.id);
        if j.id.starts_with("small") {
            assert!(
                on[0].starts_with("cpu-"),
                "{} on {on:?}: CPU nodes first",
                j.id
            );
        }
    }
    // The CPU jobs left every h200 GPU usable: the full-node job is admitted at once.
    let gpu = full_h200("h200-3x8");
    h.submit(&gpu).await;
    let admitted = wait_admitted(&h, 30, &gpu.id).await;
    let plan: BTreeSet<String> = planned(&admitted).into_iter().collect();
    assert_eq!(
        plan,
        ["h200-0", "h200-1", "h200-2"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    let on: BTreeSet<String> = bound_nodes(&h, &gpu, 3).await.into_iter().collect();
    assert_eq!(
        on, plan,
        "head and workers on the three planned nodes, one each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_jobs_spilled_onto_gpu_nodes_leave_the_gpus_their_share() {
    let h = start(sim_config(SAMPLE, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    // Two fill the CPU nodes; ten spill onto GPU nodes (5 fit an h200 node beside 8 free GPUs'
    // share of 32 CPUs, 1 an l40s node beside 4 × 4).
    let jobs: Vec<JobRecord> = (0..12)
        .map(|i| cpu(&format!("spill-{i:02}"), 30.0, 8.0))
        .collect();
    for j in &jobs {
        h.submit(j).await;
    }
    let mut spilled = 0;
    for j in &jobs {
        let r = wait_admitted(&h, 60, &j.id).await;
        let on = bound_nodes(&h, j, 1).await;
        assert_eq!(on, planned(&r));
        spilled += usize::from(!on[0].starts_with("cpu-"));
    }
    assert_eq!(spilled, 10);
    let gpu = full_h200("after-spill");
    h.submit(&gpu).await;
    let admitted = wait_admitted(&h, 30, &gpu.id).await;
    let on: BTreeSet<String> = bound_nodes(&h, &gpu, 3).await.into_iter().collect();
    assert_eq!(on, planned(&admitted).into_iter().collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_cpu_jobs_larger_than_every_cpu_node_never_keep_a_gpu_job_off_the_idle_gpus() {
    let h = start(sim_config(SAMPLE, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    // Two 32-CPU jobs fill the CPU nodes; six of 90 CPUs spill onto the three h200 nodes, one
    // each beside the 32 CPUs their 8 free GPUs keep (192 - 32 = 160), so three run, three wait.
    let jobs: Vec<JobRecord> = (0..2)
        .map(|i| cpu(&format!("cpu32-{i}"), 32.0, 8.0))
        .chain((0..6).map(|i| cpu(&format!("cpu90-{i}"), 90.0, 8.0)))
        .collect();
    for j in &jobs {
        h.submit(j).await;
    }
    for j in &jobs[..5] {
        let r = wait_admitted(&h, 60, &j.id).await;
        assert_eq!(bound_nodes(&h, j, 1).await, planned(&r));
    }
    let spare_cpu = |r: &JobRecord| {
        r.pending.as_ref().is_some_and(|p| {
            p.reason == PendingReason::InsufficientCpu
                && p.message.contains(
                    "no CPU node is that large, so it waits for spare CPU on GPU nodes, where GPU jobs go first",
                )
        })
    };
    for j in &jobs[5..] {
        h.wait_job(30, &j.id, "waiting for spare CPU on GPU nodes", spare_cpu)
            .await;
    }
    // 24 h200 GPUs are free and each h200 node has 102 free CPUs: the GPU job is admitted in
    // the next pass, not behind the waiting CPU jobs (it would wait until they drain).
    let gpu = full_h200("h200-3x8");
    let submitted = std::time::Instant::now();
    h.submit(&gpu).await;
    let admitted = wait_admitted(&h, 30, &gpu.id).await;
    eprintln!(
        "h200-3x8 admitted {:.2} s after its submission, beside 3 waiting 90-CPU jobs",
        submitted.elapsed().as_secs_f64()
    );
    let on: BTreeSet<String> = bound_nodes(&h, &gpu, 3).await.into_iter().collect();
    assert_eq!(on, planned(&admitted).into_iter().collect::<BTreeSet<_>>());
    assert_eq!(
        on,
        ["h200-0", "h200-1", "h200-2"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    // The CPU jobs still wait, and say why truly: no GPU node has 90 CPUs free now.
    for j in &jobs[5..] {
        let r = h.job(&j.id).await;
        assert_eq!(r.state, JobState::Queued, "{}", j.id);
        let p = r.pending.as_ref().unwrap();
        assert!(spare_cpu(&r), "{}: {p:?}", j.id);
        assert!(
            p.message.contains("0 GPU node(s) have it free now"),
            "{p:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_node_cordoned_before_its_pod_binds_is_named_and_the_deadline_applies() {
    // Admission plans the tainted node (it plans on capacity), the scheduler cannot bind, and then
    // the node is cordoned.
    let h = start(sim_config(TAINTED_H200, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&pre_running(gpu_job("pinned", "h200", 1, 8), 15))
        .await;
    let waiting = h
        .wait_pending(20, "pinned", PendingReason::NoMatchingNode)
        .await;
    assert_eq!(waiting.state, JobState::Admitted);
    assert_eq!(planned(&waiting), ["h200-0"]);
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes
        .patch(
            "h200-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon");
    let named = h
        .wait_job(20, "pinned", "planned node named", |j| {
            j.pending
                .as_ref()
                .is_some_and(|p| p.message.contains("planned node h200-0 is cordoned"))
        })
        .await;
    assert_eq!(
        named.pending.map(|p| p.reason),
        Some(PendingReason::NoMatchingNode)
    );
    let failed = h.wait_state(30, "pinned", JobState::Failed).await;
    assert_eq!(
        failed.failure.map(|f| f.reason),
        Some(tuneplane_core::job::FailureReason::PreRunningDeadlineExceeded)
    );
}
