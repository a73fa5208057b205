//! The embedded store's the callback outbox: entries written with their job writes, then delivered and deleted.

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl OutboxRecords for EmbeddedJobStore {
    async fn list_outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>> {
        self.read(move |tx| tx.list_meta_limit(tables::OUTBOX_PREFIX, limit))
            .await
    }

    async fn update_outbox(&self, entry: &OutboxEntry) -> Result<OutboxEntry> {
        let mut entry = entry.clone();
        let key = tables::outbox_key(&entry);
        self.write(move |tx| {
            let stored: Option<OutboxEntry> = tx.get_meta(&key)?;
            if stored.map(|s| s.rev) != Some(entry.rev) {
                return Err(StoreError::Conflict {
                    table: tx.label().to_owned(),
                    key,
                    expected: entry.rev,
                });
            }
            entry.rev += 1;
            tx.put_meta(&key, &entry)?;
            Ok(entry)
        })
        .await
    }

    async fn delete_outbox(&self, entry: &OutboxEntry) -> Result<()> {
        let (key, rev) = (tables::outbox_key(entry), entry.rev);
        self.write(move |tx| {
            let stored: Option<OutboxEntry> = tx.get_meta(&key)?;
            match stored {
                None => Ok(()),
                Some(s) if s.rev == rev => tx.delete_meta(&key),
                Some(_) => Err(StoreError::Conflict {
                    table: tx.label().to_owned(),
                    key,
                    expected: rev,
                }),
            }
        })
        .await
    }

    async fn discard_outbox(&self, entries: &[OutboxEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = entries.iter().map(tables::outbox_key).collect();
        self.write(move |tx| {
            for key in &keys {
                tx.delete_meta(key)?;
            }
            Ok(())
        })
        .await
    }
}
