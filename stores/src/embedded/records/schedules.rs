//! The embedded store's schedules (cron triggers).

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl ScheduleRecords for EmbeddedJobStore {
    async fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<ScheduleRecord> {
        let key = format!("SCHEDULE#{}", schedule.id);
        self.put_versioned(key, schedule.clone(), |r| &mut r.version)
            .await
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        self.get_meta(format!("SCHEDULE#{id}")).await
    }

    async fn delete_schedule(&self, id: &str) -> Result<()> {
        self.delete_meta(format!("SCHEDULE#{id}")).await
    }
}
