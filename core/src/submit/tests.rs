//! Unit tests of the pure parts of submission; the full flow is tested through the HTTP router
//! against both store implementations in `tuneplane-functions`.

use super::*;

#[test]
fn request_digest_depends_only_on_the_capsule() {
    assert_eq!(request_digest("ab"), request_digest("ab"));
    assert_ne!(request_digest("ab"), request_digest("ac"));
    assert_eq!(request_digest("ab").len(), 64);
}

#[test]
fn idempotency_keys_must_be_short_printable_text() {
    assert!(check_idempotency_key("build-42").is_ok());
    for bad in [
        String::new(),
        "a\nb".into(),
        "k".repeat(MAX_IDEMPOTENCY_KEY_LEN + 1),
    ] {
        assert!(
            matches!(
                check_idempotency_key(&bad),
                Err(SubmitError::InvalidRequest(_))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn new_keys_hash_to_their_record_and_carry_the_prefix() {
    let (secret, record) = new_api_key([7; 20], "acme", vec![SCOPE_JOBS_READ.into()], "ci", 5);
    assert!(secret.starts_with(API_KEY_PREFIX));
    assert_eq!(record.key_sha256, crate::store::hash_api_key(&secret));
    assert_eq!(record.tenant, "acme");
}

#[test]
fn admin_scope_implies_every_other_scope() {
    let p = |scopes: &[&str]| Principal {
        tenant: "t".into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        key_name: "k".into(),
    };
    assert!(p(&[SCOPE_ADMIN]).require(SCOPE_JOBS_WRITE).is_ok());
    assert!(p(&[SCOPE_JOBS_READ]).require(SCOPE_JOBS_READ).is_ok());
    assert!(matches!(
        p(&[SCOPE_JOBS_READ]).require(SCOPE_JOBS_WRITE),
        Err(SubmitError::Forbidden { .. })
    ));
}

#[test]
fn hostile_archive_is_a_client_error_naming_the_entry() {
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    header.set_mode(0o777);
    let linked = tar.append_link(&mut header, "evil", "/etc/passwd");
    assert!(linked.is_ok());
    let bytes = tar.into_inner().unwrap_or_default();
    let dir = code::Scratch::new(&std::env::temp_dir()).unwrap();
    let spec = "{\"name\":\"t\",\"image\":\"i\",\"entrypoint\":\"true\",\"pools\":[{\"name\":\"main\",\"series\":\"h200\",\"nodes\":1,\"gpus_per_node\":1}]}";
    let err = prepare(
        Some(spec),
        code::ArchiveSource::Bytes(bytes),
        None,
        &SubmitConfig::default(),
        dir.path(),
    )
    .err();
    match err {
        Some(e @ SubmitError::InvalidCode(_)) => {
            assert!(e.is_client_error());
            assert!(e.to_string().contains("evil"), "{e}");
        }
        other => panic!("expected InvalidCode, got {other:?}"),
    }
}

fn gpu_spec(nodes: u32, gpus_per_node: u32) -> JobSpec {
    let text = format!(
        "name: t\nimage: i\nentrypoint: 'true'\npools: [{{name: main, series: h200, nodes: {nodes}, gpus_per_node: {gpus_per_node}}}]\n"
    );
    crate::spec::validate(&text, None, &crate::spec::Defaults::default())
        .unwrap()
        .spec
}

#[test]
fn a_job_above_a_hard_quota_is_a_client_error_naming_the_limit_and_the_need() {
    use crate::quota::TenantQuota;
    let mut quota = TenantQuota::unlimited("team-a");
    quota.set_gpu_limit("h200", 16, false);
    // 3 nodes × 8 GPUs = 24 > 16: refused, saying why and what to do.
    let err = check_quota(Some(&quota), &gpu_spec(3, 8)).err();
    match err {
        Some(e @ SubmitError::QuotaExceeded(_)) => {
            assert!(e.is_client_error());
            let text = e.to_string();
            assert!(
                text.starts_with("tenant team-a's quota is 16 h200 GPUs; this job needs 24"),
                "{text}"
            );
            assert!(text.contains("tuneplane admin quota set"), "{text}");
        }
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
    // Exactly the limit fits; no quota at all is unlimited; a borrowing limit may be exceeded.
    assert!(check_quota(Some(&quota), &gpu_spec(2, 8)).is_ok());
    assert!(check_quota(None, &gpu_spec(64, 8)).is_ok());
    if let Some(limit) = quota.series.get_mut("h200") {
        limit.borrow = true;
    }
    assert!(check_quota(Some(&quota), &gpu_spec(3, 8)).is_ok());
}
