//! Suite cases from the security review (issue 17): signature schemes per source, idempotency
//! from signed data, hostile signature headers, and the media type of JSON bodies.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::archives::{SPEC, body, code};
use super::triggers::deliver;
use tuneplane_core::clock::now_secs;

use super::{
    Harness, TENANT_A, TENANT_B, TENANT_B_NAMESPACE, WEBHOOK_SECRET, hub_signature,
    tuneplane_signature,
};

pub async fn a_webhook_signed_in_the_other_scheme_is_refused_and_stores_nothing(h: &Harness) {
    let payload = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    // Correct signatures under the source's secret, each in the scheme the source does not use.
    let hub = hub_signature(WEBHOOK_SECRET, &payload);
    let reply = deliver(h, "ci", &[("x-hub-signature-256", hub.as_str())], &payload).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);
    let message = reply.json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("x-tuneplane-signature"), "{message}");
    let tp = tuneplane_signature(WEBHOOK_SECRET, now_secs(), &payload);
    let reply = deliver(
        h,
        "git",
        &[("x-tuneplane-signature", tp.as_str())],
        &payload,
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);
    assert_eq!(h.job_count(TENANT_A).await, 0);
    assert_eq!(h.object_count("webhooks/seen").await, 0);
}

pub async fn webhook_idempotency_comes_from_signed_data_not_the_delivery_header(h: &Harness) {
    // Two different signed deliveries that carry the same (unsigned) delivery id are two jobs.
    let mut created = Vec::new();
    for priority in [1, 2] {
        let mut submission = body(SPEC, &code());
        submission["spec"] = json!(format!("{SPEC}\npriority: {priority}\n"));
        let payload = serde_json::to_vec(&submission).unwrap_or_default();
        let sig = tuneplane_signature(WEBHOOK_SECRET, now_secs(), &payload);
        let headers = [
            ("x-tuneplane-signature", sig.as_str()),
            ("x-tuneplane-delivery", "same-delivery-id"),
            ("x-github-delivery", "same-delivery-id"),
        ];
        let reply = deliver(h, "ci", &headers, &payload).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json);
        created.push(reply.json["job_id"].as_str().unwrap_or_default().to_owned());
    }
    assert_ne!(created[0], created[1]);
    assert_eq!(h.job_count(TENANT_A).await, 2);
}

pub async fn a_signature_header_with_ten_thousand_values_is_refused_as_malformed(h: &Harness) {
    let payload = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let t = now_secs();
    let good = tuneplane_signature(WEBHOOK_SECRET, t, &payload);
    let v1 = good.split(",v1=").nth(1).unwrap_or_default().to_owned();
    let header = format!("t={t}{}", format!(",v1={v1}").repeat(10_000));
    let reply = deliver(
        h,
        "ci",
        &[("x-tuneplane-signature", header.as_str())],
        &payload,
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);
    let message = reply.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("malformed") && message.contains("512 bytes"),
        "{message}"
    );
    assert_eq!(h.job_count(TENANT_A).await, 0);
}

pub async fn a_text_plain_submission_is_415_and_stores_nothing(h: &Harness) {
    let bytes = serde_json::to_vec(&body(SPEC, &code())).unwrap_or_default();
    let key = h.key_a.clone();
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonx",
    ] {
        let reply = h
            .call(
                Method::POST,
                "/v1/jobs",
                Some(&key),
                &[("content-type", content_type)],
                bytes.clone(),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type}"
        );
        assert_eq!(reply.json["error"]["code"], "unsupported_media_type");
        let message = reply.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("application/json"), "{message}");
    }
    assert_eq!(h.job_count(TENANT_A).await, 0);
    assert_eq!(h.object_count("capsules").await, 0);
    // JSON with parameters, a +json type, or no Content-Type at all are accepted.
    for headers in [
        vec![("content-type", "application/json; charset=utf-8")],
        vec![],
    ] {
        let reply = h
            .call(
                Method::POST,
                "/v1/jobs",
                Some(&key),
                &headers,
                bytes.clone(),
            )
            .await;
        assert!(reply.status.is_success(), "{headers:?}: {}", reply.json);
    }
    let reply = h
        .call(
            Method::POST,
            "/v1/playgrounds",
            Some(&key),
            &[("content-type", "text/plain")],
            br#"{"model": "m", "series": "l40s", "gpus": 1}"#.to_vec(),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        reply.json
    );
}

/// Namespaces come from the operator's tenant mapping: a spec naming none gets its tenant's, a
/// spec naming another tenant's (or the shared one, for a mapped tenant) is refused, and the
/// refusal stores nothing.
pub async fn a_spec_may_name_only_its_tenants_namespace(h: &Harness) {
    let a = h.submit(&body(SPEC, &code()), None).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    assert_eq!(
        namespace_of(h, &a).await,
        tuneplane_core::constants::DEFAULT_NAMESPACE
    );
    let b = as_b(h, SPEC).await;
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.json);
    assert_eq!(namespace_of(h, &b).await, TENANT_B_NAMESPACE);
    let named = as_b(h, &format!("{SPEC}namespace: {TENANT_B_NAMESPACE}\n")).await;
    assert_eq!(named.status, StatusCode::CREATED, "{}", named.json);

    let spoofs = [
        (TENANT_A, format!("{SPEC}namespace: {TENANT_B_NAMESPACE}\n")),
        (TENANT_B, format!("{SPEC}namespace: tuneplane-jobs\n")),
        (TENANT_B, format!("{SPEC}namespace: kube-system\n")),
    ];
    for (tenant, spec) in spoofs {
        let (reply, own) = if tenant == TENANT_A {
            let reply = h.submit(&body(&spec, &code()), None).await;
            (reply, tuneplane_core::constants::DEFAULT_NAMESPACE)
        } else {
            (as_b(h, &spec).await, TENANT_B_NAMESPACE)
        };
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{tenant}: {}",
            reply.json
        );
        assert_eq!(reply.json["error"]["code"], "invalid_spec");
        let field = &reply.json["error"]["details"]["fields"][0];
        assert_eq!(field["path"], "namespace", "{}", reply.json);
        let message = field["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("run in {own:?}")), "{message}");
    }
    assert_eq!(h.job_count(TENANT_A).await, 1);
    assert_eq!(h.job_count(TENANT_B).await, 2);
}

/// The namespace in the stored record of the job `reply` created.
async fn namespace_of(h: &Harness, reply: &super::Reply) -> String {
    let id = reply.json["job_id"].as_str().unwrap_or_default();
    let record = h.jobs().get_job(id).await.ok().flatten();
    record.map(|r| r.spec.namespace).unwrap_or_default()
}

/// `POST /v1/jobs` of `spec` with the usual code, as tenant B.
async fn as_b(h: &Harness, spec: &str) -> super::Reply {
    let bytes = serde_json::to_vec(&body(spec, &code())).unwrap_or_default();
    let key = h.key_b.clone();
    h.call(
        Method::POST,
        "/v1/jobs",
        Some(&key),
        &[("content-type", "application/json")],
        bytes,
    )
    .await
}
