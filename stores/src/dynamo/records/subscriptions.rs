//! The DynamoDB store's callback subscriptions and each tenant's signing secret.

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl SubscriptionRecords for DynamoJobStore {
    async fn put_subscription(&self, sub: &Subscription) -> Result<()> {
        let pk = crate::dynamo::outbox::subscriptions_pk(&sub.tenant);
        self.put_doc(&pk, &sub.id, sub, None, Vec::new()).await
    }

    async fn list_subscriptions(&self, tenant: &TenantId) -> Result<Vec<Subscription>> {
        self.list_subscriptions_inner(tenant).await
    }

    async fn delete_subscription(&self, tenant: &TenantId, id: &str) -> Result<bool> {
        self.delete_subscription_inner(tenant, id).await
    }

    async fn get_callback_secret(&self, tenant: &TenantId) -> Result<Option<CallbackSecret>> {
        self.get_doc(&crate::dynamo::outbox::secret_pk(tenant), "CURRENT")
            .await
    }

    async fn put_callback_secret(
        &self,
        secret: &CallbackSecret,
        replace: bool,
    ) -> Result<CallbackSecret> {
        self.put_callback_secret_inner(secret, replace).await
    }
}
