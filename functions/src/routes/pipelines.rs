//! `POST /v1/pipelines`: several steps submitted as one, each a job that waits for the steps
//! it comes `after` (docs/design.md §7, "Pipelines").

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tuneplane_core::submit::pipeline::{PipelineRequest, StepRequest};
use tuneplane_core::submit::{Origin, SCOPE_JOBS_WRITE};

use super::submission::{CodeBody, code_of, spec_text};
use crate::error::ApiError;
use crate::state::{AppState, Auth, JsonBody};

/// A pipeline body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineBody {
    /// The pipeline's name.
    pub name: String,
    /// Its steps.
    pub steps: Vec<StepBody>,
}

/// One step of a pipeline body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepBody {
    /// Its name, unique in the pipeline.
    pub name: String,
    /// Its JobSpec (YAML/JSON text or a JSON object).
    pub spec: Value,
    /// Its code, as in `POST /v1/jobs`.
    pub code: CodeBody,
    /// The steps it waits for.
    #[serde(default)]
    pub after: Vec<String>,
}

/// `POST /v1/pipelines`: 201 with every step's job, or nothing stored.
pub async fn submit(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let body: PipelineBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!(
                "expected JSON {{\"name\": ..., \"steps\": [{{\"name\": ..., \"spec\": <YAML text or object>, \"code\": {{\"inline\"|\"upload_id\": ...}}, \"after\": [step names]}}]}}: {e}"
            ),
        )
    })?;
    let mut steps = Vec::with_capacity(body.steps.len());
    for s in body.steps {
        steps.push(StepRequest {
            name: s.name,
            spec: spec_text(&s.spec)?,
            code: code_of(s.code, &principal.tenant)?,
            after: s.after,
        });
    }
    let request = PipelineRequest {
        tenant: principal.tenant.clone(),
        name: body.name,
        steps,
        origin: Origin::Api,
        actor: super::api_actor(&principal),
    };
    let done = state
        .submit
        .submit_pipeline(request, (state.clock)())
        .await?;
    let ids: Vec<&str> = done.steps.iter().map(|(_, j)| j.id.as_str()).collect();
    tracing::info!(pipeline = %done.name, tenant = %principal.tenant, jobs = ?ids, "pipeline submitted");
    let steps: Vec<Value> = done
        .steps
        .iter()
        .map(|(name, job)| json!({"step": name, "job": job}))
        .collect();
    Ok((
        StatusCode::CREATED,
        Json(json!({"pipeline": done.name, "steps": steps, "notes": done.notes})),
    )
        .into_response())
}
