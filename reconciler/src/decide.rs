//! The next step for one active job, from its record and what its workload shows (pure).
//!
//! The glue in [`crate::sync`] only fetches, calls [`decide`] and performs the step; passes never
//! branch on why they ran, so a pass after a crash takes the same step a pass before it would have.

use tuneplane_core::job::{Failure, FailureReason, JobRecord, JobState, Pending, PendingReason};

use crate::status::Observed;

/// Grace beyond the run deadline before the reconciler ends a job itself (KubeRay and the kubelet
/// enforce `activeDeadlineSeconds` first; this catches a workload that never reports).
pub const RUN_DEADLINE_GRACE_MS: i64 = 60_000;

/// What to do with a job in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing changed.
    Wait,
    /// The job is admitted but its workload does not exist: create it (idempotent).
    Create,
    /// Every pod runs: move to RUNNING.
    MarkRunning,
    /// Record a new pending reason.
    SetPending(Pending),
    /// End the attempt: archive logs, write the terminal record (or, when the spec's retries
    /// allow it, requeue the job as its next attempt), delete the workload.
    Finish {
        /// `SUCCEEDED`, `FAILED` or `STOPPED`.
        state: JobState,
        /// Reason, cause, message and evidence for `FAILED`/`STOPPED`.
        failure: Option<Failure>,
    },
}

fn fail(reason: FailureReason, message: impl Into<String>) -> Step {
    fail_with(Failure::new(reason, message))
}

fn fail_with(failure: Failure) -> Step {
    let state = if failure.reason == FailureReason::StopRequested {
        JobState::Stopped
    } else {
        JobState::Failed
    };
    Step::Finish {
        state,
        failure: Some(failure),
    }
}

/// The pre-running deadline of `job` in milliseconds, capped by `cap_ms`.
pub fn pre_running_deadline_ms(job: &JobRecord, cap_ms: Option<i64>) -> i64 {
    let own = i64::try_from(job.spec.deadlines.pre_running_seconds.saturating_mul(1000))
        .unwrap_or(i64::MAX);
    cap_ms.map_or(own, |cap| own.min(cap))
}

/// Decides the step for an active (non-terminal) `job` whose workload shows `observed` at `now_ms`.
pub fn decide(job: &JobRecord, observed: &Observed, now_ms: i64, cap_ms: Option<i64>) -> Step {
    if job.stop_requested {
        return fail(
            FailureReason::StopRequested,
            "stopped at the user's request",
        );
    }
    // A job admitted onto the nodes of preempted jobs counts its pre-running time from when
    // their pods are gone at the latest (their grace).
    let waited_from = job
        .admitted_at_ms
        .unwrap_or(now_ms)
        .max(job.preempting.as_ref().map_or(i64::MIN, |p| p.until_ms));
    let admitted_for = now_ms - waited_from;
    let deadline = pre_running_deadline_ms(job, cap_ms);
    let pre_running_over = job.state == JobState::Admitted && admitted_for > deadline;
    let last = |fallback: &str| match &job.pending {
        Some(p) => format!("{:?}: {}", p.reason, p.message),
        None => fallback.to_owned(),
    };
    let deadline_failure = |what: String| {
        fail(
            FailureReason::PreRunningDeadlineExceeded,
            format!(
                "not running {}s after admission; last pending reason {what}",
                deadline / 1000
            ),
        )
    };
    if *observed != Observed::Succeeded
        && let Some(failure) = preempted(job)
    {
        return fail_with(failure);
    }
    match observed {
        Observed::Succeeded => Step::Finish {
            state: JobState::Succeeded,
            failure: None,
        },
        Observed::Failed { reason, message } => fail(*reason, message.clone()),
        Observed::Lost(failure) => fail_with(failure.clone()),
        Observed::Invalid { message } => fail(FailureReason::InvalidWorkload, message.clone()),
        Observed::Missing if job.state == JobState::Admitted => {
            if pre_running_over {
                deadline_failure(last("none (the workload was never seen)"))
            } else {
                Step::Create
            }
        }
        Observed::Missing => fail(
            FailureReason::WorkloadLost,
            "the workload disappeared while the job ran",
        ),
        Observed::Running if job.state == JobState::Admitted => Step::MarkRunning,
        Observed::Running => {
            let ran_for = now_ms - job.running_at_ms.unwrap_or(now_ms);
            let limit = i64::try_from(job.spec.deadlines.run_seconds.saturating_mul(1000))
                .unwrap_or(i64::MAX);
            if ran_for > limit.saturating_add(RUN_DEADLINE_GRACE_MS) {
                fail(
                    FailureReason::RunDeadlineExceeded,
                    "still running past the run deadline",
                )
            } else {
                Step::Wait
            }
        }
        Observed::Pending { reason, message } => {
            if pre_running_over {
                return deadline_failure(format!("{reason:?}: {message}"));
            }
            let same = job
                .pending
                .as_ref()
                .is_some_and(|p| p.reason == *reason && p.message == *message);
            if same || job.state != JobState::Admitted {
                Step::Wait
            } else {
                Step::SetPending(Pending {
                    reason: *reason,
                    message: message.clone(),
                    since_ms: now_ms,
                })
            }
        }
    }
}

/// The failure that ends `job`'s attempt when a preemption notice names it (a notice of an
/// earlier attempt is stale). An attempt that succeeded meanwhile keeps its success.
pub fn preempted(job: &JobRecord) -> Option<Failure> {
    let notice = job.preempt.as_ref()?;
    if notice.attempt != job.attempt || !matches!(job.state, JobState::Admitted | JobState::Running)
    {
        return None;
    }
    let mut failure = Failure::new(
        FailureReason::Preempted,
        notice.message(job.spec.deadlines.grace_seconds),
    );
    failure.lost_seconds = Some(notice.lost_seconds);
    failure.evidence = notice
        .checkpoint
        .iter()
        .map(|c| format!("newest complete checkpoint {c}"))
        .collect();
    Some(failure)
}

/// A queued job's message may change every pass (free GPU counts, the blocking job); it is
/// rewritten at most this often unless the reason itself changes, to keep store writes low.
pub const MESSAGE_REFRESH_MS: i64 = 30_000;

/// The pending reason to store for a queued job, or `None` to leave the record alone. The flag
/// is true when the reason itself changed (worth an event). `last_write_ms` is when this process
/// last wrote it (unknown after a restart).
pub fn next_pending(
    current: Option<&Pending>,
    reason: PendingReason,
    message: &str,
    now_ms: i64,
    last_write_ms: Option<i64>,
) -> Option<(Pending, bool)> {
    let fresh = |since_ms| Pending {
        reason,
        message: message.to_owned(),
        since_ms,
    };
    match current {
        Some(p) if p.reason == reason => {
            let stale = last_write_ms.is_none_or(|at| now_ms - at >= MESSAGE_REFRESH_MS);
            (p.message != message && stale).then(|| (fresh(p.since_ms), false))
        }
        _ => Some((fresh(now_ms), true)),
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of the per-job decision.

    use super::*;
    use tuneplane_testkit::records;

    fn job(state: JobState) -> JobRecord {
        let mut j = records::queued("j")
            .pools(vec![records::pool_of(
                "main",
                Some("h200"),
                1,
                8,
                8.0,
                64.0,
            )])
            .build();
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
            failure: Some(Failure {
                reason, message, ..
            }),
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
                failure: Some(Failure {
                    reason: FailureReason::WorkloadLost,
                    ..
                }),
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
                failure: Some(Failure {
                    reason: FailureReason::InvalidWorkload,
                    ..
                }),
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
        .expect("reason changed");
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
        .expect("refresh");
        assert!(!new_reason);
        assert_eq!((p.since_ms, p.message.as_str()), (100, "0 available"));
    }
}
