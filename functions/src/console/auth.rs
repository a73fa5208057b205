//! Sign-in with an API key, sign-out, and the [`Viewer`] extractor every page uses.
//!
//! The API key travels once, in the body of the sign-in POST; it is never put in a URL, a log
//! line or the cookie (see [`super::session`]). Every state-changing request must carry the CSRF
//! token of its session and, when the browser says where it comes from (`Origin`,
//! `Sec-Fetch-Site`), come from this origin.

use std::sync::Arc;

use axum::Form;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tuneplane_core::store::ApiKeyChange;
use tuneplane_core::store::hash_api_key;
use tuneplane_core::submit::{API_KEY_PREFIX, Principal, SCOPE_JOBS_READ, principal_of};

use super::ConsoleKeys;
use super::layout::{ConsoleError, Nav, csrf_field, page, respond};
use super::session::{
    SESSION_COOKIE, SESSION_TTL_SECONDS, SIGNIN_COOKIE, SIGNIN_TTL_SECONDS, cookie, set_cookie,
};
use crate::app::AppState;

/// A signed-in console user.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// Tenant, scopes and key label of the API key behind the session.
    pub principal: Principal,
    /// Session id.
    pub sid: String,
    /// SHA-256 of the API key behind the session (sign-out ends this key's sessions).
    pub key_sha256: String,
    /// The session's CSRF token (put in every form).
    pub csrf: String,
    keys: Arc<ConsoleKeys>,
}

impl Viewer {
    /// Fails unless `token` is this session's CSRF token.
    pub fn check_csrf(&self, token: &str) -> Result<(), ConsoleError> {
        if self.keys.session.check_csrf(&self.sid, token) {
            Ok(())
        } else {
            Err(ConsoleError::Csrf)
        }
    }
}

fn now_s(state: &AppState) -> i64 {
    (state.clock)() / 1000
}

fn keys_of(parts: &Parts) -> Option<Arc<ConsoleKeys>> {
    parts.extensions.get::<Arc<ConsoleKeys>>().cloned()
}

/// True unless the browser reports a cross-origin request (`Sec-Fetch-Site`, or an `Origin`
/// whose host differs from `Host`).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    match (get("origin"), get("host")) {
        // An opaque origin (`null`) says nothing; the CSRF token still has to match.
        (Some("null"), _) => true,
        (Some(origin), Some(host)) => {
            let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            origin_host.eq_ignore_ascii_case(host)
        }
        _ => true,
    }
}

/// A redirect to the sign-in page that comes back to `parts`' page afterwards.
fn to_sign_in(parts: &Parts) -> Response {
    // Console routes are nested under BASE, which the nested router strips from the URI.
    let next = match parts.uri.path_and_query() {
        Some(p) if parts.method == Method::GET => format!("{}{}", super::BASE, p.as_str()),
        _ => "/console/jobs".to_owned(),
    };
    let location = format!(
        "/console/sign-in?next={}",
        encode_component(safe_next(&next))
    );
    Redirect::to(&location).into_response()
}

/// `next` if it is a console path of this site, else the jobs page (no open redirects).
pub fn safe_next(next: &str) -> &str {
    let ok = next.starts_with("/console/")
        && !next.contains("//")
        && !next.contains('\\')
        && next.len() <= 512
        && next.bytes().all(|b| b.is_ascii_graphic());
    if ok { next } else { "/console/jobs" }
}

/// Percent-encodes everything but unreserved characters.
pub fn encode_component(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl FromRequestParts<Arc<AppState>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let Some(keys) = keys_of(parts) else {
            return Err((StatusCode::INTERNAL_SERVER_ERROR, "console keys missing").into_response());
        };
        if parts.method != Method::GET && !same_origin(&parts.headers) {
            return Err(ConsoleError::Csrf.into_response());
        }
        let session = parts
            .headers
            .get(header::COOKIE)
            .and_then(|v| v.to_str().ok())
            .and_then(|h| cookie(h, SESSION_COOKIE))
            .and_then(|v| keys.session.open(v, now_s(state)));
        let Some(session) = session else {
            return Err(to_sign_in(parts));
        };
        let record = state
            .submit
            .jobs()
            .get_api_key(&session.key_sha256)
            .await
            .map_err(|e| ConsoleError::from(e).into_response())?;
        // A revoked key, or a sign-out since this session was issued (a newer epoch), ends it.
        let Some(record) = record.filter(|r| r.session_epoch == session.epoch) else {
            return Err(to_sign_in(parts));
        };
        let Ok(principal) = principal_of(record) else {
            return Err(to_sign_in(parts));
        };
        let csrf = keys.session.csrf_token(&session.sid);
        Ok(Viewer {
            principal,
            sid: session.sid,
            key_sha256: session.key_sha256,
            csrf,
            keys,
        })
    }
}

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

/// Body of forms that carry only the CSRF token.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    /// CSRF token.
    #[serde(default)]
    pub csrf: String,
}

/// `POST /console/sign-out`: ends the session server-side by raising the key's session epoch in
/// the store (every console session of this key ends, on every device), then clears the cookie.
pub async fn sign_out(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Form(form): Form<CsrfForm>,
) -> Result<Response, ConsoleError> {
    viewer.check_csrf(&form.csrf)?;
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
