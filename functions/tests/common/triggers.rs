//! Suite cases of the non-API entry points: webhooks, schedules, the inbox and EventBridge
//! submissions (instantiated by `api_suite!` with the API cases).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tuneplane_core::clock::now_secs;

use super::archives::{SPEC, body, code, hostile_tar};
use super::{Harness, TENANT_A};

/// Signed webhook delivery through the router.
pub async fn deliver(
    h: &Harness,
    source: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> super::Reply {
    h.call(
        Method::POST,
        &format!("/v1/webhooks/{source}"),
        None,
        headers,
        body.to_vec(),
    )
    .await
}

/// `payload` delivered to the `ci` source, signed with the webhook secret at time `t`.
async fn deliver_signed_at(h: &Harness, t: i64, payload: &[u8]) -> super::Reply {
    let sig = super::tuneplane_signature(super::WEBHOOK_SECRET, t, payload);
    deliver(h, "ci", &[("x-tuneplane-signature", sig.as_str())], payload).await
}

/// Asserts that `reply` refuses a delivery as a replay.
fn assert_replay_refused(reply: &super::Reply) {
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);
    assert!(
        reply.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("replay")
    );
}

pub async fn signed_webhook_submits_once_and_a_replay_is_401(h: &Harness) {
    let payload = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let t = now_secs();
    let first = deliver_signed_at(h, t, &payload).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.json);
    assert_replay_refused(&deliver_signed_at(h, t, &payload).await);
    assert_eq!(h.job_count(TENANT_A).await, 1);
}

pub async fn a_failed_webhook_delivery_stays_remembered_and_a_re_signed_retry_is_heard(
    h: &Harness,
) {
    // Signed correctly, but the template it names does not exist yet: the submission fails (4xx).
    let payload =
        serde_json::to_vec(&json!({"template": "nightly", "overrides": {}})).unwrap_or_default();
    let t = now_secs();
    let first = deliver_signed_at(h, t, &payload).await;
    assert!(
        first.status.is_client_error() && first.status != StatusCode::UNAUTHORIZED,
        "{}: {}",
        first.status,
        first.json
    );
    // Once the template exists, the captured delivery must not start a job when sent again.
    put_template(h).await;
    assert_replay_refused(&deliver_signed_at(h, t, &payload).await);
    assert_eq!(h.job_count(TENANT_A).await, 0);
    // The sender's own retry signs again with a new timestamp and is heard.
    let retry = deliver_signed_at(h, t + 1, &payload).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.json);
    assert_eq!(h.job_count(TENANT_A).await, 1);
}

pub async fn webhook_with_bad_signature_or_stale_timestamp_is_401(h: &Harness) {
    let payload = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let wrong = super::tuneplane_signature("another-secret-0123456789", now_secs(), &payload);
    let stale = super::tuneplane_signature(super::WEBHOOK_SECRET, now_secs() - 3600, &payload);
    let tampered_body = [payload.as_slice(), b" "].concat();
    let good_for_other = super::hub_signature(super::WEBHOOK_SECRET, &payload);
    let cases: [(&str, String, &[u8]); 5] = [
        ("x-tuneplane-signature", wrong, &payload),
        ("x-tuneplane-signature", stale, &payload),
        ("x-hub-signature-256", good_for_other, &tampered_body),
        ("x-hub-signature-256", "sha256=zz".into(), &payload),
        ("x-unrelated", "1".into(), &payload),
    ];
    for (header, value, bytes) in cases {
        let reply = deliver(h, "ci", &[(header, value.as_str())], bytes).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{header}: {value}");
        assert_eq!(reply.json["error"]["code"], "bad_signature");
    }
    let unknown = deliver(h, "nope", &[], &payload).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(h.job_count(TENANT_A).await, 0);
}

/// A pipeline body of three steps, prepare -> train -> evaluate, each the test spec under its
/// step's name with the test code.
fn three_steps() -> Value {
    let step = |name: &str, after: &[&str]| {
        let mut one = body(
            &SPEC.replace("name: sft", &format!("name: {name}")),
            &code(),
        );
        one["name"] = json!(name);
        one["after"] = json!(after);
        one
    };
    json!({
        "name": "nightly",
        "steps": [step("prepare", &[]), step("train", &["prepare"]), step("evaluate", &["train"])],
    })
}

/// The step jobs of a pipeline answer, `(step, job id, the ids its depends_on names)`.
fn step_jobs(reply: &Value) -> Vec<(String, String, Vec<String>)> {
    reply["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let deps = s["job"]["spec"]["depends_on"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["job"].as_str().map(str::to_owned))
                .collect();
            let id = s["job"]["id"].as_str().unwrap_or_default().to_owned();
            (s["step"].as_str().unwrap_or_default().to_owned(), id, deps)
        })
        .collect()
}

/// Asserts that `steps` are prepare, train after prepare, evaluate after train.
fn assert_chained(steps: &[(String, String, Vec<String>)]) {
    let names: Vec<&str> = steps.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["prepare", "train", "evaluate"], "{steps:?}");
    assert!(steps[0].2.is_empty(), "{steps:?}");
    assert_eq!(steps[1].2, [steps[0].1.clone()], "{steps:?}");
    assert_eq!(steps[2].2, [steps[1].1.clone()], "{steps:?}");
}

pub async fn a_signed_webhook_with_steps_submits_a_pipeline(h: &Harness) {
    let payload = serde_json::to_vec(&three_steps()).unwrap_or_default();
    let reply = deliver_signed_at(h, now_secs(), &payload).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    assert_eq!(reply.json["pipeline"], "nightly");
    assert_eq!(reply.json["created"], true);
    assert_chained(&step_jobs(&reply.json));
    assert_eq!(h.job_count(TENANT_A).await, 3);
    // A step that names its own depends_on is refused as through the API, and nothing is stored.
    let mut bad = three_steps();
    bad["steps"][0]["spec"] = json!(format!("{SPEC}depends_on: []\n"));
    let payload = serde_json::to_vec(&bad).unwrap_or_default();
    let reply = deliver_signed_at(h, now_secs(), &payload).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json);
    assert!(
        reply.json.to_string().contains("steps[0].spec.depends_on"),
        "{}",
        reply.json
    );
    assert_eq!(h.job_count(TENANT_A).await, 3);
}

pub async fn a_pipeline_sent_again_with_its_idempotency_key_creates_nothing(h: &Harness) {
    use tuneplane_core::audit::{Actor, AuditSource};
    use tuneplane_core::submit::Origin;
    use tuneplane_functions::routes::pipelines::parse_payload;
    let request = |tenant: &str, key: &str| {
        let actor = Actor {
            key_id: "test".into(),
            source: AuditSource::Webhook,
            request_id: key.into(),
        };
        parse_payload(three_steps())
            .and_then(|b| {
                b.into_request(
                    &tenant.parse().unwrap(),
                    Some(key.into()),
                    Origin::Webhook("ci".into()),
                    actor,
                )
            })
            .expect("a pipeline request")
    };
    let ids = |done: &tuneplane_core::submit::pipeline::SubmittedPipeline| -> Vec<String> {
        done.steps.iter().map(|(_, j)| j.id.to_string()).collect()
    };
    let submit = &h.state.submit;
    let first = submit
        .submit_pipeline(request(TENANT_A, "build-7"), 1)
        .await
        .unwrap();
    assert!(first.created);
    let again = submit
        .submit_pipeline(request(TENANT_A, "build-7"), 2)
        .await
        .unwrap();
    assert!(!again.created, "{again:?}");
    assert_eq!(ids(&again), ids(&first));
    assert_eq!(h.job_count(TENANT_A).await, 3);
    // Another key, or the same key of another tenant, is another pipeline.
    let other = submit
        .submit_pipeline(request(TENANT_A, "build-8"), 3)
        .await
        .unwrap();
    let theirs = submit
        .submit_pipeline(request(super::TENANT_B, "build-7"), 3)
        .await
        .unwrap();
    assert!(other.created && theirs.created);
    for id in ids(&other).iter().chain(&ids(&theirs)) {
        assert!(!ids(&first).contains(id), "{id}");
        assert!(tuneplane_core::control::valid_id(id), "{id}");
    }
    assert_eq!(h.job_count(TENANT_A).await, 6);
}

/// Stores schedule `id` of tenant A that reruns the three-step pipeline submitted first through
/// `POST /v1/pipelines`, as `tuneplane admin create-schedule --from-pipeline` stores it.
async fn store_pipeline_schedule(h: &Harness, id: &str) -> Vec<String> {
    use tuneplane_core::job::JobRecord;
    use tuneplane_core::store::{ScheduleRecord, ScheduleStep};
    let reply = h
        .call(
            Method::POST,
            "/v1/pipelines",
            Some(&h.key_a.clone()),
            &[("content-type", "application/json")],
            serde_json::to_vec(&three_steps()).unwrap_or_default(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    let jobs: Vec<JobRecord> = reply.json["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| serde_json::from_value(s["job"].clone()).unwrap())
        .collect();
    let name_of = |id: &str| {
        jobs.iter()
            .find(|j| j.id == id)
            .map(|j| j.spec.name.clone())
    };
    let steps = jobs
        .iter()
        .map(|j| ScheduleStep {
            name: j.spec.name.clone(),
            spec: j.spec.clone(),
            capsule_sha256: j.capsule_sha256.clone(),
            after: j
                .spec
                .depends_on
                .iter()
                .filter_map(|d| name_of(&d.job))
                .collect(),
        })
        .collect();
    let last = jobs.last().unwrap();
    let schedule = ScheduleRecord {
        id: id.into(),
        tenant: TENANT_A.parse().unwrap(),
        expression: "cron(0 2 * * ? *)".into(),
        spec: last.spec.clone(),
        capsule_sha256: last.capsule_sha256.clone(),
        enabled: true,
        created_at_ms: 0,
        version: 0,
        steps,
    };
    let stored = h.jobs().put_schedule(&schedule).await;
    assert!(stored.is_ok(), "{stored:?}");
    jobs.iter().map(|j| j.id.to_string()).collect()
}

pub async fn a_pipeline_schedule_fires_every_step_once_per_firing(h: &Harness) {
    use tuneplane_functions::triggers::{Outcome, handle_scheduled};
    let first_run = store_pipeline_schedule(h, "nightly-pipeline").await;
    let event = fixture("scheduler_event.json", &[("SCHEDULE", "nightly-pipeline")]);
    let once = handle_scheduled(&h.state, &event).await.unwrap();
    let Outcome::SubmittedPipeline {
        pipeline,
        steps,
        created: true,
    } = &once
    else {
        panic!("expected a pipeline created: {once:?}");
    };
    assert_eq!(pipeline, "evaluate");
    let mut got = Vec::new();
    for step in steps {
        let job = h.jobs().get_job(&step.job_id).await.unwrap().unwrap();
        assert!(
            !first_run.iter().any(|f| *f == job.id),
            "a new job per step: {}",
            job.id
        );
        let deps: Vec<String> = job.spec.depends_on.iter().map(|d| d.job.clone()).collect();
        got.push((step.step.clone(), job.id.into_string(), deps));
    }
    assert_chained(&got);
    assert_eq!(h.job_count(TENANT_A).await, 6);
    // A redelivery of the firing names the same jobs and creates nothing.
    let twice = handle_scheduled(&h.state, &event).await.unwrap();
    assert_eq!(
        twice,
        Outcome::SubmittedPipeline {
            pipeline: pipeline.clone(),
            steps: steps.clone(),
            created: false,
        }
    );
    assert_eq!(h.job_count(TENANT_A).await, 6);
    let answer = serde_json::to_value(&twice).unwrap();
    assert_eq!(answer["outcome"], "submitted_pipeline", "{answer}");
    assert_eq!(answer["steps"][2]["job_id"], got[2].1.as_str(), "{answer}");
}

/// Stores template `nightly` of tenant A with the default code.
async fn put_template(h: &Harness) {
    let code_key = format!("templates/{TENANT_A}/nightly/code.tar.gz");
    let spec: Value = yaml_serde::from_str(SPEC).unwrap_or_default();
    let template = json!({"spec": spec, "code_key": code_key});
    let blobs = h.blobs();
    let put = blobs.put(&code_key, code()).await;
    assert!(put.is_ok(), "{put:?}");
    let key = tuneplane_functions::webhooks::template_key(TENANT_A, "nightly");
    let put = blobs
        .put(&key, serde_json::to_vec(&template).unwrap_or_default())
        .await;
    assert!(put.is_ok(), "{put:?}");
}

pub async fn git_push_webhook_runs_the_source_template_with_overrides(h: &Harness) {
    put_template(h).await;
    let push = br#"{"ref": "refs/heads/main", "after": "9f2c1e7"}"#;
    let sig = super::hub_signature(super::WEBHOOK_SECRET, push);
    let headers = [
        ("x-hub-signature-256", sig.as_str()),
        ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ];
    let reply = deliver(h, "git", &headers, push).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    assert_eq!(reply.json["job"]["spec"]["name"], "sft");
    assert_eq!(
        deliver(h, "git", &headers, push).await.status,
        StatusCode::UNAUTHORIZED
    );

    let explicit =
        serde_json::to_vec(&json!({"template": "nightly", "overrides": {"priority": 7}}))
            .unwrap_or_default();
    let reply = deliver_signed_at(h, now_secs(), &explicit).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
    assert_eq!(reply.json["job"]["spec"]["priority"], 7);
}

/// A fixture event with `{{NAME}}` placeholders filled in.
pub fn fixture(name: &str, vars: &[(&str, &str)]) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut text = std::fs::read_to_string(&path).expect("read the fixture");
    for (k, v) in vars {
        text = text.replace(&format!("{{{{{k}}}}}"), v);
    }
    serde_json::from_str(&text).expect("fixture JSON")
}

/// An S3 "object created" notification for `key` (as S3 would encode it) in bucket `tp`.
pub fn s3_created(key: &str, etag: &str) -> Value {
    fixture(
        "s3_object_created.json",
        &[("BUCKET", "tp"), ("KEY", key), ("ETAG", etag)],
    )
}

/// A "TunePlane Job Submission" event from `account` carrying the test spec and code.
pub fn submission_event(account: &str) -> Value {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(code());
    let spec = SPEC.replace('\n', "\\n");
    fixture(
        "eventbridge_submission.json",
        &[("SPEC", &spec), ("CODE", &b64), ("ACCOUNT", account)],
    )
}

/// Stores schedule `id` of tenant A, running the spec and capsule of a job submitted first.
pub async fn store_schedule(h: &Harness, id: &str) {
    use tuneplane_core::store::ScheduleRecord;
    let first = h.submit(&body(SPEC, &code()), None).await;
    let template: tuneplane_core::job::JobRecord =
        serde_json::from_value(first.json["job"].clone()).unwrap();
    let schedule = ScheduleRecord {
        id: id.into(),
        tenant: TENANT_A.parse().unwrap(),
        expression: "cron(0 2 * * ? *)".into(),
        spec: template.spec.clone(),
        capsule_sha256: template.capsule_sha256.clone(),
        enabled: true,
        created_at_ms: 0,
        version: 0,
        steps: Vec::new(),
    };
    let stored = h.jobs().put_schedule(&schedule).await;
    assert!(stored.is_ok(), "{stored:?}");
}

/// Puts a zip with the test spec and a `train.py` at `key`, as a user drops it in the inbox.
async fn put_inbox_zip(h: &Harness, key: &str) {
    let archive = super::archives::zip(&[("tuneplane.yaml", SPEC), ("train.py", "print(1)\n")]);
    assert!(h.blobs().put(key, archive).await.is_ok());
}

/// Handles `event` twice, as at-least-once delivery may: a job is created, then found again.
async fn assert_inbox_submits_once(h: &Harness, event: &Value) {
    use tuneplane_functions::triggers::{Outcome, handle_inbox};
    // The first delivery creates the job; the second finds it.
    for first in [true, false] {
        let outcomes = handle_inbox(&h.state, event).await.unwrap();
        assert!(
            matches!(
                outcomes.as_slice(),
                [Outcome::Submitted { created, .. }] if *created == first
            ),
            "delivery {} of the event: {outcomes:?}",
            if first { 1 } else { 2 }
        );
    }
}

/// The rejection note stored at `key`, as JSON (`null` when absent or not JSON).
async fn note_at(h: &Harness, key: &str) -> Value {
    let note = h.blobs().get(key).await.ok().flatten().unwrap_or_default();
    serde_json::from_slice(&note).unwrap_or(Value::Null)
}

pub async fn scheduled_event_delivered_twice_creates_one_job(h: &Harness) {
    use tuneplane_functions::triggers::{Outcome, handle_scheduled};
    // The schedule runs the spec and capsule of an earlier submission.
    store_schedule(h, "nightly-sft").await;
    let event = fixture("scheduler_event.json", &[("SCHEDULE", "nightly-sft")]);
    let once = handle_scheduled(&h.state, &event).await.unwrap();
    let twice = handle_scheduled(&h.state, &event).await.unwrap();
    let (
        Outcome::Submitted {
            job_id: a,
            created: true,
        },
        Outcome::Submitted {
            job_id: b,
            created: false,
        },
    ) = (&once, &twice)
    else {
        panic!("expected created then repeated: {once:?} {twice:?}");
    };
    assert_eq!(a, b);
    assert_eq!(h.job_count(TENANT_A).await, 2);
    let missing = fixture("scheduler_event.json", &[("SCHEDULE", "gone")]);
    let outcome = handle_scheduled(&h.state, &missing).await.unwrap();
    assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
}

pub async fn inbox_archive_becomes_a_job(h: &Harness) {
    put_inbox_zip(h, "inbox/acme/run-1.zip").await;
    let event = s3_created("inbox/acme/run-1.zip", "0123abcd");
    // At-least-once delivery: the same notification again is the same job.
    assert_inbox_submits_once(h, &event).await;
    assert_eq!(h.job_count(TENANT_A).await, 1);
    assert_eq!(
        h.object_count("inbox/").await,
        1,
        "no note beside an accepted archive"
    );
}

/// Delivers the creation of the inbox object `key` (event tag `tag`); the key of the one
/// rejection note it must produce.
async fn rejected_with_note(h: &Harness, key: &str, tag: &str) -> String {
    use tuneplane_functions::triggers::{Outcome, handle_inbox};
    let outcomes = handle_inbox(&h.state, &s3_created(key, tag)).await.unwrap();
    let [
        Outcome::Rejected {
            note_key: Some(note_key),
            ..
        },
    ] = outcomes.as_slice()
    else {
        panic!("expected a rejection note: {outcomes:?}");
    };
    note_key.clone()
}

pub async fn bad_inbox_archive_gets_an_error_file_only(h: &Harness) {
    use tuneplane_functions::triggers::{Outcome, handle_inbox};
    let key = "inbox/acme/evil.tar";
    assert!(h.blobs().put(key, hostile_tar()).await.is_ok());
    let note_key = &rejected_with_note(h, key, "ffff").await;
    assert_eq!(note_key, "inbox/acme/evil.tar.error.json");
    let note = note_at(h, note_key).await;
    assert_eq!(note["error"]["code"], "invalid_code", "{note}");
    assert!(
        note["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("evil.sh")
    );
    assert_eq!(h.job_count(TENANT_A).await, 0);
    assert_eq!(h.object_count("capsules/").await, 0);
    assert_eq!(
        h.object_count("inbox/").await,
        2,
        "the archive and its note, nothing else"
    );
    // The note's own creation event is ignored.
    let note_event = s3_created(note_key, "1");
    let ignored = handle_inbox(&h.state, &note_event).await.unwrap();
    assert!(
        matches!(ignored.as_slice(), [Outcome::Skipped { .. }]),
        "{ignored:?}"
    );
}

/// The inbox takes the tenant from the object's key: an archive under a tenant nobody created
/// runs nothing and gets a note saying so.
pub async fn an_inbox_archive_of_an_unknown_tenant_is_refused_with_a_note(h: &Harness) {
    let key = "inbox/nobody/run-1.zip";
    put_inbox_zip(h, key).await;
    let note_key = rejected_with_note(h, key, "abcd").await;
    let note = note_at(h, &note_key).await;
    let message = note["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no tenant \"nobody\""), "{note}");
    assert_eq!(h.object_count("capsules/").await, 0);
    assert_eq!(h.job_count("nobody").await, 0);
}

pub async fn submission_event_becomes_a_job(h: &Harness) {
    let event = submission_event(super::SENDER_ACCOUNT);
    assert_inbox_submits_once(h, &event).await;
}

/// The tenant of a submission event comes from the sending account, which EventBridge sets and
/// the sender cannot choose: an unmapped account, a `detail.tenant` naming another tenant and a
/// foreign `source` are all refused, and none of them creates a job.
pub async fn forged_submission_events_are_refused(h: &Harness) {
    use tuneplane_functions::triggers::{Outcome, handle_inbox};
    let event = submission_event;
    let mut unmapped = event("999988887777");
    unmapped["id"] = "forged-1".into();
    let mut other_tenant = event(super::SENDER_ACCOUNT);
    other_tenant["id"] = "forged-2".into();
    other_tenant["detail"]["tenant"] = super::TENANT_B.into();
    let mut foreign_source = event(super::SENDER_ACCOUNT);
    foreign_source["id"] = "forged-3".into();
    foreign_source["source"] = "acme.console".into();
    for (event, needle) in [
        (unmapped, "TUNEPLANE_EVENT_SENDERS"),
        (other_tenant, "does not match tenant"),
        (foreign_source, "tuneplane.jobs"),
    ] {
        let outcomes = handle_inbox(&h.state, &event).await.unwrap();
        let [
            Outcome::Rejected {
                reason,
                note_key: None,
            },
        ] = outcomes.as_slice()
        else {
            panic!("expected a refusal: {outcomes:?}");
        };
        assert!(reason.contains(needle), "{reason}");
    }
    assert_eq!(h.job_count(TENANT_A).await, 0);
    assert_eq!(h.job_count(super::TENANT_B).await, 0);
}

/// S3 URL-encodes keys in its events (`+` for a space, `%2B` for `+`); the archive is found
/// whether the event carries the encoded or the plain key, a name the store cannot hold is
/// refused with a note (under a cleaned name), and an object deleted before the delivery is
/// skipped: every one of these is final, none is an error that Lambda would retry.
pub async fn inbox_keys_with_spaces_and_plus_are_found_and_bad_names_get_a_note(h: &Harness) {
    use serde_json::json;
    use tuneplane_functions::triggers::{Outcome, handle_inbox};
    let key = "inbox/acme/my job+v2.zip";
    put_inbox_zip(h, key).await;
    let encoded = s3_created("inbox/acme/my+job%2Bv2.zip", "e1");
    let outcomes = handle_inbox(&h.state, &encoded).await.unwrap();
    let [
        Outcome::Submitted {
            job_id,
            created: true,
        },
    ] = outcomes.as_slice()
    else {
        panic!("expected a job: {outcomes:?}");
    };
    // The same object announced through EventBridge with the key as stored.
    let plain = json!({
        "detail-type": "Object Created",
        "source": "aws.s3",
        "detail": {"bucket": {"name": "tp"}, "object": {"key": key, "etag": "e1"}}
    });
    let again = handle_inbox(&h.state, &plain).await.unwrap();
    assert_eq!(
        again,
        vec![Outcome::Submitted {
            job_id: job_id.clone(),
            created: false
        }]
    );

    // `%` cannot be in a stored key (S3 sends it as %25): a final rejection with a note.
    let bad = s3_created("inbox/acme/50%25.zip", "e2");
    let outcomes = handle_inbox(&h.state, &bad).await.unwrap();
    let [
        Outcome::Rejected {
            reason,
            note_key: Some(note_key),
        },
    ] = outcomes.as_slice()
    else {
        panic!("expected a rejection note: {outcomes:?}");
    };
    assert_eq!(note_key, "inbox/acme/50_.zip.error.json");
    assert!(reason.contains("rename the file"), "{reason}");
    let note = note_at(h, note_key).await;
    assert_eq!(note["object"], "inbox/acme/50%.zip", "{note}");

    // Deleted before the delivery: skipped, no note, no error.
    let gone = s3_created("inbox/acme/gone.zip", "e3");
    let outcomes = handle_inbox(&h.state, &gone).await.unwrap();
    assert!(
        matches!(outcomes.as_slice(), [Outcome::Skipped { reason }] if reason.contains("no longer exists")),
        "{outcomes:?}"
    );
    assert_eq!(h.job_count(TENANT_A).await, 1);
    assert_eq!(
        h.object_count("inbox/").await,
        2,
        "the archive and the one note, nothing else"
    );
}
