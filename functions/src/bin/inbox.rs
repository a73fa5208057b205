//! The inbox function: archives dropped under `inbox/<tenant>/` and "TunePlane Job Submission"
//! events become jobs; refused archives get `<key>.error.json` beside them.

use anyhow::Context;
use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};
use serde_json::Value;
use tuneplane_functions::{runtime, triggers};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (_config, state) = runtime::startup()
        .await
        .context("starting the inbox function")?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let state = state.clone();
        async move {
            let outcomes = triggers::handle_inbox(&state, &event.payload)
                .await
                .map_err(triggers::retryable)?;
            Ok::<_, lambda_runtime::Diagnostic>(serde_json::json!({ "outcomes": outcomes }))
        }
    }))
    .await
    .map_err(|e| anyhow::anyhow!("Lambda runtime: {e}"))
}
