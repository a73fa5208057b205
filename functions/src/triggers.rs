//! Non-HTTP entry points: EventBridge Scheduler firings, objects dropped under `inbox/` in the
//! bucket (S3 notifications or their EventBridge form) and "TunePlane Job Submission" events.
//!
//! Each becomes a submission through the same service as the API. Deliveries are at least once,
//! so each carries an idempotency key derived from the event (schedule id + scheduled time, object
//! key + ETag, event id): a redelivery returns the first job. Errors caused by the input are final
//! (an inbox archive gets `<key>.error.json` beside it, an object that is gone is skipped);
//! only internal errors (the stores failing) are returned, so that Lambda retries the event.
//!
//! Submission events are trusted for their `account` only: EventBridge sets it to the sender's
//! AWS account and the sender cannot choose it. `TUNEPLANE_EVENT_SENDERS` maps accounts to
//! tenants; a `detail.tenant` that disagrees with the mapping is refused.

use std::sync::Arc;

use serde_json::{Value, json};
use tuneplane_core::audit::{Actor, AuditSource};
use tuneplane_core::store::ScheduleRecord;
use tuneplane_core::submit::pipeline::{PipelineRequest, StepRequest};
use tuneplane_core::submit::{Code, Origin, SpecInput, SubmitError, SubmitRequest};

use tuneplane_core::store::{BLOB_KEY_PUNCTUATION, sanitize_blob_key, validate_blob_key};

use crate::error::ApiError;
use crate::routes::submission::SubmissionBody;
use crate::state::AppState;

/// Prefix of console drops in the bucket.
pub const INBOX_PREFIX: &str = "inbox/";
/// Suffix of the rejection note written beside a refused inbox archive.
pub const ERROR_SUFFIX: &str = ".error.json";
/// EventBridge detail-type of console submissions.
pub const SUBMISSION_DETAIL_TYPE: &str = "TunePlane Job Submission";
/// EventBridge `source` of submission events (the rule matches only this one).
pub const SUBMISSION_SOURCE: &str = "tuneplane.jobs";

/// What one event (or one record of it) led to; the functions return these as JSON
/// (`{"outcome": "submitted", "job_id": ..., "created": true}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A job was created (or found, for a redelivery).
    Submitted {
        /// Id of the created (or redelivered) job.
        job_id: tuneplane_core::ids::JobId,
        /// False for a redelivery.
        created: bool,
    },
    /// A pipeline schedule's steps were created (or found, for a redelivery).
    SubmittedPipeline {
        /// The pipeline's name.
        pipeline: String,
        /// Each step's job, in the schedule's order.
        steps: Vec<StepJob>,
        /// False for a redelivery.
        created: bool,
    },
    /// Nothing to do (not an inbox object, our own error note, a disabled schedule).
    Skipped {
        /// Why nothing was done, for the function's log and return value.
        reason: String,
    },
    /// The input was refused; for inbox objects the note's key.
    Rejected {
        /// What was refused and why.
        reason: String,
        /// Where the note was written, if anywhere.
        #[serde(skip_serializing_if = "Option::is_none")]
        note_key: Option<String>,
    },
}

/// One step of a submitted pipeline and its job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StepJob {
    /// The step's name.
    pub step: String,
    /// Its job's id.
    pub job_id: tuneplane_core::ids::JobId,
}

impl Outcome {
    fn skipped(reason: impl Into<String>) -> Outcome {
        Outcome::Skipped {
            reason: reason.into(),
        }
    }
}

/// Handles an EventBridge Scheduler firing: `{"schedule_id", "scheduled_time"}` (the target's
/// input template), or a classic scheduled rule event (`detail-type: Scheduled Event`).
pub async fn handle_scheduled(state: &AppState, event: &Value) -> Result<Outcome, SubmitError> {
    let (id, time) = if let Some(id) = event.get("schedule_id").and_then(Value::as_str) {
        let time = event.get("scheduled_time").and_then(Value::as_str);
        (id.to_owned(), time.map(str::to_owned))
    } else {
        let rule = event
            .get("resources")
            .and_then(|r| r.get(0))
            .and_then(Value::as_str)
            .and_then(|arn| arn.rsplit('/').next());
        let time = event.get("time").and_then(Value::as_str);
        match rule {
            Some(rule) => (rule.to_owned(), time.map(str::to_owned)),
            None => return Ok(Outcome::skipped("not a schedule event")),
        }
    };
    let Some(time) = time else {
        return Ok(Outcome::Rejected {
            reason: format!("schedule {id}: the event has no scheduled time"),
            note_key: None,
        });
    };
    let Some(schedule) = state.submit.jobs().get_schedule(&id).await? else {
        return Ok(Outcome::Rejected {
            reason: format!("schedule {id} does not exist"),
            note_key: None,
        });
    };
    if !schedule.enabled {
        return Ok(Outcome::skipped(format!("schedule {id} is paused")));
    }
    let key = format!("schedule:{id}:{time}");
    let actor = Actor {
        key_id: format!("schedule:{id}"),
        source: AuditSource::Schedule,
        request_id: key.clone(),
    };
    if !schedule.steps.is_empty() {
        return finish_pipeline(state, schedule, key, actor).await;
    }
    let request = SubmitRequest {
        tenant: schedule.tenant.clone(),
        spec: SpecInput::Authoritative(Box::new(schedule.spec.clone())),
        code: Code::Capsule {
            sha256: schedule.capsule_sha256.clone(),
        },
        idempotency_key: Some(key),
        origin: Origin::Schedule(id.clone()),
        actor,
    };
    finish(state.submit.submit(request, (state.clock)()).await)
}

/// A pipeline schedule's firing: its steps submitted as one pipeline with idempotency key `key`
/// (each step's capsule and spec, its `depends_on` pointed at this run's jobs of its `after`).
async fn finish_pipeline(
    state: &AppState,
    schedule: ScheduleRecord,
    key: String,
    actor: Actor,
) -> Result<Outcome, SubmitError> {
    let request = PipelineRequest {
        tenant: schedule.tenant,
        name: schedule.spec.name,
        steps: schedule
            .steps
            .into_iter()
            .map(|s| StepRequest {
                name: s.name,
                spec: SpecInput::Authoritative(Box::new(s.spec)),
                code: Code::Capsule {
                    sha256: s.capsule_sha256,
                },
                after: s.after,
            })
            .collect(),
        origin: Origin::Schedule(schedule.id),
        actor,
        idempotency_key: Some(key),
    };
    match state.submit.submit_pipeline(request, (state.clock)()).await {
        Ok(done) => {
            let steps: Vec<StepJob> = done
                .steps
                .into_iter()
                .map(|(step, job)| StepJob {
                    step,
                    job_id: job.id,
                })
                .collect();
            tracing::info!(pipeline = %done.name, steps = ?steps, created = done.created, "triggered pipeline");
            Ok(Outcome::SubmittedPipeline {
                pipeline: done.name,
                steps,
                created: done.created,
            })
        }
        Err(e) => finish(Err(e)),
    }
}

/// Handles the inbox function's events: S3 notifications (`Records`), EventBridge "Object
/// Created" and "TunePlane Job Submission" events. One outcome per object or event.
pub async fn handle_inbox(state: &AppState, event: &Value) -> Result<Vec<Outcome>, SubmitError> {
    let mut outcomes = Vec::new();
    if let Some(records) = event.get("Records").and_then(Value::as_array) {
        for r in records {
            let name = r.get("eventName").and_then(Value::as_str).unwrap_or("");
            let object = &r["s3"]["object"];
            match object.get("key").and_then(Value::as_str) {
                Some(raw) if name.starts_with("ObjectCreated") => {
                    let tag = object.get("eTag").or_else(|| object.get("sequencer"));
                    outcomes.push(inbox_object(state, raw, tag.and_then(Value::as_str)).await?);
                }
                _ => outcomes.push(Outcome::skipped(format!("not an object creation: {name}"))),
            }
        }
        return Ok(outcomes);
    }
    let detail_type = event
        .get("detail-type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let detail = &event["detail"];
    let outcome = match detail_type {
        "Object Created" => match detail["object"].get("key").and_then(Value::as_str) {
            Some(raw) => {
                let tag = detail["object"]
                    .get("etag")
                    .or_else(|| detail["object"].get("sequencer"));
                inbox_object(state, raw, tag.and_then(Value::as_str)).await?
            }
            None => Outcome::skipped("object event without a key"),
        },
        SUBMISSION_DETAIL_TYPE => submission_event(state, event).await?,
        other => Outcome::skipped(format!("unhandled event type {other:?}")),
    };
    outcomes.push(outcome);
    Ok(outcomes)
}

/// One archive under `inbox/<tenant>/`, named by the event's `raw` key. S3 URL-encodes keys in
/// its notifications (`my+job.zip` for `my job.zip`); the decoded key is tried first, then the
/// key as sent, so either encoding finds the object.
async fn inbox_object(
    state: &AppState,
    raw: &str,
    tag: Option<&str>,
) -> Result<Outcome, SubmitError> {
    let decoded = decode_s3_key(raw);
    if !decoded.starts_with(INBOX_PREFIX) || decoded.ends_with(ERROR_SUFFIX) {
        return Ok(Outcome::skipped(format!(
            "{decoded} is not an inbox archive"
        )));
    }
    if validate_blob_key(&decoded).is_err() {
        let fix = format!(
            "rename the file using letters, digits, spaces and {BLOB_KEY_PUNCTUATION} only \
             (e.g. {}), then upload it again",
            sanitize_blob_key(&decoded[INBOX_PREFIX.len()..])
        );
        let err =
            SubmitError::InvalidRequest(format!("object name {decoded:?} is not usable: {fix}"));
        return reject_archive(state, &decoded, &sanitize_blob_key(&decoded), err).await;
    }
    let mut key = decoded;
    if state.submit.blobs().head(&key).await?.is_none() {
        let as_sent = raw != key
            && validate_blob_key(raw).is_ok()
            && state.submit.blobs().head(raw).await?.is_some();
        if !as_sent {
            // Deleted before this delivery: nothing to run, and nothing to retry.
            return Ok(Outcome::skipped(format!("{key} no longer exists")));
        }
        key = raw.to_owned();
    }
    let tenant = key[INBOX_PREFIX.len()..]
        .split_once('/')
        .map(|(t, _)| t)
        .and_then(|t| tuneplane_core::ids::TenantId::parse(t).ok());
    let result = match &tenant {
        None => Err(SubmitError::InvalidRequest(
            "put console archives under inbox/<tenant>/ (e.g. inbox/acme/job.zip)".into(),
        )),
        Some(tenant) if !tenant_exists(state, tenant).await? => {
            Err(SubmitError::InvalidRequest(format!(
                "there is no tenant {tenant:?} (no API key names it): put archives under inbox/<your tenant>/, or ask an admin to create the tenant (tuneplane admin keys create --tenant {tenant} ...)"
            )))
        }
        Some(tenant) => {
            let request = SubmitRequest {
                tenant: tenant.clone(),
                spec: SpecInput::InArchive,
                code: Code::Blob { key: key.clone() },
                idempotency_key: Some(format!("inbox:{key}:{}", tag.unwrap_or("-"))),
                origin: Origin::Inbox(key.clone()),
                actor: Actor {
                    key_id: format!("inbox:{key}"),
                    source: AuditSource::Inbox,
                    request_id: format!("inbox:{key}:{}", tag.unwrap_or("-")),
                },
            };
            state.submit.submit(request, (state.clock)()).await
        }
    };
    match result {
        Err(e) if e.is_client_error() => reject_archive(state, &key, &key, e).await,
        other => finish(other),
    }
}

/// Whether `tenant` exists: some API key that is not revoked names it. The inbox takes the
/// tenant from the object's key, so an archive for a tenant nobody created is refused rather than
/// run without a key, a quota or an owner.
async fn tenant_exists(state: &AppState, tenant: &str) -> Result<bool, SubmitError> {
    let keys = state.submit.jobs().list_api_keys().await?;
    Ok(keys
        .iter()
        .any(|k| k.tenant == tenant && k.revoked_at_ms.is_none()))
}

/// Writes `<note_base>.error.json` explaining why the archive at `key` was refused.
async fn reject_archive(
    state: &AppState,
    key: &str,
    note_base: &str,
    error: SubmitError,
) -> Result<Outcome, SubmitError> {
    let note_key = format!("{note_base}{ERROR_SUFFIX}");
    let (_, body) = ApiError::Submit(error).to_body(&format!("inbox:{key}"));
    let note = json!({"object": key, "rejected_at_ms": (state.clock)(), "error": body["error"]});
    let bytes = serde_json::to_vec_pretty(&note).unwrap_or_default();
    let reason = note["error"]["message"]
        .as_str()
        .unwrap_or("rejected")
        .to_owned();
    state.submit.blobs().put(&note_key, bytes).await?;
    tracing::info!(object = %key, note = %note_key, "inbox archive rejected");
    Ok(Outcome::Rejected {
        reason,
        note_key: Some(note_key),
    })
}

/// A "TunePlane Job Submission" event: `detail` is `{"spec", "code", "idempotency_key"?,
/// "tenant"?}`; the tenant is the one `TUNEPLANE_EVENT_SENDERS` maps the sending account to.
async fn submission_event(state: &AppState, event: &Value) -> Result<Outcome, SubmitError> {
    let id = event.get("id").and_then(Value::as_str).unwrap_or("unknown");
    let reject = |reason: String| {
        tracing::warn!(event = id, %reason, "submission event refused");
        Ok(Outcome::Rejected {
            reason: format!("event {id}: {reason}"),
            note_key: None,
        })
    };
    let source = event.get("source").and_then(Value::as_str).unwrap_or("");
    if source != SUBMISSION_SOURCE {
        return reject(format!(
            "source {source:?} is not {SUBMISSION_SOURCE:?}; put submission events with \
             Source={SUBMISSION_SOURCE}"
        ));
    }
    let account = event.get("account").and_then(Value::as_str).unwrap_or("");
    let Some(tenant) = state.event_senders.get(account) else {
        return reject(format!(
            "account {account:?} may not submit jobs: map it to a tenant in \
             TUNEPLANE_EVENT_SENDERS (the stack's EventSenders parameter)"
        ));
    };
    let detail = &event["detail"];
    if let Some(claimed) = detail.get("tenant")
        && claimed.as_str() != Some(tenant.as_str())
    {
        return reject(format!(
            "detail.tenant {claimed} does not match tenant {tenant:?} of account {account}; \
             leave it out or set it to {tenant:?}"
        ));
    }
    let key = detail
        .get("idempotency_key")
        .and_then(Value::as_str)
        .map_or_else(|| format!("event:{id}"), str::to_owned);
    let mut body = detail.clone();
    if let Some(map) = body.as_object_mut() {
        map.remove("tenant");
        map.remove("idempotency_key");
    }
    let parsed = serde_json::from_value::<SubmissionBody>(body)
        .map_err(|e| format!("detail: {e}"))
        .and_then(|b| {
            let actor = Actor {
                key_id: format!("event:{id}"),
                source: AuditSource::Event,
                request_id: key.clone(),
            };
            b.into_request(tenant, Some(key), Origin::Event(id.to_owned()), actor)
                .map_err(|e| e.to_string())
        });
    match parsed {
        Ok(request) => finish(state.submit.submit(request, (state.clock)()).await),
        Err(reason) => reject(reason),
    }
}

/// A failure the input did not cause (a store unreachable, a capsule build interrupted) as the
/// invocation's error: `errorType` `RetryableFailure`, so Lambda (and S3/EventBridge behind it)
/// delivers the event again.
pub fn retryable(error: SubmitError) -> lambda_http::lambda_runtime::Diagnostic {
    tracing::error!(error = %error, "trigger failed; the event will be retried");
    lambda_http::lambda_runtime::Diagnostic {
        error_type: "RetryableFailure".into(),
        error_message: error.to_string(),
    }
}

/// The `main` of an event-driven function (inbox, scheduled): starts up like every binary
/// (`name` says which in a startup error), then answers each Lambda event with the JSON that
/// `handle` makes of its payload; a failure of `handle` is [`retryable`].
pub async fn run_function<F, Fut>(name: &str, handle: F) -> anyhow::Result<()>
where
    F: Fn(Arc<AppState>, Value) -> Fut,
    Fut: Future<Output = Result<Value, SubmitError>>,
{
    use anyhow::Context as _;
    use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};
    let (_config, state) = crate::runtime::startup()
        .await
        .with_context(|| format!("starting the {name} function"))?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let answer = handle(state.clone(), event.payload);
        async move { answer.await.map_err(retryable) }
    }))
    .await
    .map_err(|e| anyhow::anyhow!("Lambda runtime: {e}"))
}

/// Client errors become a final rejection; internal errors propagate (the event is retried).
fn finish(
    result: Result<tuneplane_core::submit::Submitted, SubmitError>,
) -> Result<Outcome, SubmitError> {
    match result {
        Ok(s) => {
            tracing::info!(job_id = %s.job.id, created = s.created, "triggered submission");
            Ok(Outcome::Submitted {
                job_id: s.job.id,
                created: s.created,
            })
        }
        Err(e) if e.is_client_error() => {
            tracing::warn!(error = %e, "triggered submission rejected");
            Ok(Outcome::Rejected {
                reason: e.to_string(),
                note_key: None,
            })
        }
        Err(e) => Err(e),
    }
}

/// Decodes an S3 notification key (URL-encoded, `+` for space); an invalid escape is kept as is
/// and bytes that are not UTF-8 become U+FFFD.
pub fn decode_s3_key(raw: &str) -> String {
    // `+` first: a literal plus arrives as `%2B` and must stay a plus.
    percent_encoding::percent_decode_str(&raw.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::decode_s3_key;

    #[test]
    fn s3_keys_are_url_decoded() {
        assert_eq!(
            decode_s3_key("inbox/acme/my+job%3D1.zip"),
            "inbox/acme/my job=1.zip"
        );
        assert_eq!(decode_s3_key("inbox/a/b%2"), "inbox/a/b%2");
        assert_eq!(decode_s3_key("plain"), "plain");
        assert_eq!(decode_s3_key("a%2Bb+c%zz"), "a+b c%zz");
        assert_eq!(decode_s3_key("%FF"), "\u{FFFD}");
    }
}
