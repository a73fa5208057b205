//! Key revocation and sign-out end sessions server-side: a revoked key's API calls and console
//! session are refused within seconds, and a copied session cookie dies with sign-out.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tuneplane_core::store::{ApiKeyChange, hash_api_key};

use super::harness::{Stack, csrf_of, stack};

/// How long a revocation may take to be refused everywhere.
const DEADLINE: Duration = Duration::from_secs(5);

impl Stack {
    /// Status of `GET /v1/jobs` with `key`.
    async fn api_status(&self, key: &str) -> StatusCode {
        let req = Request::get("/v1/jobs")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .body(Body::empty())
            .unwrap();
        self.call(req).await.status()
    }

    /// True when `session` is sent to the sign-in page instead of being shown the jobs page.
    async fn signed_out(&self, session: &str) -> bool {
        let page = self.get("/console/jobs", Some(session)).await;
        page.status == StatusCode::SEE_OTHER && page.location().starts_with("/console/sign-in")
    }
}

#[tokio::test]
async fn a_revoked_key_gets_401_and_its_console_session_ends_within_five_seconds() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    assert_eq!(s.api_status(&s.key_a).await, StatusCode::OK);
    assert!(!s.signed_out(&session).await);

    // What `tuneplane admin keys revoke` does.
    let revoked = s
        .state
        .submit
        .jobs()
        .update_api_key(
            &hash_api_key(&s.key_a),
            ApiKeyChange::Revoke {
                at_ms: tuneplane_functions::runtime::now_ms(),
            },
        )
        .await
        .unwrap();
    assert!(revoked.is_some_and(|k| !k.is_active()));
    let start = Instant::now();
    let (mut api, mut console) = (StatusCode::OK, false);
    while start.elapsed() < DEADLINE {
        api = s.api_status(&s.key_a).await;
        console = s.signed_out(&session).await;
        if api == StatusCode::UNAUTHORIZED && console {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        api,
        StatusCode::UNAUTHORIZED,
        "API still answers the revoked key"
    );
    assert!(console, "the console session outlived its key");
    // Signing in again with it is refused; the other tenant's key is untouched.
    let (nonce, csrf) = s.sign_in_form("/console/sign-in").await;
    let again = s
        .post_form(
            "/console/sign-in",
            Some(&nonce),
            &[
                ("api_key", s.key_a.as_str()),
                ("csrf", &csrf),
                ("next", "/console/jobs"),
            ],
        )
        .await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
    assert_eq!(s.api_status(&s.key_b).await, StatusCode::OK);
}

#[tokio::test]
async fn sign_out_ends_the_session_server_side_so_a_copied_cookie_is_refused() {
    let s = stack().await;
    let session = s.sign_in(&s.key_a).await;
    let copied = session.clone();
    let other_device = s.sign_in(&s.key_a).await;
    let page = s.get("/console/jobs", Some(&session)).await;
    assert_eq!(page.status, StatusCode::OK);
    let out = s.sign_out(&session, &csrf_of(&page.body)).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    // The cookie cleared in the browser is not enough: a copy of it is refused too, and so is
    // every other session of the key (the key's session epoch moved on).
    assert!(s.signed_out(&copied).await);
    assert!(s.signed_out(&other_device).await);
    // The key itself stays valid, and signing in again works.
    assert_eq!(s.api_status(&s.key_a).await, StatusCode::OK);
    let fresh = s.sign_in(&s.key_a).await;
    assert!(!s.signed_out(&fresh).await);
}
