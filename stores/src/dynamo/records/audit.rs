//! The DynamoDB store's the audit trail: append and list only.

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl AuditRecords for DynamoJobStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let put = self
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(audit_item(entry)))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            // The same change of a retried request is there already (or our own earlier
            // attempt, its answer lost): an entry is never replaced.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(self.backend("PutItem", &audit_pk(&entry.tenant), e)),
        }
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let items = match &query.tenant {
            // One partition per tenant.
            Some(tenant) => self.query_partition(None, "pk", &audit_pk(tenant)).await?,
            // Operators across tenants, rarely: a filtered scan, like the key listing.
            None => {
                let mut start: Option<Item> = None;
                let mut items = Vec::new();
                loop {
                    let out = self
                        .client
                        .scan()
                        .table_name(self.table())
                        .filter_expression("begins_with(pk, :p)")
                        .expression_attribute_values(":p", s(AUDIT_PK_PREFIX))
                        .consistent_read(true)
                        .set_exclusive_start_key(start)
                        .send()
                        .await
                        .map_err(|e| self.backend("Scan", AUDIT_PK_PREFIX, e))?;
                    items.extend(out.items.unwrap_or_default());
                    start = out.last_evaluated_key;
                    if start.is_none() {
                        break;
                    }
                }
                items
            }
        };
        Ok(query.finish(self.bodies(&items)?))
    }
}
