//! The scheduled function: EventBridge Scheduler firings become jobs (one per schedule and time).

use tuneplane_functions::triggers;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    triggers::run_function("scheduled", |state, event| async move {
        let outcome = triggers::handle_scheduled(&state, &event).await?;
        Ok(serde_json::json!({ "outcomes": [outcome] }))
    })
    .await
}
