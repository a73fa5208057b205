//! Contract cases of API key lifecycle: listing, revocation and ending console sessions.

use std::sync::Arc;

use tuneplane_core::store::{ApiKeyChange, ApiKeyRecord, JobStore, hash_api_key};

use super::fixtures::ok;

type Store = Arc<dyn JobStore>;

fn key(secret: &str, tenant: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        key_sha256: hash_api_key(secret),
        tenant: tenant.parse().unwrap(),
        scopes: vec!["jobs:read".into()],
        name: format!("{tenant}-key"),
        created_at_ms: 1,
        revoked_at_ms: None,
        session_epoch: 0,
    }
}

pub async fn api_keys_list_sorted_with_revoked_ones_and_old_records(store: Store) {
    assert!(ok(store.list_api_keys().await, "empty list").is_empty());
    let keys = [
        key("tp_a", "acme"),
        key("tp_b", "globex"),
        key("tp_c", "acme"),
    ];
    for k in &keys {
        ok(store.put_api_key(k).await, "put key");
    }
    // Other records in the same table are not keys.
    ok(
        store.put_capacity(&serde_json::json!({"series": {}})).await,
        "put capacity",
    );
    let revoked = ok(
        store
            .update_api_key(&keys[1].key_sha256, ApiKeyChange::Revoke { at_ms: 7 })
            .await,
        "revoke",
    );
    assert_eq!(revoked.as_ref().and_then(|k| k.revoked_at_ms), Some(7));
    let listed = ok(store.list_api_keys().await, "list");
    let mut expected: Vec<ApiKeyRecord> = keys.to_vec();
    expected[1] = revoked.expect("revoked key missing");
    expected.sort_by(|a, b| a.key_sha256.cmp(&b.key_sha256));
    assert_eq!(listed, expected);
}

pub async fn revoking_a_key_keeps_its_first_time_and_ends_its_sessions(store: Store) {
    let k = key("tp_revoke", "acme");
    ok(store.put_api_key(&k).await, "put key");
    let first = ok(
        store
            .update_api_key(&k.key_sha256, ApiKeyChange::Revoke { at_ms: 10 })
            .await,
        "revoke",
    );
    let again = ok(
        store
            .update_api_key(&k.key_sha256, ApiKeyChange::Revoke { at_ms: 20 })
            .await,
        "revoke again",
    );
    let stored = ok(store.get_api_key(&k.key_sha256).await, "get");
    assert_eq!(again, stored);
    let stored = stored.expect("revoked key is kept for the audit trail");
    assert!(!stored.is_active());
    assert_eq!(stored.revoked_at_ms, Some(10));
    assert_eq!(
        first.map(|f| f.session_epoch),
        Some(1),
        "revoking ends sessions"
    );
}

pub async fn ending_sessions_keeps_the_key_valid_and_concurrent_changes_all_land(store: Store) {
    let k = key("tp_sessions", "acme");
    ok(store.put_api_key(&k).await, "put key");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let store = Arc::clone(&store);
        let hash = k.key_sha256.clone();
        tasks.spawn(async move { store.update_api_key(&hash, ApiKeyChange::EndSessions).await });
    }
    while let Some(done) = tasks.join_next().await {
        let outcome = done.expect("task");
        assert!(ok(outcome, "end sessions").is_some());
    }
    let stored = ok(store.get_api_key(&k.key_sha256).await, "get").expect("key missing");
    assert!(stored.is_active());
    assert_eq!(stored.session_epoch, 4, "every concurrent change landed");
}

pub async fn changing_a_missing_key_writes_nothing(store: Store) {
    let hash = hash_api_key("tp_never_stored");
    let out = ok(
        store
            .update_api_key(&hash, ApiKeyChange::Revoke { at_ms: 1 })
            .await,
        "revoke missing",
    );
    assert_eq!(out, None);
    assert_eq!(ok(store.get_api_key(&hash).await, "get"), None);
    assert!(ok(store.list_api_keys().await, "list").is_empty());
}
