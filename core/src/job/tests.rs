use super::*;

fn spec() -> JobSpec {
    let json = serde_json::json!({
        "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
        "env": {}, "pools": [{"name": "main", "series": "h200", "nodes": 1, "gpus_per_node": 8,
        "cpus": 8.0, "memory_gb": 64.0}], "deadlines": {"pre_running_seconds": 60,
        "run_seconds": 600}, "priority": 0, "labels": {}, "namespace": "ns",
        "platform_version": "0"
    });
    serde_json::from_value(json).expect("test spec")
}

/// A fresh QUEUED record of tenant `acme` with [`spec`], submitted at `at_ms`.
fn queued(id: &str, at_ms: i64) -> JobRecord {
    JobRecord::new_queued(
        id.parse().unwrap(),
        "acme".parse().unwrap(),
        spec(),
        "ab",
        at_ms,
    )
}

#[test]
fn lifecycle_starts_each_clock_once() {
    let mut job = queued("j1", 1_000);
    assert_eq!(job.clock_ms(1_500), 500);
    job.transition(JobState::Admitted, 2_000).unwrap();
    job.transition(JobState::Running, 3_000).unwrap();
    assert_eq!(job.clock_ms(3_250), 250);
    job.transition(JobState::Succeeded, 4_000).unwrap();
    assert_eq!(
        (job.admitted_at_ms, job.running_at_ms, job.finished_at_ms),
        (Some(2_000), Some(3_000), Some(4_000))
    );
    assert_eq!(job.clock_ms(9_999), 3_000);
}

#[test]
fn terminal_states_are_final() {
    for terminal in [JobState::Succeeded, JobState::Failed, JobState::Stopped] {
        for next in JobState::ALL {
            assert!(!terminal.can_transition_to(next), "{terminal} -> {next}");
        }
    }
}

#[test]
fn a_stored_record_keeps_its_id_as_text_and_one_breaking_the_id_rule_does_not_decode() {
    let job = queued("j-01", 0);
    let mut json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["id"], "j-01");
    let back: JobRecord = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, job);
    json["id"] = "../J 1".into();
    let err = serde_json::from_value::<JobRecord>(json).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"../J 1\" is not a valid id: use 1-64 lower-case"),
        "{err}"
    );
}

#[test]
fn queued_job_cannot_jump_to_running() {
    let mut job = queued("j1", 0);
    let err = job.transition(JobState::Running, 1).err();
    assert_eq!(err.map(|e| e.to), Some(JobState::Running));
    assert_eq!(job.state, JobState::Queued);
}

#[test]
fn stop_request_ends_as_stopped_with_reason() {
    let mut job = queued("j1", 0);
    job.finish_with_failure(FailureReason::StopRequested, "by user", 5)
        .unwrap();
    assert_eq!(job.state, JobState::Stopped);
    assert_eq!(
        job.failure.map(|f| f.reason),
        Some(FailureReason::StopRequested)
    );
}

fn lost(reason: FailureReason) -> Failure {
    Failure::new(reason, "node n1 was deleted")
}

#[test]
fn causes_are_classified_by_reason() {
    assert_eq!(
        FailureReason::NodeLost.cause(),
        FailureCause::Infrastructure
    );
    assert_eq!(FailureReason::Evicted.cause(), FailureCause::Infrastructure);
    assert_eq!(
        FailureReason::OutOfMemory.cause(),
        FailureCause::Application
    );
    assert_eq!(
        FailureReason::EntrypointFailed.cause(),
        FailureCause::Application
    );
    assert_eq!(FailureReason::StopRequested.cause(), FailureCause::User);
    // A record stored before causes existed reads as the job's own failure.
    let old: Failure =
        serde_json::from_value(serde_json::json!({"reason": "WorkloadLost", "message": "m"}))
            .unwrap();
    assert_eq!(old.cause, FailureCause::Application);
}

#[test]
fn requeue_keeps_the_submission_time_and_lists_the_attempt() {
    let mut job = queued("j1", 1_000);
    job.transition(JobState::Admitted, 2_000).unwrap();
    job.transition(JobState::Running, 3_000).unwrap();
    job.workload_name = Some("tp-j1".into());
    job.placements = vec![PoolPlacement {
        pool: "main".into(),
        nodes: vec!["n1".into()],
    }];
    assert!(job.retry_allowed(&lost(FailureReason::NodeLost)));
    assert!(!job.retry_allowed(&lost(FailureReason::EntrypointFailed)));
    job.requeue(
        lost(FailureReason::NodeLost),
        Some("logs/j1/logs.tar.gz".into()),
        4_000,
    )
    .unwrap();
    assert_eq!(
        (job.state, job.attempt, job.submitted_at_ms),
        (JobState::Queued, 2, 1_000)
    );
    assert_eq!(
        (job.admitted_at_ms, job.running_at_ms, &job.workload_name),
        (None, None, &None)
    );
    assert!(job.placements.is_empty());
    let first = &job.attempts[0];
    assert_eq!(
        (first.number, first.admitted_at_ms, first.running_at_ms),
        (1, Some(2_000), Some(3_000))
    );
    assert_eq!(first.finished_at_ms, 4_000);
    assert_eq!(first.logs_key.as_deref(), Some("logs/j1/logs.tar.gz"));
    assert_eq!(first.placements[0].nodes, vec!["n1".to_owned()]);
    // A queued job cannot be requeued.
    assert!(
        job.requeue(lost(FailureReason::NodeLost), None, 5_000)
            .is_err()
    );
}

#[test]
fn retries_are_counted_per_cause_and_a_stop_is_never_retried() {
    let mut job = queued("j1", 0);
    job.spec.retries = crate::spec::Retries {
        infrastructure: 2,
        application: 1,
    };
    for n in 0..2 {
        assert!(job.retry_allowed(&lost(FailureReason::Evicted)), "{n}");
        job.transition(JobState::Admitted, 1).unwrap();
        job.requeue(lost(FailureReason::Evicted), None, 2).unwrap();
    }
    assert!(!job.retry_allowed(&lost(FailureReason::Evicted)));
    // The application budget is its own.
    assert!(job.retry_allowed(&lost(FailureReason::EntrypointFailed)));
    assert_eq!(job.attempt, 3);
    job.stop_requested = true;
    assert!(!job.retry_allowed(&lost(FailureReason::EntrypointFailed)));
    assert!(!job.retry_allowed(&lost(FailureReason::StopRequested)));
}

#[test]
fn a_grant_lives_while_its_attempt_runs_and_its_grace_after() {
    let mut job = queued("j1", 0);
    job.spec.deadlines.grace_seconds = 10;
    job.transition(JobState::Admitted, 1_000).unwrap();
    assert_eq!(job.grant_valid_until_ms(1), Some(i64::MAX));
    job.requeue(lost(FailureReason::NodeLost), None, 5_000)
        .unwrap();
    assert_eq!(
        job.grant_valid_until_ms(1),
        Some(5_000 + 10_000 + GRANT_UPLOAD_SLACK_MS)
    );
    assert_eq!(job.grant_valid_until_ms(2), Some(i64::MAX));
    assert_eq!(job.grant_valid_until_ms(3), None);
    job.transition(JobState::Admitted, 6_000).unwrap();
    job.transition(JobState::Succeeded, 7_000).unwrap();
    assert_eq!(
        job.grant_valid_until_ms(2),
        Some(7_000 + 10_000 + GRANT_UPLOAD_SLACK_MS)
    );
}

#[test]
fn state_names_round_trip() {
    for state in JobState::ALL {
        assert_eq!(JobState::parse(state.as_str()), Some(state));
        let json = serde_json::to_string(&state).unwrap_or_default();
        assert_eq!(json, format!("\"{}\"", state.as_str()));
    }
}
