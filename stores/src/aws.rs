//! AWS SDK clients for the adapters, and a request counter for cost accounting.
//!
//! Binaries build one [`aws_config::SdkConfig`] with [`load_config`] (region, credentials and
//! `AWS_ENDPOINT_URL` come from the SDK's usual environment chain) and derive the clients from it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};

/// Attempts per SDK call, the first included: a throttled or failed call is retried twice.
pub const MAX_ATTEMPTS: u32 = 3;

/// The retry policy of every client: standard mode (exponential backoff with jitter from 1 s,
/// capped at 20 s, and a retry quota that stops retrying when most calls fail), at most
/// [`MAX_ATTEMPTS`] attempts. A call that still fails returns to the caller, whose own loop retries
/// later (the reconciler's next pass, the API client's retry).
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(MAX_ATTEMPTS)
        .with_initial_backoff(std::time::Duration::from_secs(1))
        .with_max_backoff(std::time::Duration::from_secs(20))
}

/// Loads the SDK configuration from the environment (the standard AWS chain) with the explicit
/// [`retry_config`] (which takes precedence over `AWS_MAX_ATTEMPTS` and `AWS_RETRY_MODE`).
pub async fn load_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .retry_config(retry_config())
        .load()
        .await
}

/// A DynamoDB client from `config`, with optional interceptors.
pub fn dynamodb_client(
    config: &SdkConfig,
    counter: Option<RequestCounter>,
) -> aws_sdk_dynamodb::Client {
    let mut builder = aws_sdk_dynamodb::config::Builder::from(config);
    if let Some(counter) = counter {
        builder = builder.interceptor(counter);
    }
    aws_sdk_dynamodb::Client::from_conf(builder.build())
}

/// An S3 client from `config`; `force_path_style` for local endpoints (`http://127.0.0.1:PORT/bucket/key`).
pub fn s3_client(config: &SdkConfig, force_path_style: bool) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::from(config)
        .force_path_style(force_path_style)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// Counts DynamoDB requests by operation (each attempt that reaches the wire, retries included).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl RequestCounter {
    /// A counter at zero.
    pub fn new() -> RequestCounter {
        RequestCounter::default()
    }

    /// Requests so far, by operation name (`PutItem`, `Query`, ...).
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Total requests so far.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        if let Ok(mut c) = self.counts.lock() {
            c.clear();
        }
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "TunePlaneRequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        // DynamoDB names the operation in `X-Amz-Target: DynamoDB_20120810.<Operation>`.
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("unknown");
        let op = target.rsplit('.').next().unwrap_or(target).to_owned();
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry(op).or_default() += 1;
        }
        Ok(())
    }
}
