//! Connection to the local AWS endpoint for the DynamoDB and S3 contract tests.
//!
//! These tests never reach real AWS: they require `AWS_ENDPOINT_URL` to point at a loopback
//! address (moto_server started by `scripts/with-moto.sh`) and fail loudly when it is missing,
//! rather than passing without having run. Credentials and region are set explicitly, so the SDK
//! never probes the instance metadata service.

use std::sync::atomic::{AtomicU32, Ordering};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

/// The local endpoint from `AWS_ENDPOINT_URL`; panics with instructions when unset or not local.
pub fn local_endpoint() -> String {
    let url = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| {
        panic!(
            "AWS_ENDPOINT_URL is not set: the DynamoDB and S3 contract tests need the local endpoint. \
             Run them with `scripts/with-moto.sh cargo test -p tuneplane-stores` (or `make test`), \
             which starts moto_server on 127.0.0.1 and sets it."
        )
    });
    let host = url.split("://").nth(1).unwrap_or_default();
    assert!(
        host.starts_with("127.0.0.1:")
            || host.starts_with("localhost:")
            || host.starts_with("[::1]:"),
        "refusing AWS_ENDPOINT_URL={url}: the contract tests only talk to a local endpoint on 127.0.0.1"
    );
    url
}

/// SDK configuration for the local endpoint with dummy credentials.
pub async fn sdk_config() -> SdkConfig {
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_owned());
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(local_endpoint())
        .region(Region::new(region))
        .credentials_provider(Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "tuneplane-tests",
        ))
        .load()
        .await
}

/// A table or bucket name no other test (or test run against the same endpoint) uses.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
