//! The executing dev stack the end-to-end tests share: API, stores, kubesim running pods on this
//! machine with `examples/fleet.yaml`, and the reconciler, started in a test's own folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tuneplane::client::{Api, ClientArgs, Output};
use tuneplane::dev::{Backend, Stack, StackOptions, UNPULLABLE_IMAGE};
use tuneplane_core::fleet::Fleet;

/// The repository's `examples/` folder.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Starts the stack with its data under `data_dir` on `backend` and returns it with an API
/// client, once the reconciler has published its first capacity snapshot (within 10 s).
pub async fn start(backend: Backend, data_dir: &Path) -> (Stack, Api) {
    let fleet =
        Fleet::from_yaml(&std::fs::read_to_string(examples().join("fleet.yaml")).unwrap()).unwrap();
    let stack = Stack::start(StackOptions {
        data_dir: data_dir.to_path_buf(),
        port: 0,
        fleet,
        execute: true,
        unpullable_images: vec![UNPULLABLE_IMAGE.into()],
        pass_interval: Duration::from_millis(200),
        backend,
        cluster: tuneplane::dev::ClusterChoice::Simulated,
        webhooks: None,
    })
    .await
    .unwrap();
    let api = Api::new(&ClientArgs {
        api: stack.api_url.clone(),
        key: Some(stack.api_key.clone()),
        output: Output::Json,
    })
    .unwrap();
    for _ in 0..100 {
        let cap: Value = api.get("/capacity").await.unwrap();
        if !cap["snapshot"].is_null() {
            return (stack, api);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no capacity snapshot");
}
