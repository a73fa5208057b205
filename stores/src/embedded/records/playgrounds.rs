//! The embedded store's playgrounds: live ones and retired ones (for usage).

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl PlaygroundRecords for EmbeddedJobStore {
    async fn put_playground(&self, playground: &PlaygroundRecord) -> Result<PlaygroundRecord> {
        let key = format!("PG#{}", playground.id);
        self.put_versioned(key, playground.clone(), |r| &mut r.version)
            .await
    }

    async fn create_playground(
        &self,
        playground: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<PlaygroundCreate> {
        let mut pg = playground.clone();
        // One write transaction (redb runs one at a time): the count and the write cannot be
        // separated by another create.
        self.write(move |tx| {
            let key = format!("PG#{}", pg.id);
            if tx.get_meta::<PlaygroundRecord>(&key)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    table: tx.label().to_owned(),
                    key,
                });
            }
            let live = tx
                .list_meta::<PlaygroundRecord>("PG#")?
                .iter()
                .filter(|p| is_live_playground_of(p, &pg.tenant, now_ms))
                .count();
            if live >= limit as usize {
                return Ok(PlaygroundCreate::AtLimit { live });
            }
            pg.version = 1;
            tx.put_meta(&key, &pg)?;
            Ok(PlaygroundCreate::Created(Box::new(pg)))
        })
        .await
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>> {
        self.get_meta(format!("PG#{id}")).await
    }

    async fn list_playgrounds(&self) -> Result<Vec<PlaygroundRecord>> {
        self.list_meta("PG#").await
    }

    async fn delete_playground(&self, id: &str) -> Result<()> {
        self.delete_meta(format!("PG#{id}")).await
    }

    async fn retire_playground(&self, pg: &PlaygroundRecord) -> Result<()> {
        let pg = pg.clone();
        // One write transaction: the live record goes and the retired one comes together.
        self.write(move |tx| {
            tx.delete_meta(&format!("PG#{}", pg.id))?;
            tx.put_meta(&tables::retired_playground_key(&pg.tenant, &pg.id), &pg)
        })
        .await
    }

    async fn list_retired_playgrounds(&self, tenant: &TenantId) -> Result<Vec<PlaygroundRecord>> {
        let prefix = tables::retired_playground_key(tenant, "");
        self.read(move |tx| tx.list_meta(&prefix)).await
    }
}
