//! The embedded store's callback subscriptions and each tenant's signing secret.

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl SubscriptionRecords for EmbeddedJobStore {
    async fn put_subscription(&self, sub: &Subscription) -> Result<()> {
        self.put_meta(tables::subscription_key(&sub.tenant, &sub.id), sub.clone())
            .await
    }

    async fn list_subscriptions(&self, tenant: &TenantId) -> Result<Vec<Subscription>> {
        let prefix = tables::subscription_key(tenant, "");
        let mut subs: Vec<Subscription> = self.read(move |tx| tx.list_meta(&prefix)).await?;
        subs.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(subs)
    }

    async fn delete_subscription(&self, tenant: &TenantId, id: &str) -> Result<bool> {
        let key = tables::subscription_key(tenant, id);
        self.write(move |tx| {
            let existed = tx.get_meta::<Subscription>(&key)?.is_some();
            tx.delete_meta(&key)?;
            Ok(existed)
        })
        .await
    }

    async fn get_callback_secret(&self, tenant: &TenantId) -> Result<Option<CallbackSecret>> {
        self.get_meta(format!("CBSECRET#{tenant}")).await
    }

    async fn put_callback_secret(
        &self,
        secret: &CallbackSecret,
        replace: bool,
    ) -> Result<CallbackSecret> {
        let secret = secret.clone();
        let key = format!("CBSECRET#{}", secret.tenant);
        self.write(move |tx| {
            if !replace && let Some(stored) = tx.get_meta::<CallbackSecret>(&key)? {
                return Ok(stored);
            }
            tx.put_meta(&key, &secret)?;
            Ok(secret)
        })
        .await
    }
}
