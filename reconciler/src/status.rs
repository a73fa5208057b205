//! What a job's workload shows, as one [`Observed`] value (pure; unit-tested without a server).
//!
//! Pending reasons come from the pods: an image that cannot be pulled (`ImagePull`), a scheduling
//! failure classified from the scheduler's own message (`InsufficientGpu` for `Insufficient
//! nvidia.com/gpu`, `InsufficientCpu` for CPU/memory, `NoMatchingNode` for selectors, taints,
//! cordons), or `Starting`. The Kubernetes message is kept verbatim for the user.

use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use tuneplane_core::job::{FailureReason, PendingReason};
use tuneplane_core::render::bootstrap::{
    FETCH_CONTAINER, FETCH_FAILED_EXIT, FETCH_FAILED_TEXT, MISMATCH_EXIT, MISMATCH_TEXT,
};

use crate::rayjob::RayJob;
use crate::watched_pod::WatchedPod;

/// The state of a workload as seen in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// No workload exists.
    Missing,
    /// Created, not every pod runs yet.
    Pending {
        /// What the pods wait for (an image pull, a node that fits, or only their start); it
        /// becomes the job's pending reason.
        reason: PendingReason,
        /// The Kubernetes message (or the platform's).
        message: String,
    },
    /// Every pod runs.
    Running,
    /// Ended well.
    Succeeded,
    /// Ended badly.
    Failed {
        /// The job's terminal reason: the entrypoint failed, or the run deadline passed.
        reason: FailureReason,
        /// What happened, for people: Ray's or KubeRay's message, or the pod's exit.
        message: String,
    },
    /// The infrastructure lost the attempt (a node deleted, NotReady or reclaimed, a pod
    /// evicted, a Ray node replaced): the failure with its Kubernetes evidence
    /// ([`crate::loss`]).
    Lost(tuneplane_core::job::Failure),
    /// KubeRay refused the RayJob (a Warning event and an empty status).
    Invalid {
        /// The operator's message.
        message: String,
    },
}

const IMAGE_PULL: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// Classifies a `FailedScheduling` message.
pub fn scheduling_reason(message: &str) -> PendingReason {
    if message.contains("Insufficient nvidia.com/gpu") {
        PendingReason::InsufficientGpu
    } else if message.contains("Insufficient cpu") {
        PendingReason::InsufficientCpu
    } else if message.contains("Insufficient memory") {
        PendingReason::InsufficientMemory
    } else {
        PendingReason::NoMatchingNode
    }
}

fn image_pull(pod: &WatchedPod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in all {
        let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = w.reason.as_deref().unwrap_or_default();
        if IMAGE_PULL.contains(&reason) {
            let detail = w.message.as_deref().unwrap_or("the image cannot be pulled");
            return Some(format!("pod {}: {reason}: {detail}", pod.name_any()));
        }
    }
    None
}

fn unschedulable(pod: &WatchedPod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            c.message
                .clone()
                .unwrap_or_else(|| "pod cannot be scheduled".into())
        })
}

/// The pending reason of a set of pods: image pulls first, then scheduling, else `Starting`.
pub fn pending_from_pods(pods: &[&WatchedPod]) -> (PendingReason, String) {
    let waiting: Vec<&&WatchedPod> = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running"))
        .collect();
    if let Some(m) = waiting.iter().find_map(|p| image_pull(p)) {
        return (PendingReason::ImagePull, m);
    }
    if let Some(m) = waiting.iter().find_map(|p| unschedulable(p)) {
        return (scheduling_reason(&m), m);
    }
    let message = match waiting.first() {
        Some(p) => format!("pod {} is starting", p.name_any()),
        None if pods.is_empty() => "waiting for the workload's pods to be created".to_owned(),
        None => "waiting for Ray to start".to_owned(),
    };
    (PendingReason::Starting, message)
}

/// A Ray pod whose capsule-fetching init container refused the capsule (its checksum exit
/// status) or could not download it, now or before a restart: the failure's reason and message.
fn capsule_refused(pod: &WatchedPod) -> Option<(FailureReason, String)> {
    let fetch = pod
        .status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == FETCH_CONTAINER)?;
    let exits: Vec<i32> = [fetch.state.as_ref(), fetch.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
        .collect();
    if exits.contains(&MISMATCH_EXIT) {
        return Some((
            FailureReason::CapsuleMismatch,
            format!(
                "pod {}: {MISMATCH_TEXT}: init container {FETCH_CONTAINER} downloaded a capsule whose SHA-256 is not the one submitted (exit status {MISMATCH_EXIT}; its log has both digests); nothing was executed",
                pod.name_any()
            ),
        ));
    }
    exits.contains(&FETCH_FAILED_EXIT).then(|| {
        (
            FailureReason::CapsuleUnavailable,
            format!(
                "pod {}: {FETCH_FAILED_TEXT}: init container {FETCH_CONTAINER} could not download the capsule (exit status {FETCH_FAILED_EXIT}; its log names the endpoint and its answer); nothing was executed",
                pod.name_any()
            ),
        )
    })
}

/// The failure reason of a Ray job that ended badly with `message`: the runner's refusal of a
/// capsule that does not match its manifest, or the entrypoint's own failure.
fn ray_failure(message: &str) -> FailureReason {
    if message.contains(MISMATCH_TEXT) {
        FailureReason::CapsuleMismatch
    } else {
        FailureReason::EntrypointFailed
    }
}

/// Assesses a RayJob with its pods and the warning events about it.
pub fn assess_rayjob(rj: &RayJob, pods: &[&WatchedPod], warnings: &[&Event]) -> Observed {
    let status = rj.status.clone().unwrap_or_default();
    let deployment = status.job_deployment_status.as_deref().unwrap_or_default();
    let job_status = status.job_status.as_deref().unwrap_or_default();
    let message = status.message.clone().unwrap_or_default();
    match deployment {
        "Complete" if job_status == "SUCCEEDED" => return Observed::Succeeded,
        "Complete" => {
            return Observed::Failed {
                reason: ray_failure(&message),
                message: format!("Ray job ended {job_status}: {message}"),
            };
        }
        "Failed" => {
            let reason = if status.reason.as_deref() == Some("DeadlineExceeded") {
                FailureReason::RunDeadlineExceeded
            } else {
                ray_failure(&message)
            };
            return Observed::Failed {
                reason,
                message: format!("RayJob failed: {message}"),
            };
        }
        "Running" => return Observed::Running,
        _ => {}
    }
    // A tampered capsule ends the job at once: waiting would only restart the refusal until the
    // pre-running deadline.
    if let Some((reason, message)) = pods.iter().find_map(|p| capsule_refused(p)) {
        return Observed::Failed { reason, message };
    }
    if deployment.is_empty()
        && let Some(e) = warnings.iter().find(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("InvalidRayJob"))
        })
    {
        return Observed::Invalid {
            message: e.message.clone().unwrap_or_default(),
        };
    }
    let (reason, message) = pending_from_pods(pods);
    Observed::Pending { reason, message }
}

/// Assesses the WatchedPod of a CPU-only job.
pub fn assess_pod(pod: &WatchedPod) -> Observed {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => Observed::Succeeded,
        Some("Failed") => {
            let why = status.and_then(|s| s.reason.as_deref()).unwrap_or_default();
            let terminated = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref()?.terminated.as_ref());
            let exit = terminated.map(|t| t.exit_code);
            if terminated.and_then(|t| t.reason.as_deref()) == Some("OOMKilled") {
                Observed::Failed {
                    reason: FailureReason::OutOfMemory,
                    message: format!(
                        "the entrypoint was killed for using more memory than its limit of {} (OOMKilled, exit status {}); raise memory_gb",
                        pod.spec
                            .as_ref()
                            .and_then(|s| s.containers.first())
                            .and_then(|c| c.resources.as_ref()?.limits.as_ref()?.get("memory"))
                            .map_or_else(|| "?".to_owned(), |q| q.0.clone()),
                        exit.unwrap_or(137)
                    ),
                }
            } else if exit == Some(FETCH_FAILED_EXIT) {
                Observed::Failed {
                    reason: FailureReason::CapsuleUnavailable,
                    message: format!(
                        "{FETCH_FAILED_TEXT}: the pod could not download its capsule (exit status {FETCH_FAILED_EXIT}); nothing was executed"
                    ),
                }
            } else if exit == Some(MISMATCH_EXIT) {
                // The runner (or the bootstrap's fetch) refused the capsule before any user code
                // ran; the reconciler adds the runner's line naming the file from the pod's log.
                Observed::Failed {
                    reason: FailureReason::CapsuleMismatch,
                    message: format!(
                        "{MISMATCH_TEXT}: the pod's capsule does not match what was submitted (exit status {MISMATCH_EXIT}); nothing was executed"
                    ),
                }
            } else if why == "DeadlineExceeded" {
                Observed::Failed {
                    reason: FailureReason::RunDeadlineExceeded,
                    message: "the run deadline passed".into(),
                }
            } else {
                let message = match exit {
                    Some(code) => format!("the entrypoint exited with status {code}"),
                    None => format!("the pod failed: {why}"),
                };
                Observed::Failed {
                    reason: FailureReason::EntrypointFailed,
                    message,
                }
            }
        }
        Some("Running") => Observed::Running,
        _ => {
            let (reason, message) = pending_from_pods(&[pod]);
            Observed::Pending { reason, message }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of workload assessment and pending reasons.

    use super::*;
    use crate::rayjob::{RayJobSpec, RayJobStatus};

    fn pod(status: serde_json::Value) -> WatchedPod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "tp-j-head-x"}, "status": status}),
        )
        .unwrap()
    }

    fn rayjob(deployment: &str, job_status: &str) -> RayJob {
        let mut rj = RayJob::new("tp-j", &crate::rayjob::resource(), RayJobSpec::default());
        rj.status = Some(RayJobStatus {
            job_deployment_status: Some(deployment.into()),
            job_status: Some(job_status.into()),
            ..RayJobStatus::default()
        });
        rj
    }

    #[test]
    fn a_cpu_pod_whose_runner_refused_the_capsule_is_a_capsule_mismatch() {
        let failed = |code: i32| {
            pod(
                serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "main",
                "image": "python:3.12-slim", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "reason": "Error"}}}]}),
            )
        };
        let Observed::Failed { reason, message } = assess_pod(&failed(MISMATCH_EXIT)) else {
            panic!("not failed")
        };
        assert_eq!(reason, FailureReason::CapsuleMismatch);
        assert!(message.contains(MISMATCH_TEXT), "{message}");
        let Observed::Failed { reason, message } = assess_pod(&failed(FETCH_FAILED_EXIT)) else {
            panic!("not failed")
        };
        assert_eq!(reason, FailureReason::CapsuleUnavailable);
        assert!(message.contains(FETCH_FAILED_TEXT), "{message}");
        assert_eq!(
            reason.cause(),
            tuneplane_core::job::FailureCause::Infrastructure
        );
        let Observed::Failed { reason, .. } = assess_pod(&failed(1)) else {
            panic!("not failed")
        };
        assert_eq!(reason, FailureReason::EntrypointFailed);
    }

    #[test]
    fn scheduler_messages_map_to_structured_reasons() {
        let gpu = "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector.";
        assert_eq!(scheduling_reason(gpu), PendingReason::InsufficientGpu);
        assert_eq!(
            scheduling_reason("0/1 nodes are available: 1 Insufficient memory."),
            PendingReason::InsufficientMemory
        );
        assert_eq!(
            scheduling_reason("0/1 nodes are available: 1 Insufficient cpu."),
            PendingReason::InsufficientCpu
        );
        assert_eq!(
            scheduling_reason("0/3 nodes are available: 3 node(s) had untolerated taint {x: y}."),
            PendingReason::NoMatchingNode
        );
    }

    #[test]
    fn image_pull_beats_scheduling_and_keeps_the_kubelet_message() {
        let pulling = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{"name": "ray-head", "image": "bad", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"bad\""}}}]}),
        );
        let unscheduled = pod(
            serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}),
        );
        let (reason, message) = pending_from_pods(&[&unscheduled, &pulling]);
        assert_eq!(reason, PendingReason::ImagePull);
        assert!(message.contains("Back-off pulling image"));
        let (reason, message) = pending_from_pods(&[&unscheduled]);
        assert_eq!(reason, PendingReason::InsufficientGpu);
        assert!(message.starts_with("0/2 nodes are available"));
    }

    #[test]
    fn rayjob_deployment_status_maps_to_outcomes() {
        assert_eq!(
            assess_rayjob(&rayjob("Running", "RUNNING"), &[], &[]),
            Observed::Running
        );
        assert_eq!(
            assess_rayjob(&rayjob("Complete", "SUCCEEDED"), &[], &[]),
            Observed::Succeeded
        );
        let failed = assess_rayjob(&rayjob("Failed", "FAILED"), &[], &[]);
        assert!(matches!(
            failed,
            Observed::Failed {
                reason: FailureReason::EntrypointFailed,
                ..
            }
        ));
        let starting = assess_rayjob(&rayjob("Initializing", ""), &[], &[]);
        assert!(matches!(
            starting,
            Observed::Pending {
                reason: PendingReason::Starting,
                ..
            }
        ));
    }

    #[test]
    fn a_refused_capsule_fails_the_job_at_once_and_only_the_fetch_status_counts() {
        let fetch = |name: &str, code: i32, last: bool| {
            let terminated =
                serde_json::json!({"terminated": {"exitCode": code, "reason": "Error"}});
            let mut status = serde_json::json!({"name": name, "image": "i", "imageID": "",
                "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
            if last {
                status["lastState"] = terminated;
            } else {
                status["state"] = terminated;
            }
            pod(serde_json::json!({"phase": "Pending", "initContainerStatuses": [status]}))
        };
        for last in [false, true] {
            let refused = assess_rayjob(
                &rayjob("Initializing", ""),
                &[&fetch(FETCH_CONTAINER, MISMATCH_EXIT, last)],
                &[],
            );
            let Observed::Failed { reason, message } = refused else {
                panic!("{refused:?}");
            };
            assert_eq!(reason, FailureReason::CapsuleMismatch);
            assert!(
                message.contains(MISMATCH_TEXT) && message.contains("nothing was executed"),
                "{message}"
            );
        }
        // Another exit of the fetch, or status 86 of another init container, waits as before.
        for other in [
            fetch(FETCH_CONTAINER, 1, false),
            fetch("wait-gcs-ready", MISMATCH_EXIT, false),
        ] {
            assert!(matches!(
                assess_rayjob(&rayjob("Initializing", ""), &[&other], &[]),
                Observed::Pending { .. }
            ));
        }
        // The runner's refusal, in the message Ray gives for the failed entrypoint.
        let mut rj = rayjob("Failed", "FAILED");
        rj.status.as_mut().unwrap().message = Some(format!(
            "Job entrypoint command failed with exit code 86, last available logs: [tuneplane-runner] {MISMATCH_TEXT}: train.py: sha256 ab, the manifest says cd; nothing was executed"
        ));
        assert!(matches!(
            assess_rayjob(&rj, &[], &[]),
            Observed::Failed {
                reason: FailureReason::CapsuleMismatch,
                ..
            }
        ));
    }

    #[test]
    fn rayjob_with_an_invalid_spec_warning_and_no_status_is_invalid() {
        let rj = RayJob::new("tp-j", &crate::rayjob::resource(), RayJobSpec::default());
        let event: Event = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "e"}, "involvedObject": {"name": "tp-j"},
            "type": "Warning", "reason": "InvalidRayJobSpec", "message": "The RayJob spec is invalid"}),
        )
        .unwrap();
        assert_eq!(
            assess_rayjob(&rj, &[], &[&event]),
            Observed::Invalid {
                message: "The RayJob spec is invalid".into()
            }
        );
    }

    #[test]
    fn cpu_pod_phases_map_to_outcomes() {
        assert_eq!(
            assess_pod(&pod(serde_json::json!({"phase": "Succeeded"}))),
            Observed::Succeeded
        );
        let deadline = assess_pod(&pod(
            serde_json::json!({"phase": "Failed", "reason": "DeadlineExceeded"}),
        ));
        assert!(matches!(
            deadline,
            Observed::Failed {
                reason: FailureReason::RunDeadlineExceeded,
                ..
            }
        ));
        assert_eq!(
            assess_pod(&pod(serde_json::json!({"phase": "Running"}))),
            Observed::Running
        );
    }
}
