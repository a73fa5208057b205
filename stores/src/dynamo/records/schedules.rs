//! The DynamoDB store's schedules (cron triggers).

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl ScheduleRecords for DynamoJobStore {
    async fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<ScheduleRecord> {
        let pk = format!("SCHEDULE#{}", schedule.id);
        let extra = vec![("tenant", s(schedule.tenant.as_str()))];
        self.put_versioned((&pk, "SCHEDULE"), schedule, |r| &mut r.version, extra)
            .await
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        self.get_doc(&format!("SCHEDULE#{id}"), "SCHEDULE").await
    }

    async fn delete_schedule(&self, id: &str) -> Result<()> {
        self.delete_doc(&format!("SCHEDULE#{id}"), "SCHEDULE").await
    }
}
