//! The [`Viewer`] extractor every console page uses: the signed-in user of a request.
//!
//! Every state-changing request must carry the CSRF token of its session and, when the browser
//! says where it comes from (`Origin`, `Sec-Fetch-Site`), come from this origin.

use std::sync::Arc;

use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tuneplane_core::submit::{Principal, SCOPE_JOBS_READ, principal_of};

use super::ConsoleKeys;
use super::error::ConsoleError;
use super::session::{SESSION_COOKIE, cookie};
use crate::state::AppState;

/// A signed-in console user; its key holds `jobs:read` (extraction refuses a session whose key
/// does not).
#[derive(Debug, Clone)]
pub struct Viewer {
    /// Tenant, scopes and key label of the API key behind the session.
    pub principal: Principal,
    /// Random session id (hex) from the signed cookie; the CSRF token is derived from it.
    pub sid: String,
    /// SHA-256 of the API key behind the session (sign-out ends this key's sessions).
    pub key_sha256: String,
    /// The session's CSRF token (put in every form).
    pub csrf: String,
    keys: Arc<ConsoleKeys>,
}

impl Viewer {
    /// The signed-in key as the actor of the changes a console request makes.
    pub fn actor(&self) -> tuneplane_core::audit::Actor {
        self.principal.actor(
            tuneplane_core::audit::AuditSource::Console,
            &crate::error::current_request_id(),
        )
    }

    /// Fails unless `token` is this session's CSRF token.
    pub fn check_csrf(&self, token: &str) -> Result<(), ConsoleError> {
        if self.keys.session.check_csrf(&self.sid, token) {
            Ok(())
        } else {
            Err(ConsoleError::Csrf)
        }
    }

    /// Fails unless `token` is this session's CSRF token and the key may write jobs: the check
    /// of every form that changes a job or a playground.
    pub fn check_write(&self, token: &str) -> Result<(), ConsoleError> {
        self.check_csrf(token)?;
        self.principal
            .require(tuneplane_core::submit::SCOPE_JOBS_WRITE)?;
        Ok(())
    }
}

pub(super) fn now_s(state: &AppState) -> i64 {
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
        // Sign-in admits only keys that may read jobs, and a key's scopes never change: every page
        // can rely on it.
        principal
            .require(SCOPE_JOBS_READ)
            .map_err(|e| ConsoleError::from(e).into_response())?;
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

/// A form body that carries the session's CSRF token (a hidden `csrf` field).
pub trait CsrfToken {
    /// The token as posted (empty when the field is missing).
    fn csrf(&self) -> &str;
}

/// Body of forms that carry only the CSRF token.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    /// The session's CSRF token, from the form's hidden field.
    #[serde(default)]
    pub csrf: String,
}

impl CsrfToken for CsrfForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// A form posted by the signed-in user whose CSRF token has been checked ([`Viewer::check_csrf`],
/// or [`Viewer::check_write`] when `WRITE`), so a handler that takes one cannot forget the check.
/// Use it through [`WriteForm`] or [`SessionForm`].
///
/// Extraction fails as [`Viewer`]'s does (sign-in redirect, cross-origin refusal), then as
/// [`Form`]'s does, then with the check's error.
#[derive(Debug)]
pub struct Posted<T, const WRITE: bool> {
    /// The signed-in user.
    pub viewer: Viewer,
    /// The form's fields.
    pub form: T,
}

/// A form that changes a job or a playground: the CSRF token and the `jobs:write` scope checked.
pub type WriteForm<T> = Posted<T, true>;

/// A form that changes no job (sign-out, the editor's inline validation): the CSRF token checked,
/// any scope accepted.
pub type SessionForm<T> = Posted<T, false>;

impl<T, const WRITE: bool> FromRequest<Arc<AppState>> for Posted<T, WRITE>
where
    T: DeserializeOwned + CsrfToken + Send,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let viewer = Viewer::from_request_parts(&mut parts, state).await?;
        let Form(form) = Form::<T>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let checked = if WRITE {
            viewer.check_write(form.csrf())
        } else {
            viewer.check_csrf(form.csrf())
        };
        checked.map_err(IntoResponse::into_response)?;
        Ok(Self { viewer, form })
    }
}
