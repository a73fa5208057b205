//! The DynamoDB store's the callback outbox: entries written with their job writes, then delivered and deleted.

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl OutboxRecords for DynamoJobStore {
    async fn list_outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>> {
        self.list_outbox_inner(limit).await
    }

    async fn update_outbox(&self, entry: &OutboxEntry) -> Result<OutboxEntry> {
        self.update_outbox_inner(entry).await
    }

    async fn delete_outbox(&self, entry: &OutboxEntry) -> Result<()> {
        self.delete_outbox_inner(entry).await
    }

    async fn discard_outbox(&self, entries: &[OutboxEntry]) -> Result<()> {
        self.discard_outbox_inner(entries).await
    }
}
