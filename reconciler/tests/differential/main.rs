//! Differential test: the same scripted steps on kubesim and on the real control plane
//! (kube-apiserver, kube-scheduler, kube-controller-manager, the KubeRay operator; fake GPU nodes
//! played by `tuneplane_kubesim::agent`), each step reduced to a normalized JSON observation of
//! what the reconciler reads or depends on. The real cluster's transcripts are the golden files
//! in `tests/differential/` (one entry a step); both backends must reproduce them, so drift on
//! either side fails.
//!
//! - kubesim (default): each test runs its step on a simulator of its own and asserts the step's
//!   entry of the golden file, naming the JSON path that differs. The tests run in parallel.
//! - `TUNEPLANE_TEST_K8S=real` (with `TUNEPLANE_TEST_KUBECONFIG`): each test runs its step on the
//!   real cluster and asserts the same entry. The cluster is one: each test wipes it when it
//!   starts, so the tests take it one at a time (`support::Run`).
//! - Recording: `TUNEPLANE_TEST_K8S=real TUNEPLANE_UPDATE_GOLDEN=1` makes each test that runs
//!   rewrite its own step's entry in place (the other entries stay): run one test to re-record
//!   one step, or the whole target to re-record all.
//!
//! One test a step, each starting from a clean cluster and doing itself what its step needs:
//!
//! `tests/differential/real.json` ([`support::TRANSCRIPT`]):
//! 1. `fleet::fleet_matches_the_real_control_plane`: the nodes of [`common::FLEET`] as read
//!    through kube-rs (labels, capacity, allocatable, unschedulable, taints, Ready), the
//!    reconciler's `node_info` and the capacity snapshot `compute_capacity` makes of them.
//! 2. `pods::cpu_pod_matches_the_real_control_plane`: core's `render_pod` of a CPU-only job
//!    created as the reconciler creates it: the server-side defaults (the whole spec but the
//!    bootstrap command and env, the initial status), the phases a watcher sees,
//!    `status::assess_pod` along the way, the final status and the pod's events.
//! 3. `pods::api_errors_match_the_real_control_plane` (on the CPU pod of step 2, run to its end
//!    first): a create of an existing pod (409 AlreadyExists), a get of a missing pod (404), an
//!    invalid pod (422 with `details.causes`), a delete with a wrong uid precondition (409), a
//!    Lease update with a stale resourceVersion (409), merge and JSON patches of a label, label
//!    and field selectors (`spec.nodeName=`, `status.phase!=`) and an unsupported field selector.
//! 4. `scheduling::unschedulable_pods_match_the_real_control_plane`: GPU pods that cannot fit
//!    (more GPUs than any node of the series; no tolerations) and one whose nodeSelector matches
//!    no node: the PodScheduled condition, the `FailedScheduling` Warning event (message identical
//!    to kube-scheduler's), the reconciler's `scheduling_reason`/`pending_from_pods`; the
//!    pods/log answer for an unscheduled pod.
//! 5. `pods::image_pull_matches_the_real_control_plane`: a pod whose image cannot be pulled (the
//!    Scenario's `image_pull_failures`): the waiting reasons and message, the reconciler's
//!    `ImagePull` classification, the pods/log error while the container waits to start.
//! 6. `rayjob::rayjob_matches_the_real_control_plane`: core's `render_rayjob` of a two-pool GPU
//!    job (h200 × 2, l40s × 1): the RayJob's status progression up to `Running` with
//!    `assess_rayjob` along the way, the RayCluster the operator creates, its pods (names,
//!    labels, nodeSelector, tolerations, containers, resources, bound to distinct nodes of the
//!    right series), the submitter Job and its pod; then the RayJob's deletion and what garbage
//!    collection removes. (Here the agent pretends, so the comparison stops at Running; the end
//!    is `a_rayjob_run_to_success…`'s.)
//! 7. `pods::watch_matches_the_real_control_plane` (on the CPU pod of step 2): a watch from
//!    resourceVersion "0" (the current objects as ADDED) and one from the CPU pod's creation (its
//!    later history replayed). The 410 Gone of a compacted resourceVersion is not compared: on
//!    the real tier it depends on etcd's compaction clock (kubesim's own tests cover it).
//! 8. `scheduling::pod_affinity_matches_the_real_control_plane`: pods created one at a time,
//!    each observed once placed or refused, with required node affinity
//!    (`kubernetes.io/hostname In [h200-0, h200-1]`, as TunePlane plans pools) and required pod
//!    (anti-)affinity: a pool's workers one per node (the third refused, a bigger one refused for
//!    GPUs first), a pod refused by the workers' own anti-affinity (symmetry), terms with
//!    `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`), a `gpu-series` topology
//!    domain, `namespaces`, and pod affinity (to nobody, to itself, to the workers' series): the
//!    node it got (by series), the PodScheduled condition and the `FailedScheduling` events.
//!
//! `tests/differential/real_success.json` ([`support::SUCCESS`]):
//! `rayjob::a_rayjob_run_to_success_matches_the_real_control_plane`: on the real tier the agent
//! runs pods for real, so real Ray runs a real capsule's driver (served by a blob server on
//! 127.0.0.1) and the operator follows it to `Complete`/`SUCCEEDED`; recorded: the deployment
//! statuses, `assess_rayjob` along the way, the end status, the submitter pod's end, and the
//! cleanup after deletion.
//!
//! `tests/differential/real_node_loss.json` ([`support::NODE_LOSS`]):
//! `node_loss::taint_eviction_matches_the_real_control_plane` and
//! `node_loss::pod_gc_matches_the_real_control_plane` (see [`node_loss`]).
//!
//! `golden_files_hold_the_steps_of_the_tests` checks that each file has exactly the entries of
//! its tests' steps.
//!
//! Normalization (the one place where the backends are allowed to differ; see
//! [`support::Redactor`] and [`support::backend_specific`]): uids, resourceVersions, timestamps,
//! IPs and ports are never recorded; random name suffixes become `<rand5>`, the node a pod lands
//! on among equal nodes of a series becomes `<h200 node>` (the real scheduler breaks ties at
//! random), uids inside messages become `<uid>`, resourceVersions inside messages `<rv>`. What
//! kubesim intentionally does not reproduce is left out in [`support::backend_specific`], with
//! the reason.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod fleet;
mod node_loss;
mod pods;
mod rayjob;
mod scheduling;
mod support;

use support::{Golden, NODE_LOSS, SUCCESS, TRANSCRIPT};

/// Each golden file holds one entry for each step of its tests, in their order, and nothing
/// else (a file not recorded yet holds none).
#[test]
fn golden_files_hold_the_steps_of_the_tests() {
    let check = |g: &Golden| {
        let entries = g.entries();
        if entries.is_empty() {
            return;
        }
        let steps: Vec<&str> = entries
            .iter()
            .map(|e| e["step"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(steps, g.steps, "the steps of {}", g.file);
    };
    for g in [&TRANSCRIPT, &SUCCESS, &NODE_LOSS] {
        check(g);
    }
}
