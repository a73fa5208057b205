//! API keys of [`DynamoJobStore`] beyond get and put: the operator's listing and the atomic
//! changes (revocation, ending console sessions).
//!
//! Key items (`pk` = `KEY#<sha256>`, `sk` = `KEY`) keep the record as JSON in `body`. A change is
//! a read followed by a `PutItem` conditioned on `body` still being what was read, retried when
//! another change won in between, so two concurrent changes both land.

use aws_sdk_dynamodb::types::AttributeValue;
use tuneplane_core::store::{ApiKeyChange, ApiKeyRecord, Result, StoreError};

use super::DynamoJobStore;
use super::item::{Item, Stored, s, to_json};

/// Attempts of a change before reporting the conflict.
const CHANGE_ATTEMPTS: u32 = 16;

impl DynamoJobStore {
    /// Every key item, by a filtered scan of the table: operators list keys rarely, and a scan
    /// also finds the items of older versions, which carry no index attributes.
    pub(super) async fn list_api_keys_inner(&self) -> Result<Vec<ApiKeyRecord>> {
        let mut start: Option<Item> = None;
        let mut keys = Vec::new();
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("sk = :k")
                .expression_attribute_values(":k", s("KEY"))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.backend("Scan", "KEY#", e))?;
            for item in out.items.unwrap_or_default() {
                let record: ApiKeyRecord = Stored {
                    table: &self.table,
                    item: &item,
                }
                .json("body")?;
                keys.push(record);
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        keys.sort_by(|a, b| a.key_sha256.cmp(&b.key_sha256));
        Ok(keys)
    }

    pub(super) async fn update_api_key_inner(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>> {
        let pk = format!("KEY#{key_sha256}");
        for attempt in 0..CHANGE_ATTEMPTS {
            let Some(item) = self.get_item(&pk, "KEY").await? else {
                return Ok(None);
            };
            let stored = Stored {
                table: &self.table,
                item: &item,
            };
            let old_body = stored.s("body")?.to_owned();
            let record: ApiKeyRecord = stored.json("body")?;
            let next = record.with_change(change);
            let mut new_item = item.clone();
            new_item.insert("body".to_owned(), s(to_json(&next)));
            let put = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(new_item))
                .condition_expression("body = :old")
                .expression_attribute_values(":old", AttributeValue::S(old_body))
                .send()
                .await;
            match put {
                Ok(_) => return Ok(Some(next)),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
                {
                    // Another change (or a deletion) won: read again.
                    let backoff = (10u64 << attempt.min(4)).min(160);
                    tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
                }
                Err(e) => return Err(self.backend("PutItem", &pk, e)),
            }
        }
        Err(StoreError::Conflict {
            table: self.table.clone(),
            key: pk,
            expected: 0,
        })
    }
}
