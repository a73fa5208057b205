//! The embedded store's tenants' quotas and fair-share weights.

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl QuotaRecords for EmbeddedJobStore {
    async fn put_quota(&self, quota: &TenantQuota) -> Result<()> {
        self.put_meta(format!("QUOTA#{}", quota.tenant), quota.clone())
            .await
    }

    async fn get_quota(&self, tenant: &TenantId) -> Result<Option<TenantQuota>> {
        self.get_meta(format!("QUOTA#{tenant}")).await
    }

    async fn list_quotas(&self) -> Result<Vec<TenantQuota>> {
        self.list_meta("QUOTA#").await
    }

    async fn delete_quota(&self, tenant: &TenantId) -> Result<()> {
        self.delete_meta(format!("QUOTA#{tenant}")).await
    }
}
