//! Unit tests of workload assessment and pending reasons.

use super::*;
use crate::rayjob::{RayJobSpec, RayJobStatus};

fn pod(status: serde_json::Value) -> Pod {
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
