//! The console's door of the audit trail: a submission sent twice, a stop pressed twice, a
//! playground created and deleted are each one entry, with the signed-in key as the actor and
//! `console` as the source.

use tuneplane_core::audit::{AuditAction, AuditQuery, AuditSource};
use tuneplane_core::store::hash_api_key;

use super::harness::{csrf_of, stack};

const SPEC: &str = "name: hello\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";

#[tokio::test]
async fn console_changes_are_audited_once_each_as_the_signed_in_key() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/submit", Some(&session)).await;
    let csrf = csrf_of(&page.body);
    for _ in 0..2 {
        let res = s
            .submit_form(&session, &csrf, "console-audit-1", SPEC)
            .await;
        assert_eq!(
            res.status,
            axum::http::StatusCode::SEE_OTHER,
            "{}",
            res.body
        );
    }
    let jobs = s.stored_jobs("acme").await;
    assert_eq!(jobs.len(), 1);
    let job = jobs[0].id.clone();
    for _ in 0..2 {
        let stop = s
            .post_form(
                &format!("/console/jobs/{job}/stop"),
                Some(&session),
                &[("csrf", &csrf)],
            )
            .await;
        assert_eq!(
            stop.status,
            axum::http::StatusCode::SEE_OTHER,
            "{}",
            stop.body
        );
    }
    let made = s
        .request_playground(&session, &csrf, ["tiny-model", "h200", "1", "10"])
        .await;
    assert_eq!(made.location(), "/console/playgrounds");
    let pg = s.state.submit.jobs().list_playgrounds().await.unwrap()[0]
        .id
        .clone();
    let del = s
        .post_form(
            &format!("/console/playgrounds/{pg}/delete"),
            Some(&session),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(del.status, axum::http::StatusCode::SEE_OTHER);

    let entries = s
        .state
        .submit
        .jobs()
        .list_audit(&AuditQuery::default())
        .await
        .unwrap();
    let got: Vec<(AuditAction, &str)> = entries
        .iter()
        .map(|e| (e.action, e.target.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (AuditAction::JobSubmit, job.as_str()),
            (AuditAction::JobStop, job.as_str()),
            (AuditAction::PlaygroundCreate, pg.as_str()),
            (AuditAction::PlaygroundDelete, pg.as_str()),
        ]
    );
    let key_id = format!("k-{}", &hash_api_key(&s.key_a)[..16]);
    for e in &entries {
        assert_eq!(e.actor.source, AuditSource::Console, "{e:?}");
        assert_eq!(e.actor.key_id, key_id, "{e:?}");
        assert_eq!(e.tenant, "acme");
    }
    // The job says where it came from, too.
    let events = s
        .state
        .submit
        .jobs()
        .list_events(&job, &tuneplane_core::store::EventQuery::first(5))
        .await
        .unwrap();
    assert!(
        events.items[0]
            .message
            .contains("submitted from the console"),
        "{:?}",
        events.items[0]
    );
}
