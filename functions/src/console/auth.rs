//! Sign-in with an API key and sign-out; the signed-in user is [`super::viewer::Viewer`].
//!
//! The API key travels once, in the body of the sign-in POST; it is never put in a URL, a log
//! line or the cookie (see [`super::session`]).

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tuneplane_core::store::ApiKeyChange;
use tuneplane_core::store::hash_api_key;
use tuneplane_core::submit::{API_KEY_PREFIX, SCOPE_JOBS_READ, principal_of};

use super::ConsoleKeys;
use super::layout::{ConsoleError, Nav, csrf_field, page, respond};
use super::session::{
    SESSION_COOKIE, SESSION_TTL_SECONDS, SIGNIN_COOKIE, SIGNIN_TTL_SECONDS, cookie, set_cookie,
};
use super::viewer::{CsrfForm, SessionForm, now_s, safe_next, same_origin};
use crate::state::AppState;

/// Query of the sign-in page.
#[derive(Debug, Deserialize)]
pub struct SignInQuery {
    /// Page to return to.
    #[serde(default)]
    pub next: Option<String>,
}

/// Body of the sign-in form.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    /// The API key (`tp_...`).
    #[serde(default)]
    pub api_key: String,
    /// Sign-in CSRF token.
    #[serde(default)]
    pub csrf: String,
    /// Page to return to.
    #[serde(default)]
    pub next: String,
}

fn sign_in_form(keys: &ConsoleKeys, next: &str, error: Option<&str>) -> Response {
    let nonce = keys.session.signin_nonce();
    let token = keys.session.signin_token(&nonce);
    let body = html! {
        section.signin aria-labelledby="signin-title" {
            h1 id="signin-title" { "Sign in" }
            p { "Sign in with a TunePlane API key. It is checked once and kept only as a signed session cookie." }
            @if let Some(e) = error {
                p.error role="alert" id="signin-error" { (e) }
            }
            form method="post" action="/console/sign-in" {
                (csrf_field(&token))
                input type="hidden" name="next" value=(safe_next(next));
                label for="api_key" { "API key" }
                input id="api_key" name="api_key" type="password" required autocomplete="off"
                    spellcheck="false" placeholder="tp_…" aria-describedby=[error.map(|_| "signin-error")];
                button type="submit" { "Sign in" }
            }
        }
    };
    let status = if error.is_some() {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    let mut res = respond(status, page("Sign in", None, Nav::None, body));
    if let Ok(v) = set_cookie(SIGNIN_COOKIE, &nonce, "/console", SIGNIN_TTL_SECONDS).parse() {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    res
}

/// `GET /console/sign-in`.
pub async fn sign_in_page(
    axum::Extension(keys): axum::Extension<Arc<ConsoleKeys>>,
    Query(q): Query<SignInQuery>,
) -> Response {
    sign_in_form(&keys, q.next.as_deref().unwrap_or("/console/jobs"), None)
}

/// `POST /console/sign-in`.
pub async fn sign_in(
    State(state): State<Arc<AppState>>,
    axum::Extension(keys): axum::Extension<Arc<ConsoleKeys>>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    let nonce = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| cookie(h, SIGNIN_COOKIE))
        .unwrap_or_default();
    if !same_origin(&headers) || !keys.session.check_signin_token(nonce, &form.csrf) {
        return sign_in_form(
            &keys,
            &form.next,
            Some("The sign-in form expired; please try again."),
        );
    }
    let secret = form.api_key.trim();
    let refused = || {
        tracing::info!("console sign-in refused: unknown or revoked key");
        sign_in_form(&keys, &form.next, Some("That API key is not valid."))
    };
    if !secret.starts_with(API_KEY_PREFIX) || secret.len() > 200 {
        return refused();
    }
    let key_sha256 = hash_api_key(secret);
    let record = match state.submit.jobs().get_api_key(&key_sha256).await {
        Ok(Some(record)) => record,
        Ok(None) => return refused(),
        Err(e) => return ConsoleError::from(e).into_response(),
    };
    let epoch = record.session_epoch;
    let Ok(principal) = principal_of(record) else {
        return refused();
    };
    if principal.require(SCOPE_JOBS_READ).is_err() {
        return sign_in_form(&keys, &form.next, Some("That API key may not read jobs."));
    }
    tracing::info!(tenant = %principal.tenant, key = %principal.key_name, "console sign-in");
    let value = keys.session.issue(&key_sha256, epoch, now_s(&state));
    let mut res = Redirect::to(safe_next(&form.next)).into_response();
    for c in [
        set_cookie(SESSION_COOKIE, &value, "/", SESSION_TTL_SECONDS),
        set_cookie(SIGNIN_COOKIE, "", "/console", 0),
    ] {
        if let Ok(v) = c.parse() {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

/// `POST /console/sign-out`: ends the session server-side by raising the key's session epoch in
/// the store (every console session of this key ends, on every device), then clears the cookie.
pub async fn sign_out(
    State(state): State<Arc<AppState>>,
    SessionForm { viewer, .. }: SessionForm<CsrfForm>,
) -> Result<Response, ConsoleError> {
    state
        .submit
        .jobs()
        .update_api_key(&viewer.key_sha256, ApiKeyChange::EndSessions)
        .await?;
    tracing::info!(tenant = %viewer.principal.tenant, key = %viewer.principal.key_name, "console sign-out");
    let mut res = Redirect::to("/console/sign-in").into_response();
    if let Ok(v) = set_cookie(SESSION_COOKIE, "", "/", 0).parse() {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(res)
}
