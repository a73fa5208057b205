//! `POST /v1/pipelines`: several steps submitted as one, each a job that waits for the steps
//! it comes `after` (docs/design.md §7, "Pipelines").

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tuneplane_core::audit::Actor;
use tuneplane_core::submit::pipeline::{PipelineRequest, StepRequest, SubmittedPipeline};
use tuneplane_core::submit::{Origin, SCOPE_JOBS_WRITE, SpecInput};

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

impl PipelineBody {
    /// The core request for `tenant`.
    pub fn into_request(
        self,
        tenant: &tuneplane_core::ids::TenantId,
        idempotency_key: Option<String>,
        origin: Origin,
        actor: Actor,
    ) -> Result<PipelineRequest, ApiError> {
        let mut steps = Vec::with_capacity(self.steps.len());
        for s in self.steps {
            steps.push(StepRequest {
                name: s.name,
                spec: SpecInput::Text(spec_text(&s.spec)?),
                code: code_of(s.code, tenant)?,
                after: s.after,
            });
        }
        Ok(PipelineRequest {
            tenant: tenant.clone(),
            name: self.name,
            steps,
            origin,
            actor,
            idempotency_key,
        })
    }
}

/// The body of a pipeline `body` that is not JSON of the right shape, saying what is expected.
pub fn parse_body(body: &[u8]) -> Result<PipelineBody, ApiError> {
    parse_value(serde_json::from_slice(body))
}

/// [`parse_body`] of a payload already read as JSON (a webhook's).
pub fn parse_payload(payload: Value) -> Result<PipelineBody, ApiError> {
    parse_value(serde_json::from_value(payload))
}

fn parse_value(parsed: serde_json::Result<PipelineBody>) -> Result<PipelineBody, ApiError> {
    parsed.map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!(
                "expected JSON {{\"name\": ..., \"steps\": [{{\"name\": ..., \"spec\": <YAML text or object>, \"code\": {{\"inline\"|\"upload_id\": ...}}, \"after\": [step names]}}]}}: {e}"
            ),
        )
    })
}

/// The answer to a pipeline submission: 201 with every step's job, or 200 with the jobs of the
/// first request for a repeat of its idempotency key (`created` says which).
pub fn submitted_response(done: &SubmittedPipeline) -> Response {
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let steps: Vec<Value> = done
        .steps
        .iter()
        .map(|(name, job)| json!({"step": name, "job": job}))
        .collect();
    let body = json!({
        "pipeline": done.name,
        "steps": steps,
        "notes": done.notes,
        "created": done.created,
    });
    (status, Json(body)).into_response()
}

/// `POST /v1/pipelines`: 201 with every step's job, or nothing stored.
pub async fn submit(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let request = parse_body(&body)?.into_request(
        &principal.tenant,
        None,
        Origin::Api,
        super::api_actor(&principal),
    )?;
    let done = state
        .submit
        .submit_pipeline(request, (state.clock)())
        .await?;
    let ids: Vec<&str> = done.steps.iter().map(|(_, j)| j.id.as_str()).collect();
    tracing::info!(pipeline = %done.name, tenant = %principal.tenant, jobs = ?ids, "pipeline submitted");
    Ok(submitted_response(&done))
}
