//! The callbacks page: a subscription added and deleted through the console is what
//! `/v1/subscriptions` lists, a refused URL comes back above the form naming the field, the
//! secret shown is the API's, and each change is audited once with `console` as the source.

use axum::http::StatusCode;
use tuneplane_core::audit::{AuditAction, AuditQuery, AuditSource};

use super::harness::{csrf_of, stack};

#[tokio::test]
async fn subscriptions_are_added_and_deleted_through_the_console_and_audited_as_console() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let page = s.get("/console/callbacks", Some(&session)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("No subscriptions."), "{}", page.body);
    let csrf = csrf_of(&page.body);

    let refused = s
        .post_form(
            "/console/callbacks",
            Some(&session),
            &[
                ("csrf", &csrf),
                ("url", "https://10.9.8.7/hook"),
                ("format", "json"),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::SEE_OTHER);
    let back = s.get(refused.location(), Some(&session)).await;
    assert!(
        back.body.contains("url: ") && back.body.contains("private (10.0.0.0/8)"),
        "{}",
        back.body
    );

    let added = s
        .post_form(
            "/console/callbacks",
            Some(&session),
            &[
                ("csrf", &csrf),
                ("url", "https://hooks.example.com/tp?token=x"),
                ("event_succeeded", "on"),
                ("event_failed", "on"),
                ("format", "slack"),
            ],
        )
        .await;
    assert_eq!(added.location(), "/console/callbacks", "{}", added.body);
    let subs = s
        .state
        .submit
        .jobs()
        .list_subscriptions(&"acme".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(subs.len(), 1);
    assert_eq!(
        subs[0].events,
        vec![
            tuneplane_core::callback::EventKind::Succeeded,
            tuneplane_core::callback::EventKind::Failed
        ]
    );
    let page = s.get("/console/callbacks", Some(&session)).await;
    assert!(
        page.body
            .contains(&format!("data-subscription-id=\"{}\"", subs[0].id))
            && page.body.contains("https://hooks.example.com/tp?…")
            && !page.body.contains("token=x"),
        "{}",
        page.body
    );
    let secret = s
        .state
        .submit
        .jobs()
        .get_callback_secret(&"acme".parse().unwrap())
        .await
        .unwrap()
        .expect("made for the page");
    assert!(
        page.body.contains(&secret.secret),
        "the page shows the tenant's secret"
    );

    let deleted = s
        .post_form(
            &format!("/console/callbacks/{}/delete", subs[0].id),
            Some(&session),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(deleted.location(), "/console/callbacks");
    assert!(
        s.state
            .submit
            .jobs()
            .list_subscriptions(&"acme".parse().unwrap())
            .await
            .unwrap()
            .is_empty()
    );

    let entries = s
        .state
        .submit
        .jobs()
        .list_audit(&AuditQuery {
            tenant: Some("acme".parse().unwrap()),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let ours: Vec<(AuditAction, AuditSource)> = entries
        .iter()
        .filter(|e| e.action.as_str().starts_with("subscription."))
        .map(|e| (e.action, e.actor.source))
        .collect();
    assert_eq!(
        ours,
        vec![
            (AuditAction::SubscriptionCreate, AuditSource::Console),
            (AuditAction::SubscriptionDelete, AuditSource::Console)
        ]
    );
}
