//! `/v1/jobs/{id}/logs/live` and `/logs/follow`: the output the reconciler ships while a job runs
//! (docs/design.md §8), and the marks of interest that decide how soon it is shipped.
//!
//! A one-off read of a running job (no `follow`, no `wait=false`) marks the job wanted and
//! waits, up to [`READER_WAIT_MS`], for the reconciler's read that answers it
//! (`tuneplane_core::live::readers`), so it shows the output up to now rather than the last
//! shipment. The wait polls the segment list, one small blob read every [`ANSWER_POLL`].

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;
use tuneplane_core::ids::JobId;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::live::readers::{Marks, READER_WAIT_MS, Reader, answers, mark};
use tuneplane_core::live::{Manifest, Segment, manifest_key};
use tuneplane_core::store::{BlobStore, StoreError};

use super::jobs::ReadableJob;
use crate::error::ApiError;
use crate::state::{ApiQuery, AppState};

/// Read-modify-write rounds a mark tries against concurrent writers of the record.
const MARK_ATTEMPTS: usize = 5;

/// Most segment bytes one live-logs answer carries (`more` tells the reader to ask again).
pub const LIVE_PAGE_BYTES: u64 = 1024 * 1024;

/// How often a waiting read looks for the answering shipment in the segment list.
pub const ANSWER_POLL: Duration = Duration::from_millis(250);

/// Marks `reader`'s interest in `job`'s output on its record (`tuneplane_core::live::readers`);
/// returns the marks in force, or `None` for a job that ended (nothing is shipped any more).
pub async fn mark_interest(
    state: &AppState,
    job: JobRecord,
    reader: Reader,
) -> Result<Option<Marks>, ApiError> {
    let mut job = job;
    for _ in 0..MARK_ATTEMPTS {
        if job.is_terminal() {
            return Ok(None);
        }
        let stored = Marks {
            followed_until_ms: job.logs_followed_until_ms,
            wanted_at_ms: job.logs_wanted_at_ms,
        };
        let Some(marks) = mark(stored, reader, (state.clock)()) else {
            return Ok(Some(stored));
        };
        job.logs_followed_until_ms = marks.followed_until_ms;
        job.logs_wanted_at_ms = marks.wanted_at_ms;
        match state.submit.jobs().update_job(&job).await {
            Ok(_) => return Ok(Some(marks)),
            // The reconciler wrote in between: read again and retry.
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        job = match state.submit.jobs().get_job(&job.id).await? {
            Some(j) => j,
            None => return Ok(None),
        };
    }
    // Another writer kept winning: the mark is best effort, the next one will land.
    Ok(Some(Marks {
        followed_until_ms: job.logs_followed_until_ms,
        wanted_at_ms: job.logs_wanted_at_ms,
    }))
}

/// Marks that someone follows `job`'s output (the reconciler then ships its live logs every few
/// seconds) until [`FOLLOW_TTL_MS`](tuneplane_core::live::FOLLOW_TTL_MS) from now; returns the
/// expiry. A mark that still has more than half its time left is not written again.
pub async fn mark_followed(state: &AppState, job: JobRecord) -> Result<Option<i64>, ApiError> {
    Ok(mark_interest(state, job, Reader::Follower)
        .await?
        .and_then(|m| m.followed_until_ms))
}

/// `POST /v1/jobs/{id}/logs/follow`: marks interest in the job's live output.
pub async fn follow_logs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ()): ReadableJob,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (id, state_now) = (job.id.clone(), job.state);
    let until = mark_followed(&state, job).await?;
    Ok(Json(
        json!({"job_id": id, "state": state_now, "followed_until_ms": until}),
    ))
}

/// Query of `GET /v1/jobs/{id}/logs/live`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveQuery {
    /// Only segments shipped after this one (`seq` of the last segment read; default 0).
    pub after: Option<u64>,
    /// Only this pod's.
    pub pod: Option<String>,
    /// Only this container's.
    pub container: Option<String>,
    /// Only the main output (`true`): the CPU pod's or the RayJob submitter's.
    pub main: Option<bool>,
    /// The caller follows the job (`true`): the job is marked followed as by `POST
    /// .../logs/follow`, and the answer comes at once.
    pub follow: Option<bool>,
    /// `false`: answer at once with what was shipped, marking nothing. By default a read of a
    /// running job waits for the output up to now.
    pub wait: Option<bool>,
    /// Only the last this many lines of each container's shipped output, in one answer.
    pub tail: Option<usize>,
}

/// The segment list of `job_id` (empty when none was written or it was removed).
async fn segment_list(blobs: &dyn BlobStore, job_id: &JobId) -> Result<Option<Manifest>, ApiError> {
    Ok(blobs
        .get(&manifest_key(job_id))
        .await?
        .map(|bytes| Manifest::read_or_empty(job_id, &bytes)))
}

/// Waits up to [`READER_WAIT_MS`] for a segment list that answers `want`; that list, or the
/// latest one with `false` (not answered in time, or the list went away: the job ended).
async fn await_answer(
    blobs: &dyn BlobStore,
    job_id: &JobId,
    want: i64,
) -> Result<(Manifest, bool), ApiError> {
    let give_up = tokio::time::Instant::now()
        + Duration::from_millis(u64::try_from(READER_WAIT_MS).unwrap_or(0));
    let mut seen = false;
    loop {
        let current = segment_list(blobs, job_id).await?;
        match current {
            Some(m) if answers(m.answered_ms, want) => return Ok((m, true)),
            Some(_) => seen = true,
            None if seen => return Ok((Manifest::empty(job_id.clone()), false)),
            None => {}
        }
        if tokio::time::Instant::now() + ANSWER_POLL > give_up {
            return Ok((
                current.unwrap_or_else(|| Manifest::empty(job_id.clone())),
                false,
            ));
        }
        tokio::time::sleep(ANSWER_POLL).await;
    }
}

/// The segment fields of an answer, with `text`.
fn segment_json(seg: &Segment, offset: u64, text: &str) -> serde_json::Value {
    json!({
        "seq": seg.seq,
        "pod": seg.pod,
        "container": seg.container,
        "offset": offset,
        "bytes": text.len(),
        "main": seg.main,
        "at_ms": seg.at_ms,
        "text": text,
    })
}

/// Live segments of `job` in `manifest` after `q.after` (with their text), at most
/// [`LIVE_PAGE_BYTES`] of text: `{"segments": [...], "last_seq", "more", "archived"}`. With
/// `q.tail`, each wanted container's last lines as one segment (its last one's `seq`, the
/// offset where the lines begin), in one answer.
pub async fn live_page(
    state: &AppState,
    job: &JobRecord,
    manifest: &Manifest,
    q: &LiveQuery,
) -> Result<serde_json::Value, ApiError> {
    let blobs = state.submit.blobs();
    let after = q.after.unwrap_or(0);
    let wanted = |s: &&Segment| {
        s.seq > after
            && q.pod.as_deref().is_none_or(|p| p == s.pod)
            && q.container.as_deref().is_none_or(|c| c == s.container)
            && (q.main != Some(true) || s.main)
    };
    let mut out = Vec::new();
    let mut size = 0;
    let mut last_seq = after;
    let mut more = false;
    if let Some(lines) = q.tail {
        let mut containers: Vec<(&str, &str)> = Vec::new();
        for s in manifest.segments.iter().filter(wanted) {
            if !containers.contains(&(s.pod.as_str(), s.container.as_str())) {
                containers.push((s.pod.as_str(), s.container.as_str()));
            }
        }
        let mut tails = Vec::new();
        for (pod, container) in containers {
            let newest_first = manifest
                .segments
                .iter()
                .rev()
                .filter(wanted)
                .filter(|s| s.pod == pod && s.container == container);
            if let Some((seg, offset, text)) = tail_of(blobs.as_ref(), newest_first, lines).await? {
                tails.push(segment_json(seg, offset, &text));
                last_seq = last_seq.max(seg.seq);
            }
        }
        tails.sort_by_key(|t| t["seq"].as_u64());
        out = tails;
    } else {
        for seg in manifest.segments.iter().filter(wanted) {
            if size > 0 && size + seg.bytes > LIVE_PAGE_BYTES {
                more = true;
                break;
            }
            let Some(text) = blobs.get(&seg.key).await? else {
                // Merged into an earlier segment since the list was read: the reader asks again
                // after the last segment it got, and the new list has the merged one.
                more = true;
                break;
            };
            size += seg.bytes;
            last_seq = seg.seq;
            out.push(segment_json(
                seg,
                seg.offset,
                &String::from_utf8_lossy(&text),
            ));
        }
    }
    Ok(json!({
        "job_id": job.id,
        "state": job.state,
        "segments": out,
        // Without `more`, every wanted segment was sent: the reader continues after the last one
        // shipped, whichever container it belonged to.
        "last_seq": if more { last_seq } else { last_seq.max(manifest.last_seq()) },
        "more": more,
        "archived": job.logs_key.is_some(),
    }))
}

/// The last `lines` lines of one container's segments (given newest first), read back to at
/// most [`LIVE_PAGE_BYTES`]: the newest segment, the byte offset where the lines begin, and
/// the lines.
async fn tail_of<'a>(
    blobs: &dyn BlobStore,
    newest_first: impl Iterator<Item = &'a Segment>,
    lines: usize,
) -> Result<Option<(&'a Segment, u64, String)>, ApiError> {
    let mut newest = None;
    let mut start = 0;
    // Newest first; joined in reverse below.
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let (mut size, mut newlines) = (0u64, 0usize);
    for seg in newest_first {
        if lines == 0 || (size > 0 && size + seg.bytes > LIVE_PAGE_BYTES) {
            break;
        }
        // A segment merged away since the list was read: the tail stops at what was read.
        let Some(text) = blobs.get(&seg.key).await? else {
            break;
        };
        newest.get_or_insert(seg);
        start = seg.offset;
        size += text.len() as u64;
        newlines += text.iter().filter(|b| **b == b'\n').count();
        parts.push(text);
        // One more newline than lines: the text then holds `lines` whole lines.
        if newlines > lines {
            break;
        }
    }
    let bytes: Vec<u8> = parts.into_iter().rev().flatten().collect();
    let Some(newest) = newest else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let cut = match lines {
        0 => text.len(),
        n => body
            .rmatch_indices('\n')
            .nth(n - 1)
            .map_or(0, |(i, _)| i + 1),
    };
    Ok(Some((
        newest,
        start + cut as u64,
        text.get(cut..).unwrap_or_default().to_owned(),
    )))
}

/// `GET /v1/jobs/{id}/logs/live`: the output shipped while the job runs; for a one-off read of
/// a running job, the output up to now (`up_to_date`), waiting a few seconds for it.
pub async fn live_logs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ApiQuery(q)): ReadableJob<ApiQuery<LiveQuery>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let blobs = state.submit.blobs();
    // Only a running job is shipped (a stopping one is not read any more).
    let shipping = job.state == JobState::Running && !job.stop_requested && job.logs_key.is_none();
    let mut job = job;
    let (listed, up_to_date) = if q.follow == Some(true) {
        mark_followed(&state, job.clone()).await?;
        (segment_list(blobs.as_ref(), &job.id).await?, false)
    } else if shipping && q.wait != Some(false) {
        match mark_interest(&state, job.clone(), Reader::OneOff)
            .await?
            .and_then(|m| m.wanted_at_ms)
        {
            Some(want) => {
                let (m, answered) = await_answer(blobs.as_ref(), &job.id, want).await?;
                if !answered {
                    // Not answered in time, or the job ended meanwhile: say how it is now.
                    if let Some(now) = state.submit.jobs().get_job(&job.id).await? {
                        job = now;
                    }
                }
                (Some(m), answered)
            }
            None => (segment_list(blobs.as_ref(), &job.id).await?, false),
        }
    } else {
        (segment_list(blobs.as_ref(), &job.id).await?, false)
    };
    let listed = listed.unwrap_or_else(|| Manifest::empty(job.id.clone()));
    let mut page = live_page(&state, &job, &listed, &q).await?;
    if let Some(map) = page.as_object_mut() {
        map.insert("up_to_date".into(), json!(up_to_date));
    }
    Ok(Json(page))
}
