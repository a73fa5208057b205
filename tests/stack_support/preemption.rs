//! The preemption scenarios the dev-stack and real-tier tests share: tenants with their own keys
//! and quotas on one stack, `examples/resume` as the training job (a step a second, a checkpoint
//! every 5 s, a save on SIGTERM), and what a reclaim must show.

use std::time::{Duration, Instant};

use serde_json::Value;
use tuneplane::client::{Api, ClientArgs, Output};
use tuneplane::dev::Stack;
use tuneplane_core::job::{FailureCause, FailureReason, JobRecord, JobState};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, new_api_key};

use super::{
    all_text, attempt_logs, checkpoint_steps, events, examples, last_step, resume_spec,
    resumed_step, submit_dir, wait_until,
};

/// Grace the scenarios' jobs get to save and stop.
pub const GRACE_SECONDS: u64 = 10;

/// A client of `stack`'s API acting for `tenant` (a key made for it in the stack's store).
pub async fn tenant_api(stack: &Stack, tenant: &str) -> Api {
    let (secret, record) = new_api_key(
        tuneplane_functions::runtime::random_bytes(),
        &tenant.parse().unwrap(),
        vec![SCOPE_JOBS_READ.to_owned(), SCOPE_JOBS_WRITE.to_owned()],
        "preemption test",
        0,
    );
    stack.jobs.put_api_key(&record).await.unwrap();
    Api::new(&ClientArgs {
        api: stack.api_url.clone(),
        key: Some(secret),
        output: Output::Json,
    })
    .unwrap()
}

/// Gives `tenant` a limit of `gpus` h200 GPUs (`borrow`: may use idle ones above it).
pub async fn h200_quota(stack: &Stack, tenant: &str, gpus: u32, borrow: bool) {
    let mut q = TenantQuota::unlimited(&tenant.parse().unwrap());
    q.set_gpu_limit("h200", gpus, borrow);
    stack.jobs.put_quota(&q).await.unwrap();
}

/// Limits `tenant`'s CPU-only jobs to `cpus` cores at once.
pub async fn cpu_quota(stack: &Stack, tenant: &str, cpus: f64) {
    let mut q = TenantQuota::unlimited(&tenant.parse().unwrap());
    q.cpu = Some(tuneplane_core::quota::CpuLimit {
        cpus: Some(cpus),
        memory_gb: None,
        borrow: false,
    });
    stack.jobs.put_quota(&q).await.unwrap();
}

/// `examples/resume` as a `nodes`×8-GPU h200 Ray job of `steps` steps of a second, saving a
/// checkpoint every `every` seconds.
pub fn ray_training(nodes: u32, steps: u32, every: u32) -> String {
    resume_spec(
        &format!(r#"{{STEPS: "{steps}", STEP_SECONDS: "1", CHECKPOINT_SECONDS: "{every}"}}"#),
        "{infrastructure: 0, application: 0}",
    )
    .replace(
        "  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}",
        &format!("  - {{name: main, series: h200, nodes: {nodes}, gpus_per_node: 8}}"),
    )
    .replace("image: python:3.12-slim", "image: rayproject/ray:2.60.0")
    .replace(
        "grace_seconds: 30",
        &format!("grace_seconds: {GRACE_SECONDS}"),
    )
}

/// `examples/resume` as a CPU job of `steps` steps of a second on most of a CPU node, saving
/// every `every` seconds, with `priority`.
pub fn cpu_training(steps: u32, every: u32, priority: i32) -> String {
    let spec = resume_spec(
        &format!(r#"{{STEPS: "{steps}", STEP_SECONDS: "1", CHECKPOINT_SECONDS: "{every}"}}"#),
        "{infrastructure: 0, application: 0}",
    )
    .replace(
        "  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}",
        "  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 24, memory_gb: 8}",
    )
    .replace(
        "grace_seconds: 30",
        &format!("grace_seconds: {GRACE_SECONDS}"),
    );
    format!("{spec}\npriority: {priority}\n")
}

/// Submits `spec` with the resume example's code as the tenant of `api`.
pub async fn submit(api: &Api, spec: &str) -> JobRecord {
    submit_dir(api, &examples().join("resume"), spec).await
}

/// Waits until job `id` runs and has completed at least `n` checkpoints.
pub async fn running_with_checkpoints(api: &Api, id: &str, n: usize, secs: u64) -> JobRecord {
    let job = wait_until(api, id, secs, "running", |j| j.state == JobState::Running).await;
    let deadline = Instant::now() + Duration::from_secs(secs);
    while checkpoint_steps(api, id).await.len() < n {
        assert!(
            Instant::now() < deadline,
            "{id}: fewer than {n} checkpoints in {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    job
}

/// What a preempted job shows once it ended: its first attempt `Preempted` with `words` in the
/// message and nothing of the preempting tenant (`other`); a later attempt that resumed from a
/// checkpoint at most 5 steps behind the last step attempt 1 printed and ran to SUCCEEDED; a
/// `Preempted` warning and a `Requeued` event. Returns the resumed step.
pub async fn assert_preempted_and_resumed(
    api: &Api,
    id: &str,
    words: &str,
    other: &str,
    steps: u32,
) -> u64 {
    let done = wait_until(api, id, 400, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert!(done.attempt >= 2, "{done:?}");
    let first = &done.attempts[0];
    assert_eq!(
        (first.failure.reason, first.failure.cause),
        (FailureReason::Preempted, FailureCause::Preempted),
        "{first:?}"
    );
    assert!(first.failure.message.contains(words), "{first:?}");
    assert!(!first.failure.message.contains(other), "{first:?}");
    assert!(first.failure.lost_seconds.is_some(), "{first:?}");
    let all = events(api, id).await;
    let warned: Vec<_> = all
        .iter()
        .filter(|e| e.reason == "Preempted" && e.kind == "Warning")
        .collect();
    assert_eq!(warned.len(), 1, "{all:#?}");
    assert!(!warned[0].message.contains(other), "{:?}", warned[0]);
    assert!(all.iter().any(|e| e.reason == "Requeued"), "{all:#?}");
    let one = all_text(&attempt_logs(api, id, 1).await);
    let printed = last_step(&one);
    let two = all_text(&attempt_logs(api, id, 2).await);
    let resumed = resumed_step(&two, 2);
    assert!(
        resumed + 5 >= printed,
        "{id}: attempt 2 resumed from step {resumed}, attempt 1 had printed step {printed}"
    );
    // What the entrypoint printed in its grace (a Ray job's driver too: Ray stopped it before
    // its RayJob went) is in attempt 1's archive, and attempt 2 started from that save.
    let saved = sigterm_step(&one)
        .unwrap_or_else(|| panic!("{id}: no grace-time output in attempt 1's archive:\n{one}"));
    assert!(
        resumed >= saved,
        "{id}: attempt 2 resumed from step {resumed}, attempt 1 saved step {saved} on SIGTERM"
    );
    assert!(two.contains(&format!("done at step {steps}")), "{two}");
    resumed
}

/// The step `examples/resume` saved when it was told to stop (`SIGTERM at step N: saving and
/// stopping`), if that line is in `text`.
pub fn sigterm_step(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = &l[l.find("SIGTERM at step ")? + "SIGTERM at step ".len()..];
        let (n, tail) = rest.split_once(':')?;
        tail.contains("saving and stopping")
            .then(|| n.trim().parse().ok())
            .flatten()
    })
}

/// The job page as JSON.
pub async fn job(api: &Api, id: &str) -> JobRecord {
    let v: Value = api.get(&format!("/jobs/{id}")).await.unwrap();
    serde_json::from_value(v).unwrap()
}
