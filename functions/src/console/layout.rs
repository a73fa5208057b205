//! The page shell (head, skip link, navigation, footer), small shared fragments (times, status
//! badges, CSRF fields) and the console's error page.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

pub use super::error::ConsoleError;
use super::view;
use super::viewer::Viewer;
use crate::error::current_request_id;

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// Jobs list and job detail.
    Jobs,
    /// `/console/submit`, the spec editor and code upload.
    Submit,
    /// `/console/capacity`, GPUs per series and node.
    Capacity,
    /// `/console/playgrounds`, the vLLM playgrounds list and create form.
    Playgrounds,
    /// `/console/usage`, GPU-hours per day and series.
    Usage,
    /// `/console/callbacks`, the tenant's subscriptions and signing secret.
    Callbacks,
    /// Sign-in and error pages.
    None,
}

const NAV: &[(Nav, &str, &str)] = &[
    (Nav::Jobs, "/console/jobs", "Jobs"),
    (Nav::Submit, "/console/submit", "Submit"),
    (Nav::Capacity, "/console/capacity", "Capacity"),
    (Nav::Playgrounds, "/console/playgrounds", "Playgrounds"),
    (Nav::Usage, "/console/usage", "Usage"),
    (Nav::Callbacks, "/console/callbacks", "Callbacks"),
];

/// A whole HTML page.
pub fn page(title: &str, viewer: Option<&Viewer>, active: Nav, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { (title) " · TunePlane" }
                link rel="stylesheet" href=(super::assets::CSS_PATH);
                script src=(super::assets::JS_PATH) defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/console/jobs" { "TunePlane" }
                    @if let Some(v) = viewer {
                        nav aria-label="Main" {
                            ul {
                                @for (nav, href, label) in NAV {
                                    li {
                                        @if *nav == active {
                                            a href=(href) aria-current="page" { (label) }
                                        } @else {
                                            a href=(href) { (label) }
                                        }
                                    }
                                }
                            }
                        }
                        form.signout method="post" action="/console/sign-out" {
                            (csrf_field(&v.csrf))
                            span.who { "Tenant " strong { (v.principal.tenant) } }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" tabindex="-1" { (body) }
                footer { "TunePlane " (tuneplane_core::constants::PLATFORM_VERSION) }
            }
        }
    }
}

/// The hidden CSRF field of a form.
pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// The hidden caption and the header row of a table: one column heading per name.
pub fn table_head(caption: &str, columns: &[&str]) -> Markup {
    html! {
        caption.visually-hidden { (caption) }
        thead { tr {
            @for c in columns { th scope="col" { (c) } }
        } }
    }
}

/// A `<time>` in UTC that the script rewrites into local time; `relative` adds "(3 min ago)".
pub fn time(ms: i64, relative: bool) -> Markup {
    let iso = view::iso_utc(ms);
    html! {
        time datetime=(iso) data-ms=(ms) data-relative[relative] { (view::display_utc(ms)) }
    }
}

/// A ticking clock: `ms` elapsed, still counting from `start_ms` when `running`.
pub fn clock(ms: i64, start_ms: i64, running: bool) -> Markup {
    html! {
        @if running {
            span.clock data-clock-start=(start_ms) { (view::duration(ms)) }
        } @else {
            span.clock { (view::duration(ms)) }
        }
    }
}

/// A status badge (`QUEUED`, `RUNNING`, ...).
pub fn status_badge(state: &str) -> Markup {
    html! { span class=(format!("badge s-{}", state.to_ascii_lowercase())) { (state) } }
}

/// `markup` as a `text/html; charset=utf-8` answer with `status`.
pub fn respond(status: StatusCode, markup: Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

/// Raw, trusted markup (for pre-built fragments).
pub fn raw(s: String) -> PreEscaped<String> {
    PreEscaped(s)
}

// The page a `ConsoleError` is shown as: the type lives in `error.rs`, below the viewer that
// raises it, and its page here with the rest of the layout.
impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let request_id = current_request_id();
        let (status, message) = match &self {
            ConsoleError::Api(e) => {
                let (status, body) = e.to_body(&request_id);
                if status.is_server_error() {
                    tracing::error!(request_id = %request_id, error = ?e, "console internal error");
                }
                let msg = body["error"]["message"]
                    .as_str()
                    .unwrap_or("error")
                    .to_owned();
                (status, msg)
            }
            ConsoleError::Csrf => (StatusCode::FORBIDDEN, self.to_string()),
            ConsoleError::BadRequest(m) => (StatusCode::BAD_REQUEST, m.clone()),
        };
        let title = status.canonical_reason().unwrap_or("Error");
        let body = html! {
            h1 { (title) }
            p.error role="alert" { (message) }
            p { a href="/console/jobs" { "Back to jobs" } }
        };
        respond(status, page(title, None, Nav::None, body))
    }
}
