//! API key lifecycle on the command line, as an operator runs it: `tuneplane admin create-key`,
//! then `admin keys list|revoke|rotate` on an embedded store in a temporary folder, checked
//! against the store's own authentication.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod cli_support;

use cli_support::{admin, ok, text};
use std::path::Path;

use serde_json::Value;
use tuneplane_core::submit::{SubmitError, authenticate};

fn listed(dir: &Path) -> Vec<Value> {
    serde_json::from_str(&ok(&admin(dir, &["keys", "list", "-o", "json"]))).unwrap()
}

async fn tenant_of(dir: &Path, secret: &str) -> Result<String, SubmitError> {
    let store = tuneplane_stores::EmbeddedJobStore::open(dir.join("jobs")).unwrap();
    authenticate(&store, Some(&format!("Bearer {secret}")))
        .await
        .map(|p| p.tenant.into_string())
}

#[tokio::test]
async fn keys_are_listed_revoked_and_rotated_and_revoked_keys_stop_authenticating() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    assert!(ok(&admin(dir, &["keys", "list"])).starts_with("no API keys"));
    let first = ok(&admin(
        dir,
        &["create-key", "--tenant", "acme", "--name", "ci"],
    ));
    let first = first.trim().to_owned();
    let second = ok(&admin(dir, &["create-key", "--tenant", "globex"]));
    let second = second.trim().to_owned();

    let keys = listed(dir);
    assert_eq!(keys.len(), 2);
    let acme = keys.iter().find(|k| k["tenant"] == "acme").unwrap();
    let id = acme["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("k-") && id.len() == 18, "{id}");
    let table = ok(&admin(dir, &["keys", "list", "--tenant", "acme"]));
    assert!(table.contains(&id) && table.contains("active") && !table.contains("globex"));
    assert!(!table.contains(&first), "a secret was printed");

    // Rotate: the new secret works, the old one is refused, both records remain.
    let rotated = ok(&admin(dir, &["keys", "rotate", &id]));
    let rotated = rotated.trim().to_owned();
    assert!(rotated.starts_with("tp_") && rotated != first);
    assert_eq!(tenant_of(dir, &rotated).await.ok().as_deref(), Some("acme"));
    assert!(matches!(
        tenant_of(dir, &first).await,
        Err(SubmitError::Unauthenticated)
    ));
    let keys = listed(dir);
    assert_eq!(keys.len(), 3);
    let old = keys.iter().find(|k| k["id"] == id.as_str()).unwrap();
    assert!(old["revoked_at_ms"].as_i64().is_some());

    // Revoke the other tenant's key; a second revoke changes nothing; the rest still works.
    let globex = keys.iter().find(|k| k["tenant"] == "globex").unwrap();
    let globex_id = globex["id"].as_str().unwrap();
    assert!(ok(&admin(dir, &["keys", "revoke", globex_id])).contains("revoked key"));
    assert!(ok(&admin(dir, &["keys", "revoke", globex_id])).contains("already revoked"));
    assert!(matches!(
        tenant_of(dir, &second).await,
        Err(SubmitError::Unauthenticated)
    ));
    assert_eq!(tenant_of(dir, &rotated).await.ok().as_deref(), Some("acme"));
    let table = ok(&admin(dir, &["keys", "list"]));
    assert!(table.contains("revoked"), "{table}");

    // Unknown or malformed ids and rotating a revoked key fail, naming what to do; nothing changes.
    for (args, expected) in [
        (
            vec!["keys", "revoke", "k-0000000000000000"],
            "admin keys list",
        ),
        (vec!["keys", "revoke", "tp_secret"], "k- and 16 hex digits"),
        (vec!["keys", "rotate", &id], "is revoked"),
    ] {
        let out = admin(dir, &args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    assert_eq!(listed(dir).len(), 3);
}
