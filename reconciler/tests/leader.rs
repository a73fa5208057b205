//! Two reconcilers against one kubesim and one store: exactly one acts at a time, and when the
//! leader stops (crash: its task is dropped, the Lease is not released) the other takes over.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tuneplane_core::job::JobState;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_one_of_two_reconcilers_acts_and_the_standby_takes_over_when_the_leader_dies() {
    let h = start(running_for(Duration::from_millis(300))).await;
    let (task_a, a) = h.reconciler(test_config("replica-a")).await;
    let (task_b, b) = h.reconciler(test_config("replica-b")).await;
    wait_for(10, "a leader", || async {
        (a.leadership.is_leader() || b.leadership.is_leader()).then_some(())
    })
    .await;

    for i in 0..4 {
        h.submit(&finishing(gpu_job(&format!("j{i}"), "l40s", 1, 4)))
            .await;
    }
    // Sample leadership while the jobs run through: never both at once.
    for _ in 0..100 {
        assert!(
            !(a.leadership.is_leader() && b.leadership.is_leader()),
            "two leaders at once"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..4 {
        h.wait_state(30, &format!("j{i}"), ray_end()).await;
    }
    let (leader_task, standby, leader, standby_task) = if a.leadership.is_leader() {
        (task_a, b, a, task_b)
    } else {
        (task_b, a, b, task_a)
    };
    assert_eq!(standby.metrics.passes(), 0, "the standby never ran a pass");
    assert_eq!(
        leader.metrics.admissions(),
        4,
        "every job admitted once, by the leader"
    );

    // The leader dies without releasing the Lease; the standby takes over after it expires.
    leader_task.abort();
    let _ = leader_task.await;
    wait_for(10, "the standby to lead", || async {
        standby.leadership.is_leader().then_some(())
    })
    .await;
    h.submit(&cpu_job("after")).await;
    h.wait_state(30, "after", JobState::Succeeded).await;
    assert_eq!(standby.metrics.admissions(), 1);
    standby_task.abort();
}
