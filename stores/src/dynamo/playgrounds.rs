//! A tenant's playground limit as one conditional write (docs/design.md §6).
//!
//! Each tenant that creates playgrounds has a guard item `PGSLOTS#<tenant>` / `PGSLOTS` listing
//! the ids of its live playgrounds, with a `version`. A create reads the guard (consistently),
//! checks each listed playground, and each the `active` index shows for the tenant (made before
//! the guard existed, or written directly), against its record, and writes the new playground and
//! the guard's next version in one `TransactWriteItems` conditioned on the version it read. Of two
//! creates that read the same version one commits; the other is cancelled and counts again, now
//! seeing the first. Deletes and reclaims need not touch the guard: a listed id whose record is
//! gone or past its TTL is dropped by the next create.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use serde::{Deserialize, Serialize};
use tuneplane_core::ids::TenantId;
use tuneplane_core::store::{
    PlaygroundCreate, PlaygroundRecord, Result, StoreError, is_live_playground_of,
};

use super::item::{Item, PLAYGROUNDS_PK, Stored, n, s, to_json};
use super::{ACTIVE_INDEX, DynamoJobStore, WRITE_TOKEN, write_token};

/// Sort key of a tenant's guard item.
const SLOTS_SK: &str = "PGSLOTS";
/// Creates that lose the guard to another one count again at most this often.
const ATTEMPTS: u32 = 10;

/// The guard's body: the tenant's playgrounds that were live at its last create.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Slots {
    ids: Vec<String>,
}

/// The partition key of `tenant`'s guard item.
fn slots_pk(tenant: &TenantId) -> String {
    format!("PGSLOTS#{tenant}")
}

impl DynamoJobStore {
    /// [`tuneplane_core::store::JobStore::create_playground`]; see the module docs.
    pub(super) async fn create_playground_inner(
        &self,
        pg: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<PlaygroundCreate> {
        let guard = slots_pk(&pg.tenant);
        for attempt in 0..ATTEMPTS {
            let (version, listed) = self.read_slots(&guard).await?;
            let live = self.live_ids(&pg.tenant, listed, now_ms).await?;
            if live.len() >= limit as usize {
                return Ok(PlaygroundCreate::AtLimit { live: live.len() });
            }
            if let Some(created) = self.create_guarded(pg, &guard, version, live).await? {
                return Ok(PlaygroundCreate::Created(Box::new(created)));
            }
            // Another create moved the guard: count again.
            tokio::time::sleep(std::time::Duration::from_millis(5 << attempt.min(5))).await;
        }
        Err(self.conflict(&guard, 0))
    }

    /// The guard's version (`None` before the tenant's first guarded create) and listed ids.
    async fn read_slots(&self, guard: &str) -> Result<(Option<u64>, Vec<String>)> {
        let Some(item) = self.get_item(guard, SLOTS_SK).await? else {
            return Ok((None, Vec::new()));
        };
        let stored = Stored {
            table: self.table(),
            item: &item,
        };
        let version = u64::try_from(stored.i64("version")?).map_err(|e| StoreError::Corrupt {
            table: self.table().to_owned(),
            key: guard.to_owned(),
            reason: format!("version: {e}"),
        })?;
        let slots: Slots = stored.json("body")?;
        Ok((Some(version), slots.ids))
    }

    /// Which of `listed`, and of the tenant's playgrounds the `active` index shows, are live at
    /// `now_ms` by their records (read consistently: the index may lag a delete).
    async fn live_ids(
        &self,
        tenant: &TenantId,
        listed: Vec<String>,
        now_ms: i64,
    ) -> Result<BTreeSet<String>> {
        let mut candidates: BTreeSet<String> = listed.into_iter().collect();
        let indexed = self
            .query_partition(Some(ACTIVE_INDEX), "apk", PLAYGROUNDS_PK)
            .await?;
        for item in &indexed {
            let pg: PlaygroundRecord = Stored {
                table: self.table(),
                item,
            }
            .json("body")?;
            // A TTL only ever moves earlier: one the index shows past it is past it.
            if is_live_playground_of(&pg, tenant, now_ms) {
                candidates.insert(pg.id);
            }
        }
        let mut live = BTreeSet::new();
        for id in candidates {
            let record: Option<PlaygroundRecord> =
                match self.get_item(&format!("PG#{id}"), "PG").await? {
                    Some(item) => Some(
                        Stored {
                            table: self.table(),
                            item: &item,
                        }
                        .json("body")?,
                    ),
                    None => None,
                };
            if record.is_some_and(|pg| is_live_playground_of(&pg, tenant, now_ms)) {
                live.insert(id);
            }
        }
        Ok(live)
    }

    /// Writes `pg` (version 1) and the guard listing `live` and it, if the guard is still at
    /// `version`; `None` when another create moved it.
    async fn create_guarded(
        &self,
        pg: &PlaygroundRecord,
        guard: &str,
        version: Option<u64>,
        mut live: BTreeSet<String>,
    ) -> Result<Option<PlaygroundRecord>> {
        let mut next = pg.clone();
        next.version = 1;
        let key = format!("PG#{}", pg.id);
        let token = write_token();
        let record = Item::from([
            ("pk".to_owned(), s(&key)),
            ("sk".to_owned(), s("PG")),
            ("body".to_owned(), s(to_json(&next))),
            ("version".to_owned(), n(1)),
            (WRITE_TOKEN.to_owned(), s(&token)),
            ("tenant".to_owned(), s(pg.tenant.as_str())),
            ("apk".to_owned(), s(PLAYGROUNDS_PK)),
            ("ask".to_owned(), s(&pg.id)),
        ]);
        let put_record = Put::builder()
            .table_name(self.table())
            .set_item(Some(record))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| self.backend("TransactWriteItems", &key, e))?;
        live.insert(pg.id.clone());
        let slots = Slots {
            ids: live.into_iter().collect(),
        };
        let guard_item = Item::from([
            ("pk".to_owned(), s(guard)),
            ("sk".to_owned(), s(SLOTS_SK)),
            ("body".to_owned(), s(to_json(&slots))),
            ("version".to_owned(), n(version.unwrap_or(0) + 1)),
        ]);
        let put_guard = Put::builder()
            .table_name(self.table())
            .set_item(Some(guard_item));
        let put_guard = match version {
            None => put_guard.condition_expression("attribute_not_exists(pk)"),
            Some(v) => put_guard
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":v", n(v)),
        }
        .build()
        .map_err(|e| self.backend("TransactWriteItems", guard, e))?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put_record).build())
            .transact_items(TransactWriteItem::builder().put(put_guard).build())
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(Some(next)),
            Err(err) => err,
        };
        let codes: Vec<String> = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(c)) => c
                .cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect(),
            _ => return Err(self.backend("TransactWriteItems", &key, err)),
        };
        let code = |i: usize| codes.get(i).map(String::as_str).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            // Our own earlier attempt (its answer lost, the SDK retried), or the id is taken.
            if self.already_written(&key, "PG", &token).await {
                return Ok(Some(next));
            }
            return Err(StoreError::AlreadyExists {
                table: self.table().to_owned(),
                key,
            });
        }
        // The guard moved, or a concurrent transaction held one of the items: count again.
        if code(0) != "None" || code(1) != "None" {
            return Ok(None);
        }
        Err(self.backend("TransactWriteItems", &key, err))
    }
}
