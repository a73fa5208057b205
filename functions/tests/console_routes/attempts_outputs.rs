//! The job page of a job the platform ran again, with outputs: the attempt number, the
//! failure's cause and Kubernetes evidence (escaped), the earlier attempts with links to their
//! archived logs, the outputs with download links and the checkpoints; each link redirects to
//! a short-lived presigned URL of that very object, and another tenant gets none of it.

use axum::http::StatusCode;
use tuneplane_core::job::{Attempt, Failure, FailureReason, JobState};

use super::harness::{Stack, stack};

/// An output name with characters a link must encode (and HTML must not be confused by).
const ODD: &str = "model/it's w+1 (final).bin";

impl Stack {
    /// Job `id` as if attempt 1 lost its node and attempt 2 was evicted and ended FAILED, with
    /// each attempt's archive, three outputs and one complete checkpoint.
    async fn failed_twice_with_outputs(&self, id: &str) {
        let blobs = self.state.submit.blobs();
        let mut job = self.job(id).await;
        let first_logs = format!("logs/{id}/attempt-1/logs.tar.gz");
        blobs.put(&first_logs, b"archive 1".to_vec()).await.unwrap();
        let mut lost = Failure::new(FailureReason::NodeLost, "node h200-1 was deleted");
        lost.evidence = vec!["node/h200-1: deleted".into()];
        job.attempts.push(Attempt {
            number: 1,
            admitted_at_ms: Some(1_000),
            running_at_ms: Some(2_000),
            finished_at_ms: 92_000,
            workload_name: Some(format!("tp-{id}-1")),
            logs_key: Some(first_logs),
            placements: Vec::new(),
            failure: lost,
        });
        job.attempt = 2;
        job.state = JobState::Failed;
        job.admitted_at_ms = Some(100_000);
        job.running_at_ms = Some(101_000);
        job.finished_at_ms = Some(200_000);
        let mut evicted = Failure::new(FailureReason::Evicted, "pod was evicted");
        evicted.evidence = vec![
            "pod/p: DisruptionTarget <script>alert(1)</script>".into(),
            "node/h200-2: NotReady".into(),
        ];
        job.failure = Some(evicted);
        job.spec.retries.infrastructure = 2;
        job.spec.retries.application = 0;
        let current_logs = format!("logs/{id}/logs.tar.gz");
        blobs
            .put(&current_logs, b"archive 2".to_vec())
            .await
            .unwrap();
        job.logs_key = Some(current_logs);
        self.state.submit.jobs().update_job(&job).await.unwrap();
        for (path, bytes) in [
            ("metrics.json", b"{}".to_vec()),
            ("model/w.bin", vec![1; 3000]),
            (ODD, b"odd".to_vec()),
        ] {
            let key = format!("outputs/{}/{id}/{path}", job.tenant);
            blobs.put(&key, bytes).await.unwrap();
        }
        let folder = format!("checkpoints/{}/{id}/step-20", job.tenant);
        blobs
            .put(&format!("{folder}/state.pt"), vec![7; 2048])
            .await
            .unwrap();
        tuneplane_core::outputs::complete_checkpoint(
            blobs.as_ref(),
            &job.tenant,
            id,
            "step-20",
            1,
            90_000,
            2,
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_job_run_again_shows_its_attempts_cause_evidence_outputs_and_checkpoints() {
    let s = stack().await;
    let id = s.submit_api(&s.key_a, "retried").await;
    s.failed_twice_with_outputs(&id).await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;

    // The attempt and how the current one ended: cause and evidence, escaped.
    assert!(
        body.contains("<dt>Attempt</dt><dd class=\"attempt\">2 of up to 3</dd>"),
        "{body}"
    );
    assert!(body.contains("<strong>infrastructure</strong>"), "{body}");
    assert!(
        body.contains("<li><code>node/h200-2: NotReady</code></li>"),
        "{body}"
    );
    assert!(body.contains("DisruptionTarget &lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!body.contains("<script>alert(1)"), "evidence is escaped");

    // The earlier attempt, with its evidence and a link to its own archive.
    let attempts = section(body, "attempts-title");
    assert!(attempts.contains("<tr data-attempt=\"1\">"), "{attempts}");
    assert!(attempts.contains("<code>NodeLost</code>"), "{attempts}");
    assert!(attempts.contains("node/h200-1: deleted"), "{attempts}");
    assert!(attempts.contains("1m 30s"), "ran 90 s: {attempts}");
    let logs_link = format!("href=\"/console/jobs/{id}/logs?attempt=1\"");
    assert!(attempts.contains(&logs_link), "{attempts}");

    // The outputs, each with its link (encoded), and the checkpoint.
    let outputs = section(body, "outputs-title");
    for link in [
        format!("/console/jobs/{id}/outputs/metrics.json"),
        format!("/console/jobs/{id}/outputs/model/w.bin"),
        format!("/console/jobs/{id}/outputs/model/it%27s%20w%2B1%20%28final%29.bin"),
    ] {
        assert!(
            outputs.contains(&format!("href=\"{link}\"")),
            "{link} in {outputs}"
        );
    }
    assert!(outputs.contains("2.9 KiB"), "{outputs}");
    assert!(outputs.contains("<code>step-20</code>"), "{outputs}");
    assert!(outputs.contains("3 files"), "{outputs}");
    // The checkpoint's file, linked and signed when clicked; a file it does not have is 404.
    let ckpt = format!("/console/jobs/{id}/checkpoints/step-20/state.pt");
    assert!(outputs.contains(&format!("href=\"{ckpt}\"")), "{outputs}");
    let got = s.get(&ckpt, Some(&session)).await;
    assert_eq!(got.status, StatusCode::SEE_OTHER, "{}", got.body);
    assert!(
        got.location()
            .contains(&format!("checkpoints/acme/{id}/step-20/state.pt")),
        "{}",
        got.location()
    );
    let none = s
        .get(
            &format!("/console/jobs/{id}/checkpoints/step-20/other.pt"),
            Some(&session),
        )
        .await;
    assert_eq!(none.status, StatusCode::NOT_FOUND);

    // Each link redirects to a fresh presigned URL of that object.
    let odd = s
        .get(
            &format!("/console/jobs/{id}/outputs/model/it%27s%20w%2B1%20%28final%29.bin"),
            Some(&session),
        )
        .await;
    assert_eq!(odd.status, StatusCode::SEE_OTHER, "{}", odd.body);
    assert!(
        odd.location().starts_with("http://127.0.0.1:9/blobs/"),
        "{}",
        odd.location()
    );
    assert!(
        odd.location()
            .contains(&format!("outputs/acme/{id}/model/")),
        "{}",
        odd.location()
    );
    let w = s
        .get(
            &format!("/console/jobs/{id}/outputs/model/w.bin"),
            Some(&session),
        )
        .await;
    assert_eq!(w.status, StatusCode::SEE_OTHER);
    assert!(
        w.location()
            .contains(&format!("outputs/acme/{id}/model/w.bin")),
        "{}",
        w.location()
    );
    let first = s
        .get(
            &format!("/console/jobs/{id}/logs?attempt=1"),
            Some(&session),
        )
        .await;
    assert_eq!(first.status, StatusCode::SEE_OTHER);
    assert!(
        first
            .location()
            .contains(&format!("logs/{id}/attempt-1/logs.tar.gz")),
        "{}",
        first.location()
    );
    let current = s
        .get(&format!("/console/jobs/{id}/logs"), Some(&session))
        .await;
    assert!(
        current
            .location()
            .contains(&format!("logs/{id}/logs.tar.gz")),
        "{}",
        current.location()
    );

    // What does not exist is 404, what cannot be a path 400.
    for (path, status) in [
        (
            format!("/console/jobs/{id}/outputs/model/nope.bin"),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/console/jobs/{id}/outputs/model/../metrics.json"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/console/jobs/{id}/logs?attempt=7"),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/console/jobs/{id}/logs?attempt=one"),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let reply = s.get(&path, Some(&session)).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.body);
    }
}

#[tokio::test]
async fn another_tenant_sees_neither_the_attempts_nor_the_outputs() {
    let s = stack().await;
    let id = s.submit_api(&s.key_a, "private").await;
    s.failed_twice_with_outputs(&id).await;
    let other = s.sign_in(&s.key_b).await;
    for path in [
        format!("/console/jobs/{id}"),
        format!("/console/jobs/{id}/outputs/model/w.bin"),
        format!("/console/jobs/{id}/outputs/metrics.json"),
        format!("/console/jobs/{id}/logs?attempt=1"),
        format!("/console/jobs/{id}/checkpoints/step-20/state.pt"),
    ] {
        let reply = s.get(&path, Some(&other)).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert!(reply.location().is_empty(), "{path}: no link given");
        assert!(
            !reply.body.contains("w.bin") && !reply.body.contains("h200-1"),
            "{path}"
        );
    }
    // Signed out, nothing either: the sign-in page.
    let anonymous = s
        .get(&format!("/console/jobs/{id}/outputs/model/w.bin"), None)
        .await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    assert!(
        anonymous.location().starts_with("/console/sign-in"),
        "{}",
        anonymous.location()
    );
}

#[tokio::test]
async fn a_queued_job_without_outputs_says_so_and_a_requeued_one_says_why() {
    let s = stack().await;
    let id = s.submit_api(&s.key_a, "fresh").await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
    let outputs = section(&page.body, "outputs-title");
    assert!(outputs.contains("No outputs yet"), "{outputs}");
    assert!(outputs.contains("No complete checkpoints."), "{outputs}");
    assert!(!page.body.contains("attempts-title") && !page.body.contains("<dt>Attempt</dt>"));

    // Requeued after an infrastructure loss: QUEUED again as attempt 2, and the page says why.
    let mut job = s.job(&id).await;
    job.attempts.push(Attempt {
        number: 1,
        admitted_at_ms: Some(1_000),
        running_at_ms: None,
        finished_at_ms: 5_000,
        workload_name: None,
        logs_key: None,
        placements: Vec::new(),
        failure: Failure::new(FailureReason::Interrupted, "spot interruption notice"),
    });
    job.attempt = 2;
    s.state.submit.jobs().update_job(&job).await.unwrap();
    let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
    assert!(
        page.body.contains("the platform runs the job again after attempt 1 ended as <code>Interrupted</code> (infrastructure)"),
        "{}",
        page.body
    );
    let attempts = section(&page.body, "attempts-title");
    assert!(
        attempts.contains("never ran") && attempts.contains("none archived"),
        "{attempts}"
    );
}

/// The HTML of the section labelled by heading `title_id` (up to the section's end).
fn section<'a>(body: &'a str, title_id: &str) -> &'a str {
    let start = body
        .find(&format!("aria-labelledby=\"{title_id}\""))
        .unwrap_or_else(|| panic!("no section {title_id} in {body}"));
    let rest = &body[start..];
    let end = rest.find("</section>").unwrap_or(rest.len());
    &rest[..end]
}
