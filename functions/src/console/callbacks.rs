//! The callbacks page: the tenant's subscriptions (every job's events of the chosen kinds go to a
//! URL), an add form, delete buttons, and the secret deliveries are signed with. Changes go
//! through core's `subscriptions`, as `/v1/subscriptions` does, so both doors check, cap and
//! audit alike.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tuneplane_core::callback::EventKind;
use tuneplane_core::control::subscriptions::{
    self as subscriptions, SubscriptionError, SubscriptionRequest,
};
use tuneplane_core::submit::SCOPE_JOBS_WRITE;

use super::layout::{ConsoleError, Nav, csrf_field, page, respond, time};
use super::viewer::{CsrfForm, CsrfToken, Viewer, WriteForm, encode_component};
use crate::error::ApiError;
use crate::state::AppState;

/// Query of the callbacks page.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Error of the last add, shown above the form.
    #[serde(default)]
    pub error: Option<String>,
}

/// `GET /console/callbacks`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(q): Query<PageQuery>,
) -> Result<Response, ConsoleError> {
    let jobs = state.submit.jobs();
    let tenant = &viewer.principal.tenant;
    let subs = jobs
        .list_subscriptions(tenant)
        .await
        .map_err(ApiError::from)?;
    // The secret is a credential: shown to writers only, made on first use.
    let secret = if viewer.principal.require(SCOPE_JOBS_WRITE).is_ok() {
        Some(
            subscriptions::secret(
                jobs.as_ref(),
                tenant,
                false,
                crate::random::random_bytes::<32>(),
                &viewer.actor(),
                (state.clock)(),
            )
            .await
            .map_err(ApiError::from)?,
        )
    } else {
        None
    };
    let limit = state.submit.config().subscription_limit;
    let body = html! {
        h1 { "Callbacks" }
        p { "Every job's state changes of the kinds you choose are POSTed to each URL below, signed with your tenant's secret. A job can also name callbacks of its own (" code { "notify:" } " in its spec). Deliveries are retried with backoff for a day; deduplicate by the " code { "X-TunePlane-Event-Id" } " header." }
        @if subs.is_empty() {
            p.empty { "No subscriptions." }
        } @else {
            table.subscriptions.cards {
                caption.visually-hidden { "Your subscriptions, oldest first" }
                thead { tr {
                    th scope="col" { "URL" } th scope="col" { "Events" } th scope="col" { "Format" }
                    th scope="col" { "Created" } th scope="col" { span.visually-hidden { "Actions" } }
                } }
                tbody {
                    @for s in &subs {
                        tr data-subscription-id=(s.id) {
                            td data-label="URL" { div { code.url { (subscriptions::redacted(&s.url)) } br; code.small { (s.id) } } }
                            td data-label="Events" {
                                (s.events.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", "))
                            }
                            td data-label="Format" { (s.format.as_str()) }
                            td data-label="Created" { (time(s.created_ms, true)) }
                            td {
                                form method="post" action=(format!("/console/callbacks/{}/delete", s.id))
                                    data-confirm=(format!("Delete the subscription to {}?", subscriptions::redacted(&s.url))) {
                                    (csrf_field(&viewer.csrf))
                                    button.danger type="submit" { "Delete" span.visually-hidden { " " (s.id) } }
                                }
                            }
                        }
                    }
                }
            }
        }
        p.muted { (subs.len()) " of at most " (limit) " subscriptions." }
        section aria-labelledby="add-title" {
            h2 id="add-title" { "Add a subscription" }
            @if let Some(e) = &q.error { p.error role="alert" { (e) } }
            form.stack method="post" action="/console/callbacks" {
                (csrf_field(&viewer.csrf))
                label for="cb-url" { "URL (https://, a public address)" }
                input id="cb-url" name="url" type="url" required maxlength="2048" placeholder="https://hooks.example.com/tuneplane";
                fieldset {
                    legend { "Events (none ticked: every event)" }
                    @for kind in EventKind::ALL {
                        label.inline {
                            input type="checkbox" name=(format!("event_{}", kind.as_str())) value="on";
                            " " (kind.as_str())
                        }
                    }
                }
                label for="cb-format" { "Format" }
                select id="cb-format" name="format" {
                    option value="json" { "json (TunePlane's event)" }
                    option value="slack" { "slack (incoming webhook)" }
                }
                button type="submit" { "Add subscription" }
            }
        }
        @if let Some(secret) = &secret {
            section aria-labelledby="secret-title" {
                h2 id="secret-title" { "Signing secret" }
                details {
                    summary { "Show the secret" }
                    code.secret { (secret.secret) }
                }
                p.help { "Check " code { "X-TunePlane-Signature: t=<unix>,v1=<hex>" } ": HMAC-SHA256 with the secret over " code { "<t>.<raw body>" } ". Rotate it with " code { "tuneplane subscriptions secret --rotate" } "." }
            }
        }
    };
    Ok(respond(
        StatusCode::OK,
        page("Callbacks", Some(&viewer), Nav::Callbacks, body),
    ))
}

/// The add form; each ticked event box posts `event_<kind>=on`.
#[derive(Debug, Deserialize)]
pub struct AddForm {
    /// The session's CSRF token.
    #[serde(default)]
    pub csrf: String,
    /// Where deliveries go.
    #[serde(default)]
    pub url: String,
    /// `json` or `slack`.
    #[serde(default)]
    pub format: String,
    /// The ticked boxes (`event_<kind>`), and anything else posted.
    #[serde(flatten)]
    pub rest: std::collections::BTreeMap<String, String>,
}

impl AddForm {
    /// The ticked events' names.
    fn events(&self) -> Vec<String> {
        self.rest
            .keys()
            .filter_map(|k| k.strip_prefix("event_"))
            .map(str::to_owned)
            .collect()
    }
}

impl CsrfToken for AddForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /console/callbacks`.
pub async fn add(
    State(state): State<Arc<AppState>>,
    WriteForm { viewer, form }: WriteForm<AddForm>,
) -> Result<Response, ConsoleError> {
    let request = SubscriptionRequest {
        url: form.url.trim().to_owned(),
        events: form.events(),
        format: Some(form.format.trim().to_owned()).filter(|f| !f.is_empty()),
    };
    let config = state.submit.config();
    let made = subscriptions::create(
        state.submit.jobs().as_ref(),
        &viewer.principal.tenant,
        &request,
        (
            config.subscription_limit,
            config.defaults.allow_loopback_callbacks,
        ),
        &viewer.actor(),
        (state.clock)(),
    )
    .await;
    let refused = |message: String| {
        let msg = encode_component(&message);
        Ok(Redirect::to(&format!("/console/callbacks?error={msg}")).into_response())
    };
    match made {
        Ok(_) => Ok(Redirect::to("/console/callbacks").into_response()),
        Err(SubscriptionError::Invalid(fields)) => refused(
            fields
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Err(e @ SubscriptionError::Limit { .. }) => refused(e.to_string()),
        Err(e) => Err(ApiError::from(e).into()),
    }
}

/// `POST /console/callbacks/{id}/delete`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    WriteForm { viewer, .. }: WriteForm<CsrfForm>,
) -> Result<Response, ConsoleError> {
    subscriptions::delete(
        state.submit.jobs().as_ref(),
        &viewer.principal.tenant,
        &id,
        &viewer.actor(),
        (state.clock)(),
    )
    .await
    .map_err(ApiError::from)?;
    Ok(Redirect::to("/console/callbacks").into_response())
}
