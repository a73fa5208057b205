//! Unit tests of the per-job decision.

use super::*;
use tuneplane_core::spec::JobSpec;

fn job(state: JobState) -> JobRecord {
    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true", "env": {},
        "pools": [{"name": "main", "series": "h200", "nodes": 1, "gpus_per_node": 8, "cpus": 8.0, "memory_gb": 64.0}],
        "deadlines": {"pre_running_seconds": 10, "run_seconds": 100}, "priority": 0, "labels": {},
        "namespace": "ns", "platform_version": "0"
    }))
    .unwrap();
    let mut j = JobRecord::new_queued("j", "t", spec, "ab", 0);
    j.state = state;
    j.admitted_at_ms = Some(1_000);
    j
}

fn pending(reason: PendingReason) -> Observed {
    Observed::Pending {
        reason,
        message: "0/2 nodes are available".into(),
    }
}

#[test]
fn admitted_job_with_running_workload_moves_to_running() {
    assert_eq!(
        decide(&job(JobState::Admitted), &Observed::Running, 2_000, None),
        Step::MarkRunning
    );
}

#[test]
fn pending_past_the_pre_running_deadline_fails_with_the_last_reason() {
    let step = decide(
        &job(JobState::Admitted),
        &pending(PendingReason::ImagePull),
        11_001 + 1,
        None,
    );
    let Step::Finish {
        state,
        failure: Some((reason, message)),
    } = step
    else {
        panic!("{step:?}")
    };
    assert_eq!(
        (state, reason),
        (JobState::Failed, FailureReason::PreRunningDeadlineExceeded)
    );
    assert!(message.contains("ImagePull"), "{message}");
    // Before the deadline the reason is recorded once, then left alone.
    let step = decide(
        &job(JobState::Admitted),
        &pending(PendingReason::ImagePull),
        5_000,
        None,
    );
    let Step::SetPending(p) = step else {
        panic!("{step:?}")
    };
    let mut j = job(JobState::Admitted);
    j.pending = Some(p);
    assert_eq!(
        decide(&j, &pending(PendingReason::ImagePull), 6_000, None),
        Step::Wait
    );
    // The installation cap shortens a long deadline.
    assert!(matches!(
        decide(
            &job(JobState::Admitted),
            &pending(PendingReason::Starting),
            5_000,
            Some(2_000)
        ),
        Step::Finish { .. }
    ));
}

#[test]
fn stop_request_wins_over_everything() {
    let mut j = job(JobState::Running);
    j.stop_requested = true;
    let step = decide(&j, &Observed::Running, 2_000, None);
    assert!(
        matches!(
            step,
            Step::Finish {
                state: JobState::Stopped,
                ..
            }
        ),
        "{step:?}"
    );
}

#[test]
fn missing_workload_is_created_for_an_admitted_job_but_lost_for_a_running_one() {
    assert_eq!(
        decide(&job(JobState::Admitted), &Observed::Missing, 2_000, None),
        Step::Create
    );
    let step = decide(&job(JobState::Running), &Observed::Missing, 2_000, None);
    assert!(matches!(
        step,
        Step::Finish {
            failure: Some((FailureReason::WorkloadLost, _)),
            ..
        }
    ));
}

#[test]
fn finished_and_invalid_workloads_end_the_job() {
    let ok = decide(&job(JobState::Running), &Observed::Succeeded, 2_000, None);
    assert_eq!(
        ok,
        Step::Finish {
            state: JobState::Succeeded,
            failure: None
        }
    );
    let bad = decide(
        &job(JobState::Admitted),
        &Observed::Invalid {
            message: "bad".into(),
        },
        2_000,
        None,
    );
    assert!(matches!(
        bad,
        Step::Finish {
            failure: Some((FailureReason::InvalidWorkload, _)),
            ..
        }
    ));
}

#[test]
fn queued_pending_reason_is_rewritten_on_a_new_reason_and_message_changes_are_throttled() {
    let current = Pending {
        reason: PendingReason::InsufficientGpu,
        message: "1 available".into(),
        since_ms: 100,
    };
    let (p, new_reason) = next_pending(
        Some(&current),
        PendingReason::QueuedBehindOthers,
        "behind j1",
        5_000,
        Some(4_000),
    )
    .unwrap_or_else(|| panic!("reason changed"));
    assert!(new_reason);
    assert_eq!(p.since_ms, 5_000);
    assert!(
        next_pending(
            Some(&current),
            PendingReason::InsufficientGpu,
            "1 available",
            90_000,
            None
        )
        .is_none()
    );
    assert!(
        next_pending(
            Some(&current),
            PendingReason::InsufficientGpu,
            "0 available",
            5_000,
            Some(4_000)
        )
        .is_none()
    );
    let (p, new_reason) = next_pending(
        Some(&current),
        PendingReason::InsufficientGpu,
        "0 available",
        40_000,
        Some(4_000),
    )
    .unwrap_or_else(|| panic!("refresh"));
    assert!(!new_reason);
    assert_eq!((p.since_ms, p.message.as_str()), (100, "0 available"));
}
