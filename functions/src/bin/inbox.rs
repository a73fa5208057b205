//! The inbox function: archives dropped under `inbox/<tenant>/` and "TunePlane Job Submission"
//! events become jobs; refused archives get `<key>.error.json` beside them.

use tuneplane_functions::triggers;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    triggers::run_function("inbox", |state, event| async move {
        let outcomes = triggers::handle_inbox(&state, &event).await?;
        Ok(serde_json::json!({ "outcomes": outcomes }))
    })
    .await
}
