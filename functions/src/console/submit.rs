//! The submit page: a code archive and a JobSpec (a YAML editor whose problems are shown inline,
//! from the same validator submission uses), with an idempotency key generated per form, so a
//! double click or a resubmitted form never starts a second job.

use std::sync::Arc;

use axum::extract::{Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use tuneplane_core::spec::{FieldError, validate};
use tuneplane_core::submit::{
    Code, Origin, SCOPE_JOBS_WRITE, SpecInput, SubmitError, SubmitRequest,
};

use super::layout::{ConsoleError, Nav, csrf_field, page, respond};
use super::viewer::{CsrfToken, SessionForm, Viewer};
use crate::config::MAX_INLINE_CODE_BYTES;
use crate::state::AppState;

/// The spec the editor starts with.
const STARTER_SPEC: &str = "name: hello-cpu\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";

/// What the form shows besides the editor.
#[derive(Debug, Default)]
struct FormState {
    spec: String,
    idempotency_key: String,
    spec_errors: Vec<FieldError>,
    code_error: Option<String>,
    notes: Vec<String>,
}

fn new_idempotency_key() -> String {
    crate::random::random_id("console")
}

/// The list of spec problems (or a positive note), the fragment inline validation swaps in.
pub fn spec_feedback(errors: &[FieldError], checked: bool) -> Markup {
    html! {
        div id="spec-feedback" aria-live="polite" {
            @if !errors.is_empty() {
                p.error id="spec-errors-title" { (errors.len()) " problem" @if errors.len() != 1 { "s" } " in the spec:" }
                ul.field-errors aria-labelledby="spec-errors-title" {
                    @for e in errors {
                        li { @if !e.path.is_empty() { code { (e.path) } ": " } (e.message) }
                    }
                }
            } @else if checked {
                p.ok { "The spec is valid." }
            }
        }
    }
}

fn form(viewer: &Viewer, f: &FormState) -> Markup {
    html! {
        h1 { "Submit a job" }
        form.stack method="post" action="/console/submit" enctype="multipart/form-data" id="submit-form" {
            (csrf_field(&viewer.csrf))
            input type="hidden" name="idempotency_key" value=(f.idempotency_key);
            label for="code" { "Code archive (.zip, .tar, .tar.gz)" }
            input id="code" name="code" type="file" required accept=".zip,.tar,.tar.gz,.tgz"
                aria-describedby="code-help" aria-invalid=[f.code_error.as_ref().map(|_| "true")];
            p.help id="code-help" { "Your files, with the entrypoint at the archive root; at most 4 MiB." }
            @if let Some(e) = &f.code_error { p.error role="alert" id="code-error" { (e) } }
            label for="spec" { "JobSpec (YAML or JSON)" }
            textarea id="spec" name="spec" rows="16" spellcheck="false" required autocapitalize="off"
                aria-describedby="spec-feedback" aria-invalid=[(!f.spec_errors.is_empty()).then_some("true")]
                data-validate="/console/submit/validate" { (f.spec) }
            (spec_feedback(&f.spec_errors, false))
            @for n in &f.notes { p.muted { (n) } }
            button type="submit" { "Submit job" }
        }
    }
}

/// `GET /console/submit`.
pub async fn page_route(viewer: Viewer) -> Result<Response, ConsoleError> {
    viewer.principal.require(SCOPE_JOBS_WRITE)?;
    let f = FormState {
        spec: STARTER_SPEC.into(),
        idempotency_key: new_idempotency_key(),
        ..FormState::default()
    };
    Ok(respond(
        StatusCode::OK,
        page("Submit", Some(&viewer), Nav::Submit, form(&viewer, &f)),
    ))
}

/// Body of the inline validation request.
#[derive(Debug, Deserialize)]
pub struct ValidateForm {
    /// The session's CSRF token, from the form's hidden field.
    #[serde(default)]
    pub csrf: String,
    /// The editor's JobSpec text (YAML or JSON), validated as a submission would be.
    #[serde(default)]
    pub spec: String,
}

impl CsrfToken for ValidateForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Validates `text` as submission would (with the published fleet shape, if any).
async fn check_spec(
    state: &AppState,
    text: &str,
) -> Result<Result<Vec<String>, Vec<FieldError>>, ConsoleError> {
    let shape = state.submit.fleet_shape().await?;
    Ok(
        match validate(text, shape.as_ref(), &state.submit.config().defaults) {
            Ok(v) => Ok(v.notes),
            Err(e) => Err(e.0),
        },
    )
}

/// `POST /console/submit/validate`: the feedback fragment for the editor (progressive enhancement).
pub async fn validate_route(
    State(state): State<Arc<AppState>>,
    SessionForm { form, .. }: SessionForm<ValidateForm>,
) -> Result<Response, ConsoleError> {
    let errors = check_spec(&state, &form.spec)
        .await?
        .err()
        .unwrap_or_default();
    Ok(respond(StatusCode::OK, spec_feedback(&errors, true)))
}

/// `POST /console/submit` (multipart: csrf, idempotency_key, spec, code).
pub async fn submit(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    mut multipart: Multipart,
) -> Result<Response, ConsoleError> {
    let mut f = FormState::default();
    let (mut csrf, mut code) = (String::new(), None::<Vec<u8>>);
    let bad = |e: axum::extract::multipart::MultipartError| {
        ConsoleError::BadRequest(format!("the form could not be read: {e}"))
    };
    // Bounded: a form has four fields; anything beyond is ignored after a few extra parts.
    for _ in 0..8 {
        let Some(mut field) = multipart.next_field().await.map_err(bad)? else {
            break;
        };
        match field.name().unwrap_or_default() {
            "csrf" => csrf = field.text().await.map_err(bad)?,
            "idempotency_key" => f.idempotency_key = field.text().await.map_err(bad)?,
            "spec" => f.spec = field.text().await.map_err(bad)?,
            "code" => {
                let mut bytes = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(bad)? {
                    if bytes.len() + chunk.len() > MAX_INLINE_CODE_BYTES {
                        f.code_error = Some(format!(
                            "the archive is over {} MiB; submit larger code with the CLI",
                            MAX_INLINE_CODE_BYTES >> 20
                        ));
                        bytes.clear();
                        break;
                    }
                    bytes.extend_from_slice(&chunk);
                }
                if f.code_error.is_none() {
                    code = Some(bytes)
                }
            }
            _ => {}
        }
    }
    viewer.check_write(&csrf)?;
    if f.idempotency_key.is_empty() {
        f.idempotency_key = new_idempotency_key();
    }
    // Spec problems first, all of them, with the same validator the service runs.
    if let Err(errors) = check_spec(&state, &f.spec).await? {
        f.spec_errors = errors;
    }
    let code = code.filter(|c| !c.is_empty());
    if code.is_none() && f.code_error.is_none() {
        f.code_error = Some("choose a code archive".into());
    }
    let (Some(code), true, None) = (code, f.spec_errors.is_empty(), &f.code_error) else {
        return Ok(rejected(&viewer, f));
    };
    let request = SubmitRequest {
        tenant: viewer.principal.tenant.clone(),
        spec: SpecInput::Text(f.spec.clone()),
        code: Code::Archive(code),
        idempotency_key: Some(f.idempotency_key.clone()),
        origin: Origin::Console,
        actor: viewer.actor(),
    };
    match state.submit.submit(request, (state.clock)()).await {
        Ok(s) => {
            tracing::info!(job_id = %s.job.id, tenant = %viewer.principal.tenant, created = s.created, "console submit");
            let notice = if s.created { "submitted" } else { "existing" };
            Ok(
                Redirect::to(&format!("/console/jobs/{}?notice={notice}", s.job.id))
                    .into_response(),
            )
        }
        Err(SubmitError::InvalidSpec(errors)) => {
            f.spec_errors = errors.0;
            Ok(rejected(&viewer, f))
        }
        Err(SubmitError::InvalidCode(e)) => {
            f.code_error = Some(e.to_string());
            Ok(rejected(&viewer, f))
        }
        Err(SubmitError::QuotaExceeded(why)) => {
            f.spec_errors = vec![FieldError {
                path: "pools".into(),
                message: why,
            }];
            Ok(rejected(&viewer, f))
        }
        Err(e @ SubmitError::IdempotencyConflict { .. }) => {
            f.code_error = Some(format!("{e}; reload the page to submit a new job"));
            Ok(rejected(&viewer, f))
        }
        Err(e) => Err(e.into()),
    }
}

fn rejected(viewer: &Viewer, mut f: FormState) -> Response {
    f.notes.push(
        "Choose the code archive again before resubmitting (browsers do not keep file fields)."
            .into(),
    );
    respond(
        StatusCode::UNPROCESSABLE_ENTITY,
        page("Submit", Some(viewer), Nav::Submit, form(viewer, &f)),
    )
}
