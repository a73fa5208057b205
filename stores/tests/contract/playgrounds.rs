//! Contract cases for a tenant's playground limit: the count and the create are one conditional
//! write, so concurrent creates never pass the limit.

use std::sync::Arc;

use tuneplane_core::store::{JobStore, PlaygroundCreate, PlaygroundRecord, StoreError};

use super::fixtures::ok;

type Store = Arc<dyn JobStore>;

/// A playground of `tenant` living an hour from `now`.
fn pg(id: &str, tenant: &str, now: i64) -> PlaygroundRecord {
    PlaygroundRecord::requested(
        id,
        tenant.parse().unwrap(),
        "Qwen/Qwen3-0.6B",
        "l40s",
        1,
        now,
        now + 3_600_000,
    )
}

/// `tenant`'s live playgrounds at `now`, as the store lists them.
async fn live(store: &Store, tenant: &str, now: i64) -> Vec<PlaygroundRecord> {
    ok(store.list_playgrounds().await, "list")
        .into_iter()
        .filter(|p| p.tenant == tenant && p.expires_at_ms > now)
        .collect()
}

/// Creates `count` playgrounds of `tenant` at once (ids `<prefix>-<i>`), each under `limit`;
/// how many were created and how many found the tenant at its limit.
async fn create_at_once(
    store: &Store,
    tenant: &str,
    prefix: &str,
    count: usize,
    limit: u32,
    now: i64,
) -> (usize, usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let (store, record) = (Arc::clone(store), pg(&format!("{prefix}-{i}"), tenant, now));
        tasks.spawn(async move { store.create_playground(&record, limit, now).await });
    }
    let (mut created, mut refused) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        match ok(ok(done, "join"), "create playground") {
            PlaygroundCreate::Created(p) => {
                assert_eq!(p.version, 1);
                created += 1;
            }
            PlaygroundCreate::AtLimit { live } => {
                assert!(live >= limit as usize, "refused at {live} live of {limit}");
                refused += 1;
            }
        }
    }
    (created, refused)
}

pub async fn concurrent_playground_creates_over_the_limit_leave_exactly_the_limit(store: Store) {
    let now = tuneplane_core::clock::now_ms();
    // Twelve creates of one tenant race for three places; another tenant's are not counted.
    let ((created, refused), other) = tokio::join!(
        create_at_once(&store, "acme", "pg-a", 12, 3, now),
        create_at_once(&store, "globex", "pg-g", 2, 3, now),
    );
    assert_eq!((created, refused), (3, 9));
    assert_eq!(other, (2, 0));
    assert_eq!(live(&store, "acme", now).await.len(), 3);
    assert_eq!(live(&store, "globex", now).await.len(), 2);

    // A playground past its TTL (a delete moves it to now) or gone frees its place; a live one
    // written outside the limit (an older version's) takes one.
    let mut first = live(&store, "acme", now).await.remove(0);
    first.expires_at_ms = now;
    ok(store.put_playground(&first).await, "expire one");
    let second = live(&store, "acme", now).await.remove(0);
    ok(store.delete_playground(&second.id).await, "delete one");
    ok(
        store.put_playground(&pg("pg-old", "acme", now)).await,
        "an older version's",
    );
    assert_eq!(
        create_at_once(&store, "acme", "pg-b", 6, 3, now).await,
        (1, 5)
    );
    assert_eq!(live(&store, "acme", now).await.len(), 3);

    // A taken id is refused as such, whatever the count.
    let taken = store
        .create_playground(&pg("pg-g-0", "globex", now), 10, now)
        .await;
    assert!(
        matches!(taken, Err(StoreError::AlreadyExists { .. })),
        "{taken:?}"
    );
}
