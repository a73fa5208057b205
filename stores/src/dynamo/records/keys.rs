//! The DynamoDB store's aPI keys, stored by the SHA-256 of their secret.

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl KeyRecords for DynamoJobStore {
    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let extra = vec![("tenant", s(key.tenant.as_str()))];
        self.put_doc(&format!("KEY#{}", key.key_sha256), "KEY", key, None, extra)
            .await
    }

    async fn get_api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        self.get_doc(&format!("KEY#{key_sha256}"), "KEY").await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table()), err)]
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.list_api_keys_inner().await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table(), change = ?change), err)]
    async fn update_api_key(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>> {
        self.update_api_key_inner(key_sha256, change).await
    }
}
