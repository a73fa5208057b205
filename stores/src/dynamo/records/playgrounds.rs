//! The DynamoDB store's playgrounds: live ones and retired ones (for usage).

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl PlaygroundRecords for DynamoJobStore {
    async fn put_playground(&self, playground: &PlaygroundRecord) -> Result<PlaygroundRecord> {
        let pk = format!("PG#{}", playground.id);
        let extra = vec![
            ("tenant", s(playground.tenant.as_str())),
            ("apk", s(PLAYGROUNDS_PK)),
            ("ask", s(&playground.id)),
        ];
        self.put_versioned((&pk, "PG"), playground, |r| &mut r.version, extra)
            .await
    }

    async fn create_playground(
        &self,
        playground: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<PlaygroundCreate> {
        self.create_playground_inner(playground, limit, now_ms)
            .await
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>> {
        self.get_doc(&format!("PG#{id}"), "PG").await
    }

    async fn list_playgrounds(&self) -> Result<Vec<PlaygroundRecord>> {
        let items = self
            .query_partition(Some(ACTIVE_INDEX), "apk", PLAYGROUNDS_PK)
            .await?;
        self.bodies(&items)
    }

    async fn delete_playground(&self, id: &str) -> Result<()> {
        self.delete_doc(&format!("PG#{id}"), "PG").await
    }

    async fn retire_playground(&self, pg: &PlaygroundRecord) -> Result<()> {
        self.retire_playground_inner(pg).await
    }

    async fn list_retired_playgrounds(&self, tenant: &TenantId) -> Result<Vec<PlaygroundRecord>> {
        let items = self
            .query_partition(None, "pk", &format!("PGDONE#{tenant}"))
            .await?;
        self.bodies(&items)
    }
}
