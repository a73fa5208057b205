//! The playgrounds page: the tenant's vLLM playgrounds with their state and why (the reason the
//! reconciler recorded from the pod), a TTL countdown and TunePlane's proxy URL, a create
//! form and delete buttons. Create and delete go through core's `ControlService` and listing
//! through the API's own function, so the console and `/v1/playgrounds` apply the same rules.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tuneplane_core::control::ControlError;
use tuneplane_core::job::PendingReason;
use tuneplane_core::playground::{MAX_GPUS, MAX_MODEL_LEN, MAX_TTL_SECONDS, PlaygroundRequest};

use super::layout::{ConsoleError, Nav, csrf_field, page, respond, status_badge, time};
use super::view;
use super::viewer::{CsrfForm, CsrfToken, Viewer, WriteForm, encode_component};
use crate::error::ApiError;
use crate::state::AppState;

/// Query of the playgrounds page.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Error of the last create, shown above the form.
    #[serde(default)]
    pub error: Option<String>,
}

/// Plain words for a playground's reason: a pending reason's, else none.
fn reason_words(reason: &str) -> Option<&'static str> {
    match reason {
        "ServerExited" => Some(
            "The vLLM server exited; it is not restarted. Delete the playground and create another (check the model name and the GPU count).",
        ),
        "PodLost" => Some(
            "The pod disappeared (deleted outside TunePlane or its node went away); it is not recreated.",
        ),
        "TtlExpired" => Some("The pod reached its lifetime."),
        _ => serde_json::from_value::<PendingReason>(serde_json::json!(reason))
            .ok()
            .map(view::pending_words),
    }
}

/// `GET /console/playgrounds`: the tenant's live playgrounds (deleted ones leave the list at
/// once, as in `GET /v1/playgrounds`) with state, reason, TTL countdown and proxy URL.
pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(q): Query<PageQuery>,
) -> Result<Response, ConsoleError> {
    let mine = crate::routes::playgrounds::mine(&state, &viewer.principal.tenant).await?;
    let series: Vec<String> = match super::capacity::snapshot(&state).await {
        Ok(Some(s)) => s.series.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let now = (state.clock)();
    let body = html! {
        h1 { "Playgrounds" }
        p { "A playground serves a model with vLLM on a GPU series until its time runs out. It waits its turn like a job when your quota or the fleet is full. Reach it through TunePlane's proxy URL with your API key, e.g. " code { "curl -H 'Authorization: Bearer $TUNEPLANE_API_KEY' $TUNEPLANE_API<url>v1/models" } "." }
        div data-refresh="10" id="playgrounds-region" {
            @if mine.is_empty() {
                p.empty { "No playgrounds." }
            } @else {
                table.playgrounds.cards {
                    caption.visually-hidden { "Your playgrounds, newest first" }
                    thead { tr {
                        th scope="col" { "Model" } th scope="col" { "GPUs" } th scope="col" { "State" } th scope="col" { "Time left" }
                        th scope="col" { "Proxy URL" } th scope="col" { "Created" } th scope="col" { span.visually-hidden { "Actions" } }
                    } }
                    tbody {
                        @for v in &mine {
                            @let p = &v.record;
                            tr data-playground-id=(p.id) data-state=(v.state.as_str()) {
                                td data-label="Model" { div { (p.model) br; code.small { (p.id) } } }
                                td data-label="GPUs" { (p.gpus) " × " (p.series) }
                                td data-label="State" { div {
                                    (status_badge(v.state.as_str()))
                                    @if let Some(r) = &v.reason {
                                        br; span.reason { (r) }
                                        @if let Some(words) = reason_words(r) { br; span.help { (words) } }
                                    }
                                    @if let Some(m) = &v.message {
                                        br; span.muted.message { (m) }
                                    }
                                } }
                                td data-label="Time left" {
                                    span data-countdown-to=(p.expires_at_ms) { (view::duration(p.expires_at_ms - now)) }
                                }
                                td data-label="Proxy URL" {
                                    @match &v.proxy_path {
                                        Some(url) => code.url { (url) },
                                        None => span.muted { "once the pod exists" },
                                    }
                                }
                                td data-label="Created" { (time(p.created_at_ms, true)) }
                                td {
                                    form method="post" action=(format!("/console/playgrounds/{}/delete", p.id))
                                        data-confirm=(format!("Delete playground {}?", p.model)) {
                                        (csrf_field(&viewer.csrf))
                                        button.danger type="submit" { "Delete" span.visually-hidden { " " (p.model) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        section aria-labelledby="create-title" {
            h2 id="create-title" { "Create a playground" }
            @if let Some(e) = &q.error { p.error role="alert" { (e) } }
            form.stack method="post" action="/console/playgrounds" {
                (csrf_field(&viewer.csrf))
                label for="pg-model" { "Model" }
                input id="pg-model" name="model" required maxlength=(MAX_MODEL_LEN) placeholder="Qwen/Qwen2.5-0.5B-Instruct";
                label for="pg-series" { "GPU series" }
                @if series.is_empty() {
                    input id="pg-series" name="series" required placeholder="h200";
                } @else {
                    select id="pg-series" name="series" { @for s in &series { option value=(s) { (s) } } }
                }
                label for="pg-gpus" { "GPUs" }
                input id="pg-gpus" name="gpus" type="number" min="1" max=(MAX_GPUS) value="1" required;
                label for="pg-ttl" { "Lifetime (minutes)" }
                input id="pg-ttl" name="ttl_minutes" type="number" min="1" max=(MAX_TTL_SECONDS / 60) value="60" required;
                button type="submit" { "Create playground" }
            }
        }
    };
    Ok(respond(
        StatusCode::OK,
        page("Playgrounds", Some(&viewer), Nav::Playgrounds, body),
    ))
}

/// The create form. Every field is text as typed (missing ones empty): [`create`] trims them and
/// parses the numbers, so a bad value comes back as a message above the form, not a 422.
#[derive(Debug, Deserialize)]
pub struct CreateForm {
    /// The session's CSRF token, from the form's hidden field.
    #[serde(default)]
    pub csrf: String,
    /// Model to serve (a Hugging Face id or a path the image knows).
    #[serde(default)]
    pub model: String,
    /// GPU series, as in the capacity snapshot (`h200`).
    #[serde(default)]
    pub series: String,
    /// GPU count; must be a whole number.
    #[serde(default)]
    pub gpus: String,
    /// Lifetime in minutes (the API takes seconds); must be a whole number.
    #[serde(default)]
    pub ttl_minutes: String,
}

impl CsrfToken for CreateForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /console/playgrounds`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    WriteForm { viewer, form }: WriteForm<CreateForm>,
) -> Result<Response, ConsoleError> {
    let (Ok(gpus), Ok(minutes)) = (
        form.gpus.trim().parse::<u32>(),
        form.ttl_minutes.trim().parse::<u64>(),
    ) else {
        let msg = encode_component("GPUs and lifetime must be whole numbers");
        return Ok(Redirect::to(&format!("/console/playgrounds?error={msg}")).into_response());
    };
    let request = PlaygroundRequest {
        model: form.model.trim(),
        series: form.series.trim(),
        gpus,
        ttl_seconds: minutes.saturating_mul(60),
    };
    // The service the API's create route calls too.
    let created = state
        .control()
        .create_playground(
            &viewer.principal.tenant,
            &request,
            (state.new_id)("pg"),
            crate::random::new_server_key(),
            (state.clock)(),
            &viewer.actor(),
        )
        .await;
    match created {
        Ok(_) => Ok(Redirect::to("/console/playgrounds").into_response()),
        Err(ControlError::InvalidPlayground(fields)) => {
            // The form asks for minutes: say so for the lifetime.
            let lines: Vec<String> = fields
                .iter()
                .map(|f| match f.path.as_str() {
                    "ttl_seconds" => format!(
                        "lifetime: give between 1 and {} minutes",
                        MAX_TTL_SECONDS / 60
                    ),
                    _ => f.to_string(),
                })
                .collect();
            let msg = encode_component(&lines.join("; "));
            Ok(Redirect::to(&format!("/console/playgrounds?error={msg}")).into_response())
        }
        Err(e) => Err(ApiError::from(e).into()),
    }
}

/// `POST /console/playgrounds/{id}/delete`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    WriteForm { viewer, .. }: WriteForm<CsrfForm>,
) -> Result<Response, ConsoleError> {
    state
        .control()
        .delete_playground(
            &viewer.principal.tenant,
            &id,
            (state.clock)(),
            &viewer.actor(),
        )
        .await
        .map_err(ApiError::from)?;
    Ok(Redirect::to("/console/playgrounds").into_response())
}
