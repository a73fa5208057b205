//! `tuneplane playground` as a user runs it against the dev stack (API, embedded stores,
//! reconciler, kubesim with `examples/fleet.yaml`): a playground the fleet cannot host is refused
//! with the field named and exit 1; a good one is listed with its state and proxy path; delete
//! says so and the row leaves the list at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::process::Output;
use std::time::Duration;

use tuneplane::dev::{Backend, ClusterChoice, Stack, StackOptions};

mod stack_support;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs the CLI binary against `stack` (asynchronously: the stack serves on this runtime).
async fn cli(stack: &Stack, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tuneplane"));
    cmd.arg("playground")
        .args(args)
        .env("TUNEPLANE_API", &stack.api_url)
        .env("TUNEPLANE_API_KEY", &stack.api_key);
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the CLI did not finish within 60 s")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn playground_create_refuses_what_the_fleet_cannot_host_and_list_explains_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // Validation reads the capacity snapshot the reconciler publishes: start_with waits for it.
    let (stack, _api) = stack_support::start_with(StackOptions {
        data_dir: dir.path().to_path_buf(),
        port: 0,
        fleet: stack_support::example_fleet(),
        execute: false,
        unpullable_images: vec![],
        pass_interval: Duration::from_millis(100),
        backend: Backend::Embedded,
        cluster: ClusterChoice::Simulated,
        webhooks: None,
        capsule_delivery: tuneplane_core::render::CapsuleDelivery::Presigned,
        blob_tls: None,
        preemption_min_run: None,
    })
    .await;

    // The new user's mistakes: a series the fleet lacks, more GPUs than a node has, no GPU.
    for (args, expected) in [
        (
            &["--series", "h100"][..],
            "series: unknown series \"h100\"; known: h200, l40s",
        ),
        (
            &["--series", "h200", "--gpus", "9"],
            "gpus: 9 GPUs, but the largest h200 node has 8",
        ),
        (
            &["--series", "h200", "--gpus", "0"],
            "gpus: a playground needs at least 1 GPU",
        ),
    ] {
        let refused = cli(&stack, &[&["create", "qwen"], args].concat()).await;
        assert_eq!(refused.status.code(), Some(1), "{refused:?}");
        let err = text(&refused.stderr);
        assert!(err.contains(expected), "{err}");
    }

    // A good one: created, then listed with its state and its proxy path.
    let made = cli(
        &stack,
        &[
            "create",
            "Qwen/Qwen3-0.6B",
            "--series",
            "l40s",
            "--gpus",
            "2",
        ],
    )
    .await;
    assert!(made.status.success(), "{made:?}");
    let out = text(&made.stdout);
    let id = out
        .strip_prefix("created playground ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("no id in {out}"))
        .to_owned();
    assert!(id.starts_with("pg-") && !id.starts_with("pg-pg-"), "{id}");
    let url = format!("/v1/playgrounds/{id}/proxy/");
    let mut listed = String::new();
    for _ in 0..150 {
        let list = cli(&stack, &["list"]).await;
        assert!(list.status.success(), "{list:?}");
        listed = text(&list.stdout);
        if listed.contains("Running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let header = listed.lines().next().unwrap_or_default();
    for column in ["STATE", "PROXY PATH", "TTL LEFT"] {
        assert!(header.contains(column), "{listed}");
    }
    let row = listed
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} not listed: {listed}"));
    assert!(row.contains("Running"), "{listed}");
    assert!(row.contains(&url), "{listed}");

    // Delete says so, and the row is gone from the very next list.
    let deleted = cli(&stack, &["delete", &id]).await;
    assert!(deleted.status.success(), "{deleted:?}");
    assert_eq!(
        text(&deleted.stdout).trim(),
        format!("deleted playground {id}")
    );
    let after = cli(&stack, &["list"]).await;
    assert!(after.status.success(), "{after:?}");
    let after = text(&after.stdout);
    assert!(
        !after.contains(&id),
        "deleted playground still listed: {after}"
    );
    assert_eq!(after.trim(), "no playgrounds");

    stack.shutdown().await;
}
