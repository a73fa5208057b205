//! The playgrounds page: the tenant's vLLM playgrounds with a TTL countdown and the Kubernetes
//! API-proxy URL, a create form and delete buttons. Create and delete go through the API's own
//! handlers, so the console and `/v1/playgrounds` apply the same rules.

use std::sync::Arc;

use axum::Form;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tuneplane_core::render::playground::proxy_path;
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};

use super::auth::{CsrfForm, Viewer, encode_component};
use super::layout::{ConsoleError, Nav, csrf_field, page, respond, time};
use super::view;
use crate::app::{AppState, Auth};
use crate::error::ApiError;

/// Query of the playgrounds page.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Error of the last create, shown above the form.
    #[serde(default)]
    pub error: Option<String>,
}

/// `GET /console/playgrounds`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(q): Query<PageQuery>,
) -> Result<Response, ConsoleError> {
    viewer.principal.require(SCOPE_JOBS_READ)?;
    let mut mine: Vec<_> = state
        .submit
        .jobs()
        .list_playgrounds()
        .await?
        .into_iter()
        .filter(|p| p.tenant == viewer.principal.tenant)
        .collect();
    mine.sort_by_key(|p| std::cmp::Reverse(p.created_at_ms));
    let series: Vec<String> = match super::capacity::snapshot(&state).await {
        Ok(Some(s)) => s.series.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let namespace = &state.submit.config().defaults.namespace;
    let now = (state.clock)();
    let body = html! {
        h1 { "Playgrounds" }
        p { "A playground serves a model with vLLM on a GPU series until its time runs out. Reach it through the Kubernetes API proxy URL (with your cluster credentials)." }
        div data-refresh="10" id="playgrounds-region" {
            @if mine.is_empty() {
                p.empty { "No playgrounds." }
            } @else {
                table.playgrounds.cards {
                    caption.visually-hidden { "Your playgrounds, newest first" }
                    thead { tr {
                        th scope="col" { "Model" } th scope="col" { "GPUs" } th scope="col" { "Time left" }
                        th scope="col" { "API-proxy URL" } th scope="col" { "Created" } th scope="col" { span.visually-hidden { "Actions" } }
                    } }
                    tbody {
                        @for p in &mine {
                            @let expired = p.expires_at_ms <= now;
                            tr data-playground-id=(p.id) {
                                td data-label="Model" { div { (p.model) br; code.small { (p.id) } } }
                                td data-label="GPUs" { (p.gpus) " × " (p.series) }
                                td data-label="Time left" {
                                    @if expired { "expired, being removed" } @else {
                                        span data-countdown-to=(p.expires_at_ms) { (view::duration(p.expires_at_ms - now)) }
                                    }
                                }
                                td data-label="API-proxy URL" {
                                    @match &p.pod_name {
                                        Some(_) => code.url { (proxy_path(namespace, &p.id)) },
                                        None => span.muted { "starting (pod not created yet)" },
                                    }
                                }
                                td data-label="Created" { (time(p.created_at_ms, true)) }
                                td {
                                    @if !expired {
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
        }
        section aria-labelledby="create-title" {
            h2 id="create-title" { "Create a playground" }
            @if let Some(e) = &q.error { p.error role="alert" { (e) } }
            form.stack method="post" action="/console/playgrounds" {
                (csrf_field(&viewer.csrf))
                label for="pg-model" { "Model" }
                input id="pg-model" name="model" required maxlength="200" placeholder="Qwen/Qwen2.5-0.5B-Instruct";
                label for="pg-series" { "GPU series" }
                @if series.is_empty() {
                    input id="pg-series" name="series" required placeholder="h200";
                } @else {
                    select id="pg-series" name="series" { @for s in &series { option value=(s) { (s) } } }
                }
                label for="pg-gpus" { "GPUs" }
                input id="pg-gpus" name="gpus" type="number" min="1" max="16" value="1" required;
                label for="pg-ttl" { "Lifetime (minutes)" }
                input id="pg-ttl" name="ttl_minutes" type="number" min="1" max="1440" value="60" required;
                button type="submit" { "Create playground" }
            }
        }
    };
    Ok(respond(
        StatusCode::OK,
        page("Playgrounds", Some(&viewer), Nav::Playgrounds, body),
    ))
}

/// The create form.
#[derive(Debug, Deserialize)]
pub struct CreateForm {
    /// CSRF token.
    #[serde(default)]
    pub csrf: String,
    /// Model.
    #[serde(default)]
    pub model: String,
    /// GPU series.
    #[serde(default)]
    pub series: String,
    /// GPUs.
    #[serde(default)]
    pub gpus: String,
    /// Lifetime, minutes.
    #[serde(default)]
    pub ttl_minutes: String,
}

/// `POST /console/playgrounds`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Form(form): Form<CreateForm>,
) -> Result<Response, ConsoleError> {
    viewer.check_csrf(&form.csrf)?;
    viewer.principal.require(SCOPE_JOBS_WRITE)?;
    let (Ok(gpus), Ok(minutes)) = (
        form.gpus.trim().parse::<u32>(),
        form.ttl_minutes.trim().parse::<u64>(),
    ) else {
        let msg = encode_component("GPUs and lifetime must be whole numbers");
        return Ok(Redirect::to(&format!("/console/playgrounds?error={msg}")).into_response());
    };
    let body = serde_json::json!({
        "model": form.model.trim(), "series": form.series.trim(), "gpus": gpus,
        "ttl_seconds": minutes.saturating_mul(60),
    });
    let res = crate::routes::playgrounds::create(
        State(state),
        Auth(viewer.principal.clone()),
        Bytes::from(body.to_string()),
    )
    .await;
    match res {
        Ok(_) => Ok(Redirect::to("/console/playgrounds").into_response()),
        Err(ApiError::BadRequest { message, .. }) => {
            let msg = encode_component(&message.replace(
                "ttl_seconds: between 60 and 86400",
                "lifetime: between 1 and 1440 minutes",
            ));
            Ok(Redirect::to(&format!("/console/playgrounds?error={msg}")).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /console/playgrounds/{id}/delete`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Result<Response, ConsoleError> {
    viewer.check_csrf(&form.csrf)?;
    viewer.principal.require(SCOPE_JOBS_WRITE)?;
    crate::routes::playgrounds::delete(State(state), Auth(viewer.principal.clone()), Path(id))
        .await?;
    Ok(Redirect::to("/console/playgrounds").into_response())
}
