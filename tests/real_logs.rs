//! Live logs on a real control plane (`TUNEPLANE_TEST_K8S=real`, the admin kubeconfig in
//! `TUNEPLANE_TEST_KUBECONFIG`, the pods' runtimes in `TUNEPLANE_RUNTIMES`; `scripts/test.sh`
//! brings the cluster up): the examples' fleet played by the node agent running pods for real,
//! the dev stack's reconciler reading the job's log through the real API server and the node's
//! kubelet endpoint. A job printing a line a second, RUNNING for 20 s: a plain `tuneplane logs
//! JOB` prints lines numbered within 10 of the newest one, in under 10 s, every time; `status`
//! shows its last lines the same way (issue 32; the same check as `tests/live_logs.rs` on
//! kubesim). Skipped in the default tier.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::path::PathBuf;
use std::time::Duration;

use stack_support::{api_client, example_fleet, real_execution, real_tier_wanted};
use tuneplane::dev::{Backend, ClusterChoice, Stack, StackOptions};
use tuneplane_core::fleet::Fleet;
use tuneplane_core::render::CapsuleDelivery;
use tuneplane_kubesim::Scenario;
use tuneplane_kubesim::testbed::Testbed;

mod live_support;
mod stack_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_look_at_a_running_job_shows_its_output_up_to_now_on_a_real_control_plane() {
    if !real_tier_wanted() {
        return;
    }
    let kubeconfig = PathBuf::from(std::env::var("TUNEPLANE_TEST_KUBECONFIG").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = tempfile::tempdir().unwrap();
    let bed = Testbed::start_with(
        &kubeconfig,
        example_fleet(),
        Scenario::default(),
        Some(real_execution(agent_dir.path())),
    )
    .await
    .unwrap();
    let stack = Stack::start(StackOptions {
        data_dir: dir.path().join("data"),
        port: 0,
        fleet: Fleet {
            node_groups: Vec::new(),
        },
        execute: false,
        unpullable_images: Vec::new(),
        pass_interval: Duration::from_millis(300),
        backend: Backend::Embedded,
        cluster: ClusterChoice::Real { kubeconfig },
        webhooks: None,
        capsule_delivery: CapsuleDelivery::Presigned,
        blob_tls: None,
        preemption_min_run: None,
    })
    .await
    .unwrap();
    let api = api_client(&stack);
    live_support::plain_looks_show_the_output_up_to_now(&stack, &api, &bed.admin, dir.path()).await;
    stack.shutdown().await;
}
