//! The web console: server-rendered HTML pages over the same stores and rules as the `/v1` API,
//! mounted on the same router, so it is served by Lambda behind API Gateway and by `tuneplane dev`
//! alike.
//!
//! - Pages: jobs ([`jobs`]), job detail with the event view and log preview, capacity
//!   ([`capacity`]), playgrounds ([`playgrounds`]) and submit ([`submit`]).
//! - Sign-in with an API key ([`auth`]), the signed-in user of a page ([`viewer`]); the session lives in a signed, expiring, HttpOnly, Secure,
//!   SameSite=Strict cookie ([`session`]); every form carries a CSRF token.
//! - HTML is rendered with `maud`; CSS and a little progressive-enhancement JavaScript (local
//!   times, relative ages, auto-refresh, inline spec validation) are embedded in the binary
//!   ([`assets`]). Every page works without JavaScript.
//!
//! Handlers only fetch, call core, and render; pure view helpers live in [`view`].

pub mod assets;
pub mod auth;
pub mod callbacks;
pub mod capacity;
pub mod error;
pub mod jobs;
pub mod jobs_detail;
pub mod layout;
pub mod logs;
pub mod playgrounds;
pub mod session;
pub mod submit;
pub mod usage;
pub mod view;
pub mod viewer;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

use crate::state::AppState;
use session::SessionKey;

/// Path prefix of every console page.
pub const BASE: &str = "/console";

/// Console settings shared by its handlers (an extension on the console's routes).
#[derive(Debug, Clone)]
pub struct ConsoleKeys {
    /// Signs sessions and CSRF tokens.
    pub session: SessionKey,
}

impl ConsoleKeys {
    /// Keys from the configured secret ([`ENV_CONSOLE_SECRET`](crate::config::ENV_CONSOLE_SECRET), parsed with the rest of the
    /// [`Config`](crate::config::Config)) when set, else a random key for this process, which
    /// suits one-process deployments (`tuneplane dev`).
    pub fn from_config(config: &crate::config::Config) -> ConsoleKeys {
        match &config.console_secret {
            Some(secret) => ConsoleKeys {
                session: SessionKey::from_secret(secret.expose().as_bytes()),
            },
            None => ConsoleKeys::random(),
        }
    }

    /// A random key: sessions end with the process.
    pub fn random() -> ConsoleKeys {
        ConsoleKeys {
            session: SessionKey::random(),
        }
    }
}

/// The console's routes with the given keys, to be merged into the API router (which adds the
/// state, the body limit and the request-id middleware).
pub fn router_with(keys: ConsoleKeys) -> Router<Arc<AppState>> {
    let pages = Router::new()
        .route("/", get(|| async { Redirect::to("/console/jobs") }))
        .route("/sign-in", get(auth::sign_in_page).post(auth::sign_in))
        .route("/sign-out", post(auth::sign_out))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}", get(jobs::detail))
        .route("/jobs/{id}/stop", post(jobs::stop))
        .route("/jobs/{id}/logs", get(jobs::logs_download))
        .route("/jobs/{id}/outputs/{*path}", get(jobs::output_download))
        .route(
            "/jobs/{id}/checkpoints/{*path}",
            get(jobs::checkpoint_download),
        )
        .route("/capacity", get(capacity::page_route))
        .route("/usage", get(usage::page_route))
        .route(
            "/playgrounds",
            get(playgrounds::list).post(playgrounds::create),
        )
        .route("/playgrounds/{id}/delete", post(playgrounds::delete))
        .route("/callbacks", get(callbacks::list).post(callbacks::add))
        .route("/callbacks/{id}/delete", post(callbacks::delete))
        .route("/submit", get(submit::page_route).post(submit::submit))
        .route("/submit/validate", post(submit::validate_route))
        .layer(middleware::from_fn(security_headers))
        .route("/assets/{name}", get(assets::serve));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/jobs") }))
        .nest(BASE, pages)
        .layer(Extension(Arc::new(keys)))
}

/// Headers of every page: a strict content security policy (scripts and styles only from this
/// origin), no framing, no sniffing, no referrer to other sites, and no caching of tenant data.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

// Router-level tests of the console: functions/tests/console_routes.rs.
