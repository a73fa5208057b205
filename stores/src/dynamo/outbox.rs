//! Retired playgrounds (`PGDONE#<tenant>` / `<id>`, kept for usage) and callbacks in the table: outbox entries (`OUTBOX` / `<job id>#<order>`, written only inside
//! their job's transaction), subscriptions (`SUB#<tenant>` / `<id>`) and each tenant's signing
//! secret (`CBSECRET#<tenant>` / `CURRENT`). An entry's `version` attribute is its `rev`, so the
//! sender's updates are conditional like every other write.

use aws_sdk_dynamodb::types::{DeleteRequest, Put, TransactWriteItem, WriteRequest};
use tuneplane_core::callback::{CallbackSecret, OutboxEntry, Subscription};
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::store::{Result, StoreError};

use super::DynamoJobStore;
use super::item::{Item, Stored, n, s, to_json};

/// The outbox's partition.
pub(super) const OUTBOX_PK: &str = "OUTBOX";

/// The subscriptions partition of `tenant`.
pub(super) fn subscriptions_pk(tenant: &str) -> String {
    format!("SUB#{tenant}")
}

/// The secret's partition of `tenant`.
pub(super) fn secret_pk(tenant: &str) -> String {
    format!("CBSECRET#{tenant}")
}

/// The item of `entry` at revision `rev`.
fn entry_item(entry: &OutboxEntry, rev: u64) -> Item {
    let mut entry = entry.clone();
    entry.rev = rev;
    Item::from([
        ("pk".to_owned(), s(OUTBOX_PK)),
        ("sk".to_owned(), s(entry.key())),
        ("version".to_owned(), n(rev)),
        ("body".to_owned(), s(to_json(&entry))),
    ])
}

impl DynamoJobStore {
    /// The puts of the outbox entries a job write of `events` makes (the record as stored), for
    /// its transaction.
    pub(super) fn outbox_puts(
        &self,
        job: &JobRecord,
        events: &[&JobEvent],
    ) -> Result<Vec<TransactWriteItem>> {
        let events: Vec<JobEvent> = events.iter().map(|e| (*e).clone()).collect();
        tuneplane_core::callback::outbox::entries_for(
            job,
            &events,
            job.version,
            tuneplane_core::clock::now_ms(),
        )
        .iter()
        .map(|entry| {
            Put::builder()
                .table_name(self.table())
                .set_item(Some(entry_item(entry, 1)))
                .build()
                .map(|put| TransactWriteItem::builder().put(put).build())
                .map_err(|e| self.backend("TransactWriteItems", OUTBOX_PK, e))
        })
        .collect()
    }

    pub(super) async fn list_outbox_inner(&self, limit: usize) -> Result<Vec<OutboxEntry>> {
        let mut out = Vec::new();
        let mut from = None;
        while out.len() < limit {
            let page = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression("pk = :v")
                .expression_attribute_values(":v", s(OUTBOX_PK))
                .consistent_read(true)
                .limit(i32::try_from(limit - out.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(from)
                .send()
                .await
                .map_err(|e| self.backend("Query", OUTBOX_PK, e))?;
            for item in page.items() {
                out.push(
                    Stored {
                        table: self.table(),
                        item,
                    }
                    .json("body")?,
                );
            }
            from = page.last_evaluated_key;
            if from.is_none() {
                break;
            }
        }
        Ok(out)
    }

    fn outbox_conflict(&self, entry: &OutboxEntry) -> StoreError {
        StoreError::Conflict {
            table: self.table().to_owned(),
            key: format!("{OUTBOX_PK}/{}", entry.key()),
            expected: entry.rev,
        }
    }

    pub(super) async fn update_outbox_inner(&self, entry: &OutboxEntry) -> Result<OutboxEntry> {
        let rev = entry.rev + 1;
        let result = self
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(entry_item(entry, rev)))
            .condition_expression("#v = :v")
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":v", n(entry.rev))
            .send()
            .await;
        match result {
            Ok(_) => {
                let mut next = entry.clone();
                next.rev = rev;
                Ok(next)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Err(self.outbox_conflict(entry))
            }
            Err(e) => Err(self.backend("PutItem", OUTBOX_PK, e)),
        }
    }

    pub(super) async fn delete_outbox_inner(&self, entry: &OutboxEntry) -> Result<()> {
        let result = self
            .client
            .delete_item()
            .table_name(self.table())
            .key("pk", s(OUTBOX_PK))
            .key("sk", s(entry.key()))
            .condition_expression("attribute_not_exists(pk) OR #v = :v")
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":v", n(entry.rev))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Err(self.outbox_conflict(entry))
            }
            Err(e) => Err(self.backend("DeleteItem", OUTBOX_PK, e)),
        }
    }

    pub(super) async fn discard_outbox_inner(&self, entries: &[OutboxEntry]) -> Result<()> {
        for chunk in entries.chunks(25) {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|entry| {
                    DeleteRequest::builder()
                        .key("pk", s(OUTBOX_PK))
                        .key("sk", s(entry.key()))
                        .build()
                        .map(|d| WriteRequest::builder().delete_request(d).build())
                        .map_err(|e| self.backend("BatchWriteItem", OUTBOX_PK, e))
                })
                .collect::<Result<_>>()?;
            for attempt in 0..8u32 {
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(self.table(), requests)
                    .send()
                    .await
                    .map_err(|e| self.backend("BatchWriteItem", OUTBOX_PK, e))?;
                requests = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(self.table()))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(25 << attempt)).await;
            }
            if !requests.is_empty() {
                let e = std::io::Error::other(format!(
                    "{} outbox deletes stayed unprocessed after retries",
                    requests.len()
                ));
                return Err(self.backend("BatchWriteItem", OUTBOX_PK, e));
            }
        }
        Ok(())
    }

    pub(super) async fn retire_playground_inner(
        &self,
        pg: &tuneplane_core::store::PlaygroundRecord,
    ) -> Result<()> {
        let pk = format!("PGDONE#{}", pg.tenant);
        let put = Put::builder()
            .table_name(self.table())
            .set_item(Some(Item::from([
                ("pk".to_owned(), s(&pk)),
                ("sk".to_owned(), s(&pg.id)),
                ("body".to_owned(), s(to_json(pg))),
            ])))
            .build()
            .map_err(|e| self.backend("TransactWriteItems", &pk, e))?;
        let delete = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(self.table())
            .key("pk", s(format!("PG#{}", pg.id)))
            .key("sk", s("PG"))
            .build()
            .map_err(|e| self.backend("TransactWriteItems", &pk, e))?;
        self.client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put).build())
            .transact_items(TransactWriteItem::builder().delete(delete).build())
            .send()
            .await
            .map_err(|e| self.backend("TransactWriteItems", &pk, e))?;
        Ok(())
    }

    pub(super) async fn list_subscriptions_inner(&self, tenant: &str) -> Result<Vec<Subscription>> {
        let items = self
            .query_partition(None, "pk", &subscriptions_pk(tenant))
            .await?;
        let mut subs: Vec<Subscription> = items
            .iter()
            .map(|item| {
                Stored {
                    table: self.table(),
                    item,
                }
                .json("body")
            })
            .collect::<Result<_>>()?;
        subs.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(subs)
    }

    pub(super) async fn delete_subscription_inner(&self, tenant: &str, id: &str) -> Result<bool> {
        let pk = subscriptions_pk(tenant);
        let out = self
            .client
            .delete_item()
            .table_name(self.table())
            .key("pk", s(&pk))
            .key("sk", s(id))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| self.backend("DeleteItem", &pk, e))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    pub(super) async fn put_callback_secret_inner(
        &self,
        secret: &CallbackSecret,
        replace: bool,
    ) -> Result<CallbackSecret> {
        let pk = secret_pk(&secret.tenant);
        let item = Item::from([
            ("pk".to_owned(), s(&pk)),
            ("sk".to_owned(), s("CURRENT")),
            ("body".to_owned(), s(to_json(secret))),
        ]);
        let mut put = self
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(item));
        if !replace {
            put = put.condition_expression("attribute_not_exists(pk)");
        }
        match put.send().await {
            Ok(_) => Ok(secret.clone()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                let stored = self.get_item(&pk, "CURRENT").await?;
                match stored {
                    Some(item) => Stored {
                        table: self.table(),
                        item: &item,
                    }
                    .json("body"),
                    None => Err(StoreError::Conflict {
                        table: self.table().to_owned(),
                        key: pk,
                        expected: 0,
                    }),
                }
            }
            Err(e) => Err(self.backend("PutItem", &pk, e)),
        }
    }
}
