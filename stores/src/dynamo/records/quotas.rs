//! The DynamoDB store's tenants' quotas and fair-share weights.

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl QuotaRecords for DynamoJobStore {
    async fn put_quota(&self, quota: &TenantQuota) -> Result<()> {
        self.put_doc(QUOTA_PK, &quota.tenant, quota, None, Vec::new())
            .await
    }

    async fn get_quota(&self, tenant: &TenantId) -> Result<Option<TenantQuota>> {
        self.get_doc(QUOTA_PK, tenant).await
    }

    async fn list_quotas(&self) -> Result<Vec<TenantQuota>> {
        // One partition: a query on the table itself, sorted by tenant.
        let items = self.query_partition(None, "pk", QUOTA_PK).await?;
        self.bodies(&items)
    }

    async fn delete_quota(&self, tenant: &TenantId) -> Result<()> {
        self.delete_doc(QUOTA_PK, tenant).await
    }
}
