//! Crash safety: the reconciler is killed (its task dropped) right after every step it takes —
//! each record write, each log archive, each workload creation — and a new one is started. No job is
//! lost, no workload is created twice, every terminal job has its logs, and no workload is left.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube::runtime::watcher;
use tuneplane_core::job::JobState;

/// A fingerprint of everything a step can change: record versions, archives, workloads.
async fn fingerprint(h: &Harness, ids: &[&str], uids: &Uids) -> String {
    let mut out = String::new();
    for id in ids {
        let version = h
            .jobs
            .get_job(id)
            .await
            .ok()
            .flatten()
            .map_or(0, |j| j.version);
        let archived = h
            .blobs
            .head(&format!("logs/{id}/logs.tar.gz"))
            .await
            .ok()
            .flatten()
            .is_some();
        out.push_str(&format!("{id}:{version}:{archived};"));
    }
    let workloads = uids
        .lock()
        .map(|m| m.values().map(BTreeSet::len).sum::<usize>())
        .unwrap_or(0);
    out.push_str(&workloads.to_string());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_reconciler_after_every_step_loses_no_job_and_creates_no_workload_twice() {
    let h = start(running_for(Duration::from_millis(600))).await;
    let uids: Uids = Arc::default();
    let rayjobs = h.rayjobs();
    let _t1 = track_uids(
        rayjobs.clone(),
        watcher::Config::default(),
        |_| true,
        uids.clone(),
    );
    let pods = h.pods();
    let cpu_pods = watcher::Config::default().fields("metadata.name=tp-c1");
    let _t2 = track_uids(pods.clone(), cpu_pods, |_| true, uids.clone());

    let ids = ["g1", "g2", "c1", "g3"];
    h.submit(&finishing(pre_running(gpu_job("g1", "h200", 1, 8), 120)))
        .await;
    h.submit(&finishing(pre_running(gpu_job("g2", "l40s", 1, 4), 120)))
        .await;
    h.submit(&cpu_job("c1")).await;
    // Needs both h200 nodes: waits for g1, then runs.
    h.submit(&finishing(pre_running(gpu_job("g3", "h200", 2, 8), 120)))
        .await;

    let mut kills = 0;
    for _ in 0..80 {
        let all_done = {
            let mut done = true;
            for id in ids {
                done &= h.job(id).await.is_terminal();
            }
            done
        };
        if all_done {
            break;
        }
        let before = fingerprint(&h, &ids, &uids).await;
        let (task, _ctx) = h.reconciler(test_config("crashy")).await;
        // Let it take exactly one observable step (or idle for a while), then kill it.
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            while fingerprint(&h, &ids, &uids).await == before {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        task.abort();
        let _ = task.await;
        kills += 1;
    }
    assert!(
        kills >= 8,
        "the test killed the reconciler only {kills} times"
    );

    // A last reconciler runs undisturbed and must leave no workload behind.
    let (_task, _ctx) = h.reconciler(test_config("crashy")).await;
    for id in ids {
        let end = if id == "c1" {
            JobState::Succeeded
        } else {
            ray_end()
        };
        let job = h.wait_state(30, id, end).await;
        assert_logs_archived(&h, &job).await;
    }
    wait_for(20, "every workload deleted", || async {
        let left = rayjobs.list(&Default::default()).await.ok()?.items.len()
            + pods.get_opt("tp-c1").await.ok()?.map_or(0, |_| 1);
        (left == 0).then_some(())
    })
    .await;
    let map = uids.lock().map(|m| m.clone()).unwrap_or_default();
    assert_eq!(
        map.keys().cloned().collect::<Vec<_>>(),
        ["tp-c1", "tp-g1", "tp-g2", "tp-g3"]
    );
    for (name, set) in map {
        assert_eq!(set.len(), 1, "{name} was created {} times", set.len());
    }
}

/// What a requeue step can change: the record's version and attempt, each attempt's archive, the
/// workloads created.
async fn requeue_fingerprint(h: &Harness, id: &str, uids: &Uids) -> String {
    let job = h.jobs.get_job(id).await.ok().flatten();
    let (version, attempt) = job.map_or((0, 0), |j| (j.version, j.attempt));
    let mut archives = 0;
    for key in [
        format!("logs/{id}/logs.tar.gz"),
        format!("logs/{id}/attempt-2/logs.tar.gz"),
    ] {
        archives += usize::from(h.blobs.head(&key).await.ok().flatten().is_some());
    }
    let workloads = uids
        .lock()
        .map(|m| m.values().map(BTreeSet::len).sum::<usize>())
        .unwrap_or(0);
    format!("{version}:{attempt}:{archives}:{workloads}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_reconciler_after_every_step_of_a_requeue_makes_exactly_one_second_attempt() {
    if common::real::is_real() {
        // The scenario deletes a node of the simulator; the real tier's node loss is exercised
        // end to end by tests/real_cluster.rs.
        return;
    }
    let h = start(running_for(Duration::from_secs(4))).await;
    let uids: Uids = Arc::default();
    let rayjobs = h.rayjobs();
    let _t = track_uids(
        rayjobs.clone(),
        watcher::Config::default(),
        |_| true,
        uids.clone(),
    );
    h.submit(&pre_running(gpu_job("r1", "h200", 1, 8), 120))
        .await;
    let (task, _ctx) = h.reconciler(test_config("steady")).await;
    let running = h.wait_state(20, "r1", JobState::Running).await;
    task.abort();
    let _ = task.await;
    // Its node goes while no reconciler runs; then reconcilers that each take one step die.
    let node = running.placements[0].nodes[0].clone();
    h.sim().delete_node(&node).unwrap();

    let mut kills = 0;
    for _ in 0..60 {
        let job = h.job("r1").await;
        if job.attempt == 2 && job.state != JobState::Queued {
            break;
        }
        let before = requeue_fingerprint(&h, "r1", &uids).await;
        let (task, _ctx) = h.reconciler(test_config("crashy")).await;
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            while requeue_fingerprint(&h, "r1", &uids).await == before {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        task.abort();
        let _ = task.await;
        kills += 1;
    }
    assert!(
        kills >= 3,
        "the test killed the reconciler only {kills} times"
    );

    let (_task, _ctx) = h.reconciler(test_config("crashy")).await;
    let done = h.wait_state(30, "r1", JobState::Succeeded).await;
    assert_eq!(done.attempt, 2, "{done:?}");
    assert_eq!(done.attempts.len(), 1, "{done:?}");
    assert_eq!(
        done.attempts[0].failure.reason,
        tuneplane_core::job::FailureReason::NodeLost
    );
    assert_ne!(done.placements[0].nodes[0], node);
    for key in ["logs/r1/logs.tar.gz", "logs/r1/attempt-2/logs.tar.gz"] {
        assert!(h.blobs.head(key).await.unwrap().is_some(), "{key} missing");
    }
    wait_for(20, "every workload deleted", || async {
        (rayjobs
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty())
        .then_some(())
    })
    .await;
    let map = uids.lock().map(|m| m.clone()).unwrap_or_default();
    assert_eq!(
        map.keys().cloned().collect::<Vec<_>>(),
        ["tp-r1", "tp-r1-a2"]
    );
    for (name, set) in map {
        assert_eq!(set.len(), 1, "{name} was created {} times", set.len());
    }
}
