//! Dependencies end to end on the executing dev stack (kubesim runs the pods on this machine),
//! through the HTTP API: `examples/pipeline`'s three steps submitted with `depends_on` (prepare
//! writes `data.txt`; train reads it from `TUNEPLANE_INPUTS_DIR/prepare/`, writes a model;
//! evaluate reads the model) end SUCCEEDED in order, none admitted before the one it waits for
//! ended; with prepare exiting 1, train and evaluate end `DependencyFailed` in one pass without
//! ever being admitted; another tenant's job cannot be named.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::path::PathBuf;

use stack_support::preemption::tenant_api;
use stack_support::{archived_logs, examples, post_job, submit_dir, wait_until};
use tuneplane::client::Api;
use tuneplane_core::job::{FailureReason, JobRecord, JobState, PendingReason};

mod stack_support;

fn step(name: &str) -> (PathBuf, String) {
    let dir = examples().join("pipeline").join(name);
    let spec = std::fs::read_to_string(dir.join("tuneplane.yaml")).unwrap();
    (dir, spec)
}

/// Submits step `name` of `examples/pipeline`, waiting for `after` (job ids), with `edit`
/// applied to its spec.
async fn submit_step(
    api: &Api,
    name: &str,
    after: &[&str],
    edit: impl Fn(String) -> String,
) -> JobRecord {
    let (dir, spec) = step(name);
    let mut spec = edit(spec);
    if !after.is_empty() {
        let list: Vec<String> = after.iter().map(|id| format!("{{job: {id}}}")).collect();
        spec.push_str(&format!("depends_on: [{}]\n", list.join(", ")));
    }
    submit_dir(api, &dir, &spec).await
}

async fn logs_of(api: &Api, id: &str) -> String {
    archived_logs(api, id)
        .await
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pipeline_runs_in_order_and_each_step_reads_the_outputs_of_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(tuneplane::dev::Backend::Embedded, dir.path()).await;
    let prepare = submit_step(&api, "prepare", &[], |s| s).await;
    let train = submit_step(&api, "train", &[&prepare.id], |s| s).await;
    let evaluate = submit_step(&api, "evaluate", &[&train.id], |s| s).await;
    // While prepare has not ended, evaluate waits for train, holding nothing.
    let waiting = wait_until(&api, &evaluate.id, 30, "waiting for train", |j| {
        j.pending
            .as_ref()
            .is_some_and(|p| p.reason == PendingReason::WaitingForDependencies)
    })
    .await;
    let message = &waiting.pending.as_ref().unwrap().message;
    assert!(message.contains(&train.id), "{message}");

    let done = wait_until(&api, &evaluate.id, 180, "ended", |j| j.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    let p: JobRecord = api.get(&format!("/jobs/{}", prepare.id)).await.unwrap();
    let t: JobRecord = api.get(&format!("/jobs/{}", train.id)).await.unwrap();
    assert_eq!(
        (p.state, t.state),
        (JobState::Succeeded, JobState::Succeeded)
    );
    assert!(
        t.admitted_at_ms.unwrap() >= p.finished_at_ms.unwrap(),
        "train before prepare ended"
    );
    assert!(
        done.admitted_at_ms.unwrap() >= t.finished_at_ms.unwrap(),
        "evaluate before train ended"
    );
    // Each step kept its place by submission time.
    assert_eq!(t.submitted_at_ms, train.submitted_at_ms);

    let train_logs = logs_of(&api, &train.id).await;
    assert!(
        train_logs.contains("train: 10 rows, model mean=5.5"),
        "{train_logs}"
    );
    let eval_logs = logs_of(&api, &evaluate.id).await;
    assert!(
        eval_logs.contains("evaluate: model mean=5.5, score ok"),
        "{eval_logs}"
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_step_fails_its_dependants_fail_at_once_and_never_hold_anything() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(tuneplane::dev::Backend::Embedded, dir.path()).await;
    let prepare = submit_step(&api, "prepare", &[], |s| {
        s.replace(
            "entrypoint: python3 prepare.py",
            "entrypoint: sleep 2; exit 1",
        )
    })
    .await;
    let train = submit_step(&api, "train", &[&prepare.id], |s| s).await;
    let evaluate = submit_step(&api, "evaluate", &[&train.id], |s| s).await;
    let p = wait_until(&api, &prepare.id, 120, "ended", |j| j.is_terminal()).await;
    assert_eq!(p.state, JobState::Failed);
    let t = wait_until(&api, &train.id, 30, "ended", |j| j.is_terminal()).await;
    let e = wait_until(&api, &evaluate.id, 30, "ended", |j| j.is_terminal()).await;
    for j in [&t, &e] {
        assert_eq!(j.state, JobState::Failed, "{j:?}");
        let f = j.failure.as_ref().unwrap();
        assert_eq!(f.reason, FailureReason::DependencyFailed, "{f:?}");
        assert_eq!(j.admitted_at_ms, None, "{} was admitted", j.id);
    }
    assert!(t.failure.as_ref().unwrap().message.contains(&prepare.id));
    assert!(e.failure.as_ref().unwrap().message.contains(&train.id));
    // Both in one pass: the same pass clock ended them.
    assert_eq!(t.finished_at_ms, e.finished_at_ms, "not in one pass");

    // Another tenant's job (and one that does not exist) cannot be named.
    let other = tenant_api(&stack, "team-z").await;
    let (dir, spec) = step("train");
    let spec = format!("{spec}depends_on: [{{job: {}}}]\n", prepare.id);
    let text = post_job(&other, &dir, &spec).await.unwrap_err();
    assert!(text.contains("400 Bad Request"), "{text}");
    assert!(text.contains("depends_on[0].job"), "{text}");
    assert!(text.contains("no job"), "{text}");
    stack.shutdown().await;
}
