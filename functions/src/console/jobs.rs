//! The jobs list and the job detail page (spec, capsule, status history, pending reason or how it
//! ended, attempts, event view, logs, outputs), plus the stop action, the archived-logs download
//! (of any attempt) and the output downloads.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use tuneplane_core::capsule::storage_key;
use tuneplane_core::control::Stop;
use tuneplane_core::grant::check_relative_path;
use tuneplane_core::job::{JobEvent, JobRecord, JobState};
use tuneplane_core::outputs::{JobPath, list_checkpoints, list_outputs};
use tuneplane_core::store::{EventQuery, JobQuery, PresignMethod};

use super::layout::{ConsoleError, Nav, clock, page, respond, status_badge, table_head, time};
use super::view::{ClockReading, clocks};
use super::viewer::{CsrfForm, Viewer, WriteForm, encode_component};
use super::{logs, view};
use crate::error::ApiError;
use crate::routes::jobs::readable_job;
use crate::state::AppState;

/// Jobs per page.
const PAGE_SIZE: usize = 25;
/// Most events read for one detail page.
const MAX_EVENTS: usize = 2000;
/// How long the logs download link stays valid.
const LOGS_URL_TTL: Duration = Duration::from_secs(300);
/// How long an output's download link stays valid (each click on the page signs a fresh one).
const OUTPUT_URL_TTL: Duration = Duration::from_secs(300);

/// Query of the jobs list.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// State filter (`QUEUED`, ...; empty for all).
    #[serde(default)]
    pub status: Option<String>,
    /// Cursor of the page.
    #[serde(default)]
    pub cursor: Option<String>,
}

fn clock_cell(c: ClockReading) -> Markup {
    match c {
        Some((ms, start, running)) => clock(ms, start, running),
        None => html! { span.muted { "–" } },
    }
}

fn status_cell(job: &JobRecord) -> Markup {
    html! {
        (status_badge(job.state.as_str()))
        @if job.stop_requested && !job.is_terminal() { " " span.muted { "(stopping)" } }
        @if let (Some(book), Some(size)) = (job.array_parent(), job.array_size()) {
            br; span.reason { (book.counts.summary(size)) }
        } @else if let Some(p) = &job.pending {
            br; span.reason { (view::pending_code(p.reason)) }
        }
        @if let Some(f) = &job.failure {
            br; span.reason { (format!("{:?}", f.reason)) }
        }
    }
}

/// `GET /console/jobs`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Result<Response, ConsoleError> {
    let filter = q
        .status
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(str::to_ascii_uppercase);
    let state_filter = match &filter {
        None => None,
        Some(s) => Some(
            JobState::parse(s)
                .ok_or_else(|| ConsoleError::BadRequest(format!("unknown status {s:?}")))?,
        ),
    };
    let query = JobQuery {
        state: state_filter,
        limit: PAGE_SIZE,
        cursor: q.cursor.clone().filter(|c| !c.is_empty()),
    };
    let page_of_jobs = state
        .submit
        .jobs()
        .list_jobs(&viewer.principal.tenant, &query)
        .await?;
    let now = (state.clock)();
    let status_param = filter.clone().unwrap_or_default();
    let body = html! {
        h1 { "Jobs" }
        form.filters method="get" action="/console/jobs" {
            label for="status" { "Status" }
            select id="status" name="status" data-autosubmit {
                option value="" selected[filter.is_none()] { "All" }
                @for s in JobState::ALL {
                    option value=(s.as_str()) selected[filter.as_deref() == Some(s.as_str())] { (s.as_str()) }
                }
            }
            button type="submit" { "Filter" }
            a.button href="/console/submit" { "Submit a job" }
        }
        div data-refresh="5" id="jobs-region" {
            @if page_of_jobs.items.is_empty() {
                p.empty { "No jobs" @if filter.is_some() { " in this state" } "." }
            } @else {
                table.jobs.cards {
                    (table_head("Your jobs, newest first", &["Name", "Kind", "Pools", "Status", "Queue wait", "Pre-running", "Run", "Submitted"]))
                    tbody {
                        @for job in page_of_jobs.items.iter().filter(|j| j.array_child().is_none()) {
                            tr data-job-id=(job.id) data-status=(job.state.as_str()) {
                                td data-label="Name" { div { a href=(format!("/console/jobs/{}", job.id)) { (job.spec.name) } br; code.small { (job.id) } } }
                                td data-label="Kind" { (view::kind_label(&job.spec)) }
                                td data-label="Pools" { div { @for line in view::pool_lines(&job.spec) { span.pool { (line) } } } }
                                td data-label="Status" { div { (status_cell(job)) } }
                                @for (label, c) in clocks(job, now) { td data-label=(label) { (clock_cell(c)) } }
                                td data-label="Submitted" { (time(job.submitted_at_ms, true)) }
                            }
                        }
                    }
                }
            }
        }
        nav.pager aria-label="Pages" {
            @if query.cursor.is_some() {
                a href=(format!("/console/jobs?status={}", encode_component(&status_param))) { "First page" }
            }
            @if let Some(next) = &page_of_jobs.next {
                a rel="next" href=(format!("/console/jobs?status={}&cursor={}", encode_component(&status_param), encode_component(next))) { "Next page" }
            }
        }
    };
    Ok(respond(
        StatusCode::OK,
        page("Jobs", Some(&viewer), Nav::Jobs, body),
    ))
}

/// Query of the detail page.
#[derive(Debug, Default, Deserialize)]
pub struct DetailQuery {
    /// A notice to show (`submitted`, `stop-requested`, `existing`).
    #[serde(default)]
    pub notice: Option<String>,
}

async fn all_events(state: &AppState, job_id: &str) -> Result<Vec<JobEvent>, ConsoleError> {
    let mut out = Vec::new();
    let mut query = EventQuery::first(500);
    // Bounded: at most MAX_EVENTS events over at most MAX_EVENTS / 500 pages.
    for _ in 0..MAX_EVENTS / 500 {
        let page = state.submit.jobs().list_events(job_id, &query).await?;
        out.extend(page.items);
        query.cursor = page.next;
        if query.cursor.is_none() {
            break;
        }
    }
    Ok(out)
}

/// An array parent's first children (none for any other job).
async fn array_children(state: &AppState, job: &JobRecord) -> Result<Vec<JobRecord>, ConsoleError> {
    let (Some(book), true) = (job.array_parent(), job.is_array_parent()) else {
        return Ok(Vec::new());
    };
    let shown = book.created.min(super::jobs_detail::CHILDREN_SHOWN);
    let mut out = Vec::with_capacity(shown as usize);
    for i in 0..shown {
        let id = tuneplane_core::array::child_id(&job.id, i);
        if let Some(c) = state.submit.jobs().get_job(&id).await? {
            out.push(c);
        }
    }
    Ok(out)
}

/// The jobs `job` depends on, in its spec's order (only its own tenant's are shown).
async fn dependencies_of(
    state: &AppState,
    job: &JobRecord,
) -> Result<Vec<(String, Option<JobRecord>)>, ConsoleError> {
    let mut out = Vec::new();
    for d in &job.spec.depends_on {
        let dep = state.submit.jobs().get_job(&d.job).await?;
        out.push((d.job.clone(), dep.filter(|j| j.tenant == job.tenant)));
    }
    Ok(out)
}

/// `GET /console/jobs/{id}`.
pub async fn detail(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(q): Query<DetailQuery>,
) -> Result<Response, ConsoleError> {
    let job = readable_job(&state, &viewer.principal, &id).await?;
    let events = all_events(&state, &job.id).await?;
    let capsule = state
        .submit
        .blobs()
        .head(&storage_key(&job.capsule_sha256))
        .await?;
    let preview = match &job.logs_key {
        Some(key) => logs::preview_blob(state.submit.blobs().as_ref(), key).await,
        None => None,
    };
    let now = (state.clock)();
    let notice = match q.notice.as_deref() {
        Some("submitted") => Some("Job submitted."),
        Some("existing") => Some("This form was already submitted: this is the job it created."),
        Some("stop-requested") => {
            Some("Stop requested: the reconciler stops the job on its next pass.")
        }
        _ => None,
    };
    let queue_position = state.submit.jobs().queue_position(&job).await?;
    let outputs = job_outputs(&state, &job).await;
    // A running job's page follows its output: the mark makes the reconciler ship it every few
    // seconds while the page (which refreshes itself) stays open.
    let live = if job.state == JobState::Running && job.logs_key.is_none() {
        if let Err(e) = crate::routes::live::mark_followed(&state, job.clone()).await {
            tracing::info!(job_id = %job.id, error = ?e, "could not mark the job followed");
        }
        Some(logs::live_tails(state.submit.blobs().as_ref(), &job.id).await)
    } else {
        None
    };
    let children = array_children(&state, &job).await?;
    let dependencies = dependencies_of(&state, &job).await?;
    let body = super::jobs_detail::render(
        &viewer,
        &job,
        &events,
        capsule.as_ref(),
        preview.as_deref(),
        &super::jobs_detail::PageState {
            now,
            notice,
            queue_position,
            live: live.as_deref(),
            outputs: outputs.as_ref(),
            children: &children,
            dependencies: &dependencies,
        },
    );
    Ok(respond(
        StatusCode::OK,
        page(&job.spec.name, Some(&viewer), Nav::Jobs, body),
    ))
}

/// The job's outputs and complete checkpoints, or `None` when the blob store could not list
/// them (the page says so; the rest of it still shows).
async fn job_outputs(state: &AppState, job: &JobRecord) -> Option<super::jobs_detail::Outputs> {
    let blobs = state.submit.blobs();
    let listed = async {
        let files = list_outputs(blobs.as_ref(), &job.tenant, &job.id).await?;
        let checkpoints = list_checkpoints(blobs.as_ref(), &job.tenant, &job.id).await?;
        Ok::<_, tuneplane_core::store::StoreError>(super::jobs_detail::Outputs {
            files,
            checkpoints,
        })
    };
    match listed.await {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::warn!(job_id = %job.id, error = %e, "could not list the job's outputs");
            None
        }
    }
}

/// `POST /console/jobs/{id}/stop`.
pub async fn stop(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    WriteForm { viewer, .. }: WriteForm<CsrfForm>,
) -> Result<Response, ConsoleError> {
    // The service the API's stop route calls too: one set of rules for both doors.
    let stop = state
        .control()
        .stop_job(&viewer.principal.tenant, &id, &viewer.actor())
        .await
        .map_err(ApiError::from)?;
    let notice = match stop {
        Stop::Requested(_) => "?notice=stop-requested",
        Stop::Unchanged(_) => "",
    };
    tracing::info!(job_id = %id, "console stop");
    Ok(Redirect::to(&format!("/console/jobs/{id}{notice}")).into_response())
}

/// Query of the logs download.
#[derive(Debug, Default, Deserialize)]
pub struct LogsQuery {
    /// An earlier attempt (default: the current one).
    #[serde(default)]
    pub attempt: Option<String>,
}

/// `GET /console/jobs/{id}/logs[?attempt=N]`: a short-lived download of the archived logs of
/// the job's current attempt, or of earlier attempt `N`.
pub async fn logs_download(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ConsoleError> {
    let job = readable_job(&state, &viewer.principal, &id).await?;
    let attempt = match q.attempt.as_deref().filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => Some(a.parse::<u32>().map_err(|_| {
            ConsoleError::BadRequest(format!("attempt {a:?} is not an attempt number"))
        })?),
    };
    let key = match attempt.filter(|n| *n != job.attempt) {
        None => job
            .logs_key
            .as_ref()
            .ok_or_else(|| ApiError::NotFound(format!("job {id} has no archived logs yet")))?,
        Some(n) => {
            let earlier = job.attempts.iter().find(|a| a.number == n).ok_or_else(|| {
                ApiError::NotFound(format!(
                    "job {id} has no attempt {n}; its attempts are 1 to {}",
                    job.attempt
                ))
            })?;
            earlier.logs_key.as_ref().ok_or_else(|| {
                ApiError::NotFound(format!("attempt {n} of job {id} has no archived logs"))
            })?
        }
    };
    let url = state
        .submit
        .blobs()
        .presign(PresignMethod::Get, key, LOGS_URL_TTL)
        .await?;
    Ok(Redirect::to(&url.url).into_response())
}

/// `GET /console/jobs/{id}/outputs/{path}`: a short-lived download link of one of the job's
/// outputs (signed at the click, so a page left open never offers an expired link).
pub async fn output_download(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    let job = readable_job(&state, &viewer.principal, &id).await?;
    check_relative_path(&path).map_err(|e| ConsoleError::BadRequest(format!("output path {e}")))?;
    let key = JobPath::Output(path.clone()).key(&job.tenant, &job.id);
    let blobs = state.submit.blobs();
    if blobs.head(&key).await?.is_none() {
        return Err(ApiError::NotFound(format!("job {id} has no output {path:?}")).into());
    }
    let url = blobs
        .presign(PresignMethod::Get, &key, OUTPUT_URL_TTL)
        .await?;
    tracing::info!(job_id = %job.id, path = %path, "console output download");
    Ok(Redirect::to(&url.url).into_response())
}

/// `GET /console/jobs/{id}/checkpoints/{name}/{path}`: one file of a complete checkpoint of a job
/// the viewer may read, through a link signed now (like an output's).
pub async fn checkpoint_download(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((id, rest)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    let job = readable_job(&state, &viewer.principal, &id).await?;
    let (name, path) = rest.split_once('/').ok_or_else(|| {
        ConsoleError::BadRequest(format!("{rest:?} names no file inside a checkpoint"))
    })?;
    tuneplane_core::grant::check_checkpoint_name(name)
        .map_err(|e| ConsoleError::BadRequest(format!("checkpoint {e}")))?;
    check_relative_path(path).map_err(|e| ConsoleError::BadRequest(format!("file {e}")))?;
    let blobs = state.submit.blobs();
    let complete = tuneplane_core::outputs::list_checkpoints(blobs.as_ref(), &job.tenant, &job.id)
        .await?
        .into_iter()
        .any(|c| c.name == name && c.files.iter().any(|f| f.path == path));
    if !complete {
        return Err(ApiError::NotFound(format!(
            "job {id} has no complete checkpoint {name:?} with a file {path:?}"
        ))
        .into());
    }
    let key = JobPath::Checkpoint {
        name: name.to_owned(),
        path: path.to_owned(),
    }
    .key(&job.tenant, &job.id);
    let url = blobs
        .presign(PresignMethod::Get, &key, OUTPUT_URL_TTL)
        .await?;
    tracing::info!(job_id = %job.id, checkpoint = %name, path = %path, "console checkpoint download");
    Ok(Redirect::to(&url.url).into_response())
}
