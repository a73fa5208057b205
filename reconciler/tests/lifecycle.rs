//! The reconciler against kubesim and the embedded store: admission (multi-pool gang, CPU Pod,
//! series independence), stop, success with logs archived before deletion.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use tuneplane_core::job::{FailureReason, JobState, PendingReason};
use tuneplane_core::store::EventQuery;

/// Waits until the workload `name` is gone, checking that at that moment the logs archive exists.
async fn gone_after_archive(h: &Harness, id: &str, name: &str, pod: bool) {
    let key = format!("logs/{id}/logs.tar.gz");
    let key = key.as_str();
    let seen = std::sync::atomic::AtomicBool::new(false);
    let seen = &seen;
    wait_for(20, &format!("{name} deleted"), || async move {
        let exists = if pod {
            h.pods().get_opt(name).await.ok().flatten().is_some()
        } else {
            h.rayjobs().get_opt(name).await.ok().flatten().is_some()
        };
        if exists {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            return None;
        }
        let terminal = h
            .jobs
            .get_job(id)
            .await
            .ok()
            .flatten()
            .is_some_and(|j| j.is_terminal());
        if !seen.load(std::sync::atomic::Ordering::SeqCst) && !terminal {
            return None;
        }
        let archived = h.blobs.head(key).await.ok().flatten().is_some();
        assert!(
            archived,
            "{name} was deleted before its logs were archived at {key}"
        );
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_pool_job_is_admitted_only_when_every_pool_fits_and_a_stopped_job_frees_its_nodes() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&gpu_job("hold", "h200", 1, 8)).await;
    h.wait_state(20, "hold", JobState::Running).await;

    let multi = vec![
        pool("main", Some("h200"), 2, 8),
        pool("eval", Some("l40s"), 1, 4),
    ];
    h.submit(&job("multi", multi, "ghcr.io/acme/train:1", 60))
        .await;
    let waiting = h
        .wait_pending(20, "multi", PendingReason::InsufficientGpu)
        .await;
    assert_eq!(waiting.state, JobState::Queued);
    assert!(
        h.rayjobs().get_opt("tp-multi").await.unwrap().is_none(),
        "no partial admission"
    );

    // Stop the running job: it ends STOPPED with logs, and the gang job then fits.
    h.request_stop("hold").await;
    let stopped = h.wait_state(20, "hold", JobState::Stopped).await;
    assert_eq!(
        stopped.failure.map(|f| f.reason),
        Some(FailureReason::StopRequested)
    );
    gone_after_archive(&h, "hold", "tp-hold", false).await;
    assert_logs_archived(&h, &h.job("hold").await).await;

    h.wait_state(20, "multi", JobState::Running).await;
    let rj = h.rayjobs().get("tp-multi").await.unwrap();
    let cluster =
        serde_json::to_value(rj.spec.ray_cluster_spec.clone().unwrap_or_default()).unwrap();
    let head = &cluster["headGroupSpec"]["template"]["spec"];
    assert_eq!(head["nodeSelector"]["tuneplane/gpu-series"], "h200");
    assert_eq!(
        head["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "8"
    );
    let groups: Vec<(String, i64, String)> = cluster["workerGroupSpecs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|g| {
            let series = g["template"]["spec"]["nodeSelector"]["tuneplane/gpu-series"]
                .as_str()
                .unwrap_or_default();
            (
                g["groupName"].as_str().unwrap_or_default().to_owned(),
                g["replicas"].as_i64().unwrap_or(-1),
                series.to_owned(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("main".into(), 1, "h200".into()),
            ("eval".into(), 1, "l40s".into())
        ]
    );
    // Three Ray pods, each on its own node of the right series.
    let mut nodes: Vec<String> = h
        .job_pods("multi")
        .await
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["h200-0", "h200-1", "l40s-0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_only_job_becomes_a_pod_and_succeeds_with_its_logs_archived_before_deletion() {
    let h = start(sim_config(
        FLEET,
        Duration::from_secs(2),
        Some(Duration::from_millis(1500)),
    ))
    .await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&cpu_job("cpu1")).await;
    let pod = wait_for(20, "pod tp-cpu1", || async {
        h.pods().get_opt("tp-cpu1").await.ok().flatten()
    })
    .await;
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let resources = serde_json::to_value(&spec.containers[0].resources).unwrap_or_default();
    assert_eq!(resources["requests"], resources["limits"]);
    assert!(
        h.rayjobs().get_opt("tp-cpu1").await.unwrap().is_none(),
        "not a RayJob"
    );

    gone_after_archive(&h, "cpu1", "tp-cpu1", true).await;
    let done = h.wait_state(20, "cpu1", JobState::Succeeded).await;
    let entries = assert_logs_archived(&h, &done).await;
    let index: Value = serde_json::from_str(&entries[0].1).unwrap_or_default();
    assert_eq!(index["entries"][0]["container"], "job");
    assert!(
        entries.iter().any(|(p, _)| p == "tp-cpu1/job.log"),
        "{entries:?}"
    );
    let events = h
        .jobs
        .list_events("cpu1", &EventQuery::first(100))
        .await
        .unwrap();
    let keys: Vec<&str> = events.items.iter().map(|e| e.key.as_str()).collect();
    for k in ["state-ADMITTED", "state-RUNNING", "state-SUCCEEDED"] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_job_succeeds_and_its_rayjob_is_deleted_after_submitter_and_ray_logs_are_archived() {
    kubesim_only!(
        "KubeRay reads a job's end from the Ray head's dashboard, which fake nodes do not run"
    );
    let h = start(sim_config(FLEET, Duration::from_millis(500), None)).await;
    let (_task, ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&gpu_job("ok", "l40s", 1, 4)).await;
    gone_after_archive(&h, "ok", "tp-ok", false).await;
    let done = h.wait_state(20, "ok", JobState::Succeeded).await;
    let entries = assert_logs_archived(&h, &done).await;
    let index: Value = serde_json::from_str(&entries[0].1).unwrap_or_default();
    let pods: Vec<String> = index["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| e["pod"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        pods.iter().any(|p| p.ends_with("-head")),
        "head pod logs: {pods:?}"
    );
    assert!(
        pods.iter()
            .any(|p| p.starts_with("tp-ok-") && !p.ends_with("-head")),
        "submitter logs: {pods:?}"
    );
    let capacity = h.capacity().await;
    assert_eq!(
        capacity["series"]["l40s"]["total_gpus"], 4,
        "capacity published"
    );
    assert!(ctx.metrics.admissions() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_behind_a_bigger_job_of_another_series_is_not_blocked() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&gpu_job("hold", "h200", 2, 8)).await;
    h.wait_state(20, "hold", JobState::Running).await;
    h.submit(&gpu_job("big", "h200", 1, 8)).await;
    h.wait_pending(20, "big", PendingReason::InsufficientGpu)
        .await;
    h.submit(&gpu_job("small", "l40s", 1, 4)).await;
    h.wait_state(20, "small", JobState::Running).await;
    assert_eq!(h.job("big").await.state, JobState::Queued);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_gpu_passthrough_pods_request_no_gpus_and_admission_still_never_double_books() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let mut config = test_config("r1");
    config.render.gpu_passthrough = false;
    let (_task, _ctx) = h.reconciler(config).await;
    h.submit(&gpu_job("first", "l40s", 1, 4)).await;
    h.wait_state(20, "first", JobState::Running).await;
    let pods = h.job_pods("first").await;
    let head = pods.first().expect("no pods");
    let limits = serde_json::to_value(
        head.spec
            .as_ref()
            .map(|s| s.containers[0].resources.clone()),
    )
    .unwrap_or_default();
    assert!(limits["limits"].get("nvidia.com/gpu").is_none(), "{limits}");

    h.submit(&gpu_job("second", "l40s", 1, 4)).await;
    let waiting = h
        .wait_pending(20, "second", PendingReason::InsufficientGpu)
        .await;
    assert_eq!(waiting.state, JobState::Queued);
    let capacity = h.capacity().await;
    assert_eq!(capacity["series"]["l40s"]["free_gpus"], 0, "{capacity}");
}

/// Every request the reconciler sends the API server for CPU jobs over their whole life (admission,
/// run, logs archived, deletion), counted by kubesim by verb and resource as an audit log names
/// them, with grants on: the Pod's create is the only create per job (its grant is sealed in its
/// spec under its tenant's one seal Secret; the NetworkPolicy is its namespace's) and the Pod's
/// delete the only delete (no grant Secret of its own, no policy of its own to answer 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_job_costs_one_create_and_one_delete_over_its_life() {
    kubesim_only!("counts requests inside kubesim");
    let h = start(sim_config(
        FLEET,
        Duration::from_secs(2),
        Some(Duration::from_millis(1500)),
    ))
    .await;
    let mut config = test_config("r1");
    config.render.api_url = Some("http://127.0.0.1:9".into());
    config.render.grant_key =
        Some(tuneplane_core::grant::GrantKey::parse(&"ab".repeat(32)).unwrap());
    let (_task, ctx) = h.reconciler(config).await;
    // The reconciler's watches and first lists are made before any job: not a job's cost.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = h.sim().fault_counts().by_verb;
    const JOBS: u64 = 6;
    for k in 0..JOBS {
        h.submit(&cpu_job(&format!("cpu{k}"))).await;
    }
    for k in 0..JOBS {
        h.wait_state(30, &format!("cpu{k}"), JobState::Succeeded)
            .await;
    }
    let sim = h.sim();
    wait_for(20, "every Pod deleted", || async {
        let deleted = sim
            .fault_counts()
            .by_verb
            .get("delete pods")
            .copied()
            .unwrap_or(0);
        (deleted >= JOBS).then_some(())
    })
    .await;
    // A pass or two more, to see any late request (a leftover delete would come right after).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = h.sim().fault_counts().by_verb;
    let diff: std::collections::BTreeMap<&str, u64> = after
        .iter()
        .map(|(k, v)| (k.as_str(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    // A request the client retried (a slow answer on a loaded machine) is counted twice by the
    // server: the counts below hold exactly when the reconciler retried nothing.
    let retried = ctx.metrics.api_retries();
    let n = |k: &str| diff.get(k).copied().unwrap_or(0);
    let expect = |k: &str, want: u64, why: &str| {
        let got = n(k);
        assert!(
            got >= want && got <= want + retried,
            "{k}: {got}, want {want} ({why}; {retried} retried requests): {diff:?}"
        );
    };
    eprintln!("requests for {JOBS} CPU jobs: {diff:?}");
    expect("create pods", JOBS, "one Pod per job");
    expect("create secrets", 1, "one seal Secret for the tenant");
    expect(
        "create networkpolicies",
        2,
        "the namespace's two shared policies: CPU jobs' ingress and every pod's egress",
    );
    expect("delete pods", JOBS, "one delete per job");
    expect("delete secrets", 0, "no grant Secret per job");
    expect("delete networkpolicies", 0, "no policy per job");
    // Its logs are archived with one list (no submitter to look for) and one read per container.
    expect("list pods", JOBS, "one list per archive");
    expect("get pods/log", JOBS, "one read per container");
    // Everything else a job costs is reading its logs once it ended (and whatever the live
    // logs' budget spends while it runs).
    let creates_and_deletes: u64 = diff
        .iter()
        .filter(|(k, _)| k.starts_with("create ") || k.starts_with("delete"))
        .map(|(_, v)| v)
        .sum();
    assert!(
        // A Pod's create and delete per job; once per namespace and tenant: the seal Secret and
        // the two shared policies.
        creates_and_deletes >= 2 * JOBS + 3 && creates_and_deletes <= 2 * JOBS + 3 + retried,
        "{diff:?}"
    );
}

/// A CPU job's Pod made before its grant was sealed and its namespace's policy shared (no
/// `tuneplane.io/grant` or `tuneplane.io/workload` label) still takes its own grant Secret and
/// NetworkPolicy with it when it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_cpu_pod_still_takes_its_own_secret_and_policy_with_it() {
    kubesim_only!("counts requests inside kubesim");
    let h = start(sim_config(
        FLEET,
        Duration::from_secs(2),
        Some(Duration::from_secs(3)),
    ))
    .await;
    let mut config = test_config("r1");
    config.render.api_url = Some("http://127.0.0.1:9".into());
    config.render.grant_key =
        Some(tuneplane_core::grant::GrantKey::parse(&"ab".repeat(32)).unwrap());
    let (_task, _ctx) = h.reconciler(config).await;
    h.submit(&cpu_job("old")).await;
    wait_for(20, "pod tp-old", || async {
        h.pods().get_opt("tp-old").await.ok().flatten()
    })
    .await;
    // What an older reconciler's Pod looks like: neither label.
    let patch = serde_json::json!({"metadata": {"labels": {
        tuneplane_core::render::GRANT_LABEL: null,
        tuneplane_core::constants::WORKLOAD_LABEL: null,
    }}});
    h.pods()
        .patch(
            "tp-old",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = h.sim().fault_counts().by_verb;
    h.wait_state(30, "old", JobState::Succeeded).await;
    let sim = h.sim();
    let deleted = |k: &str| {
        let now = sim.fault_counts().by_verb.get(k).copied().unwrap_or(0);
        now - before.get(k).copied().unwrap_or(0)
    };
    wait_for(20, "the Pod deleted", || async {
        (deleted("delete pods") >= 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(deleted("delete secrets"), 1, "its grant Secret");
    assert_eq!(deleted("delete networkpolicies"), 1, "its own policy");
}
