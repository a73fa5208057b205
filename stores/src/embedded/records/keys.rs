//! The embedded store's aPI keys, stored by the SHA-256 of their secret.

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl KeyRecords for EmbeddedJobStore {
    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.put_meta(format!("KEY#{}", key.key_sha256), key.clone())
            .await
    }

    async fn get_api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        self.get_meta(format!("KEY#{key_sha256}")).await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.list_meta("KEY#").await
    }

    async fn update_api_key(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>> {
        let meta_key = format!("KEY#{key_sha256}");
        // One write transaction: the read and the write cannot interleave with another change.
        self.write(move |tx| {
            let Some(stored) = tx.get_meta::<ApiKeyRecord>(&meta_key)? else {
                return Ok(None);
            };
            let next = stored.with_change(change);
            tx.put_meta(&meta_key, &next)?;
            Ok(Some(next))
        })
        .await
    }
}
