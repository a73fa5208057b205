//! The embedded store's the audit trail: append and list only.

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl AuditRecords for EmbeddedJobStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let entry = entry.clone();
        self.write(move |tx| tx.append_audit(&entry)).await
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let prefix = match &query.tenant {
            Some(t) => tables::audit_key(t, ""),
            None => tables::AUDIT_PREFIX.to_owned(),
        };
        let entries: Vec<AuditEntry> = self.read(move |tx| tx.list_meta(&prefix)).await?;
        Ok(query.finish(entries))
    }
}
