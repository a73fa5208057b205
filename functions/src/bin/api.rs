//! The API function: the `/v1` router under the Lambda runtime, or on plain HTTP when
//! `TUNEPLANE_LISTEN` is set (local runs and the cold-start benchmark).

use anyhow::Context;
use tuneplane_functions::app::router_with_console;
use tuneplane_functions::console::ConsoleKeys;
use tuneplane_functions::{lambda, runtime};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (config, state) = runtime::startup()
        .await
        .context("starting the API function")?;
    let app = router_with_console(state, ConsoleKeys::from_config(&config));
    match &config.listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            tracing::info!(addr = %addr, "serving the API on plain HTTP");
            // The peer's address is the source the per-source rate limit counts.
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, app).await.context("serving HTTP")
        }
        None => lambda::run(app)
            .await
            .map_err(|e| anyhow::anyhow!("Lambda runtime: {e}")),
    }
}
