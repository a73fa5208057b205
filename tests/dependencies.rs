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

mod cli_support;
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
    assert!(message.contains(train.id.as_str()), "{message}");

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
    assert!(
        t.failure
            .as_ref()
            .unwrap()
            .message
            .contains(prepare.id.as_str())
    );
    assert!(
        e.failure
            .as_ref()
            .unwrap()
            .message
            .contains(train.id.as_str())
    );
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

/// `examples/pipeline/pipeline.yaml` with `--wait` as a user runs it; a cycle and a bad step
/// are refused with nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pipeline_file_submits_every_step_in_one_request_and_waits_for_all() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(tuneplane::dev::Backend::Embedded, dir.path()).await;
    let (url, key) = (stack.api_url.clone(), stack.api_key.clone());
    let file = examples().join("pipeline/pipeline.yaml");
    let file = file.to_str().unwrap();
    let out = cli_support::client(&url, &key, "submit", &[file, "--wait"]).await;
    let said = cli_support::ok(&out);
    assert!(
        said.contains("submitted pipeline nightly (3 steps)"),
        "{said}"
    );
    assert!(said.contains("pipeline succeeded"), "{said}");
    let steps: Vec<JobRecord> = {
        let page: serde_json::Value = api.get("/jobs?limit=100").await.unwrap();
        serde_json::from_value(page["jobs"].clone()).unwrap()
    };
    let by_name = |n: &str| steps.iter().find(|j| j.spec.name == n).unwrap().clone();
    let (p, t, e) = (by_name("prepare"), by_name("train"), by_name("evaluate"));
    for j in [&p, &t, &e] {
        assert_eq!(j.state, JobState::Succeeded, "{j:?}");
    }
    assert_eq!(t.spec.depends_on[0].job, p.id);
    assert_eq!(e.spec.depends_on[0].job, t.id);
    assert!(t.admitted_at_ms.unwrap() >= p.finished_at_ms.unwrap());
    assert!(e.admitted_at_ms.unwrap() >= t.finished_at_ms.unwrap());
    assert!(
        logs_of(&api, &e.id)
            .await
            .contains("evaluate: model mean=5.5")
    );

    // A cycle: refused by the CLI before anything is sent, and by the API.
    let cyclic = dir.path().join("cyclic");
    std::fs::create_dir_all(&cyclic).unwrap();
    for step in ["prepare", "train"] {
        let src = examples().join("pipeline").join(step);
        let dst = cyclic.join(step);
        std::fs::create_dir_all(&dst).unwrap();
        for f in std::fs::read_dir(&src).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dst.join(f.file_name().unwrap())).unwrap();
        }
    }
    let cyclic_file = cyclic.join("pipeline.yaml");
    std::fs::write(
        &cyclic_file,
        "name: loop\nsteps:\n  - {name: prepare, folder: prepare, after: [train]}\n  - {name: train, folder: train, after: [prepare]}\n",
    )
    .unwrap();
    let out = cli_support::client(&url, &key, "submit", &[cyclic_file.to_str().unwrap()]).await;
    assert!(!out.status.success());
    let said = cli_support::text(&out.stderr);
    assert!(
        said.contains("cycle: prepare -> train -> prepare"),
        "{said}"
    );
    let code = tuneplane::client::pack::pack_quiet(&examples().join("pipeline/prepare")).unwrap();
    let inline = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &code);
    let (_, spec) = step("prepare");
    let body = serde_json::json!({"name": "loop", "steps": [
        {"name": "a", "spec": spec, "code": {"inline": inline}, "after": ["b"]},
        {"name": "b", "spec": spec, "code": {"inline": inline}, "after": ["a"]},
    ]});
    let err = api
        .post::<serde_json::Value>("/pipelines", &body, &[])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cycle: a -> b -> a"), "{err}");

    // A step refused after another was checked: nothing of the pipeline is stored.
    let before: serde_json::Value = api.get("/jobs?limit=100").await.unwrap();
    let bad = format!("{spec}depends_on: [{{job: {}}}]\n", p.id);
    let body = serde_json::json!({"name": "half", "steps": [
        {"name": "first", "spec": spec, "code": {"inline": inline}},
        {"name": "second", "spec": bad, "code": {"inline": inline}, "after": ["first"]},
    ]});
    let err = api
        .post::<serde_json::Value>("/pipelines", &body, &[])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("steps[1].spec.depends_on"),
        "{err}"
    );
    let after: serde_json::Value = api.get("/jobs?limit=100").await.unwrap();
    assert_eq!(
        before["jobs"].as_array().unwrap().len(),
        after["jobs"].as_array().unwrap().len()
    );
    stack.shutdown().await;
}
