//! Shared harness of the functions tests: the router over either store implementation, API keys
//! for two tenants, request helpers, archive builders and signed webhook deliveries.
//!
//! The AWS flavour needs `AWS_ENDPOINT_URL` on the loopback address (moto_server, started by
//! `scripts/with-moto.sh`) and fails loudly without it rather than skipping.
#![allow(dead_code)]

pub mod archives;
pub mod audit;
pub mod callbacks;
pub mod grants;
pub mod live;
pub mod security;
pub mod suite;
pub mod triggers;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;
use tuneplane_core::store::{BlobStore, JobStore};
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, new_api_key};
use tuneplane_functions::config::{Backend, Config, SignatureScheme, WebhookSource};
use tuneplane_functions::{AppState, router, runtime};

/// Tenant of the first key.
pub const TENANT_A: &str = "acme";
/// Tenant of the second key.
pub const TENANT_B: &str = "globex";
/// The namespace the operator gave tenant B.
pub const TENANT_B_NAMESPACE: &str = "ml-globex";
/// Secret of the `git` (Hub scheme) and `ci` (TunePlane scheme) webhook sources.
pub const WEBHOOK_SECRET: &str = "s3cr3t-webhook-key-0123456789";

/// A router over fresh stores, with keys for two tenants.
pub struct Harness {
    /// The router.
    pub app: Router,
    /// Its state (stores, service).
    pub state: Arc<AppState>,
    /// API key of tenant A (read + write).
    pub key_a: String,
    /// API key of tenant B (read + write).
    pub key_b: String,
    /// Where the stores are (table and bucket names for the AWS ones).
    pub backend: Backend,
    backing: Backing,
    _dir: tempfile::TempDir,
}

/// Where blobs physically are, to count capsules independently of the store under test.
enum Backing {
    Fs(std::path::PathBuf),
    S3(aws_sdk_s3::Client, String),
}

/// A response: status, JSON body (Null when not JSON) and headers.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Parsed body.
    pub json: Value,
    /// Headers.
    pub headers: HeaderMap,
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn config(dir: &std::path::Path) -> Config {
    let mut webhooks = BTreeMap::new();
    for (name, template, scheme) in [
        ("git", Some("nightly"), SignatureScheme::Hub),
        ("ci", None, SignatureScheme::TunePlane),
    ] {
        webhooks.insert(
            name.to_owned(),
            WebhookSource {
                secret: WEBHOOK_SECRET.into(),
                tenant: tuneplane_core::ids::TenantId::parse(TENANT_A).expect("tenant"),
                template: template.map(|t| tuneplane_core::ids::Id::parse(t).expect("template")),
                scheme,
            },
        );
    }
    let mut submit = tuneplane_core::submit::SubmitConfig {
        scratch_dir: dir.join("scratch"),
        ..Default::default()
    };
    // Tenant B has a namespace of its own; A uses the shared default.
    submit
        .defaults
        .tenant_namespaces
        .insert(TENANT_B.into(), TENANT_B_NAMESPACE.into());
    std::fs::create_dir_all(&submit.scratch_dir).expect("scratch");
    Config {
        backend: Backend::Local {
            dir: dir.to_path_buf(),
            blob_secret: "test-secret".into(),
            blob_url: "http://127.0.0.1:9/blobs".into(),
        },
        submit,
        webhooks,
        event_senders: [(SENDER_ACCOUNT.to_owned(), TENANT_A.parse().unwrap())].into(),
        json_logs: false,
        listen: None,
        // Fake playground servers listen on loopback addresses of their own.
        playground_pod_networks: tuneplane_functions::routes::playground_proxy::parse_networks(
            "127.0.0.0/8",
        )
        .expect("loopback network"),
        // The suites fire bursts on purpose; `rate_limits.rs` tests the limits.
        rate_per_key: None,
        rate_per_source: None,
        grant_key: Some(grant_key()),
        console_secret: None,
    }
}

/// The grant key of the harness's API (tests mint attempts' tokens with it).
pub fn grant_key() -> tuneplane_core::grant::GrantKey {
    tuneplane_core::grant::GrantKey::parse(&"5a".repeat(32)).expect("grant key")
}

/// The AWS account the harness lets put submission events (as tenant A).
pub const SENDER_ACCOUNT: &str = "111122223333";

impl Harness {
    /// Embedded job store + filesystem blob store in a temporary folder.
    pub async fn embedded() -> Harness {
        let dir = tempdir();
        let config = config(dir.path());
        let (jobs, blobs) = runtime::stores(&config).await.expect("local stores");
        let backing = Backing::Fs(dir.path().join("blobs").join("data"));
        Harness::with(config, jobs, blobs, dir, backing).await
    }

    /// DynamoDB + S3 on the local endpoint (moto), a fresh table and bucket.
    pub async fn aws() -> Harness {
        use tuneplane_stores::aws::{dynamodb_client, s3_client};
        let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| {
            panic!(
                "AWS_ENDPOINT_URL is not set: run these tests with scripts/with-moto.sh (make test)"
            )
        });
        let host = endpoint.split("://").nth(1).unwrap_or_default();
        assert!(
            host.starts_with("127.0.0.1:") || host.starts_with("localhost:"),
            "refusing AWS_ENDPOINT_URL={endpoint}: tests only use a loopback endpoint"
        );
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "testing",
                "testing",
                None,
                None,
                "tuneplane-tests",
            ))
            .load()
            .await;
        let table = unique("tp-fn-jobs");
        let bucket = unique("tp-fn-blobs");
        let dynamo = dynamodb_client(&sdk, None);
        tuneplane_stores::dynamo::table::create_table(&dynamo, &table)
            .await
            .expect("create table");
        let s3 = s3_client(&sdk, true);
        s3.create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("create bucket");
        let jobs: Arc<dyn JobStore> =
            Arc::new(tuneplane_stores::DynamoJobStore::new(dynamo, &table));
        let blobs: Arc<dyn BlobStore> =
            Arc::new(tuneplane_stores::S3BlobStore::new(s3.clone(), &bucket));
        let backing = Backing::S3(s3, bucket.clone());
        let dir = tempdir();
        let mut config = config(dir.path());
        config.backend = Backend::Aws { table, bucket };
        Harness::with(config, jobs, blobs, dir, backing).await
    }

    async fn with(
        config: Config,
        jobs: Arc<dyn JobStore>,
        blobs: Arc<dyn BlobStore>,
        dir: tempfile::TempDir,
        backing: Backing,
    ) -> Harness {
        let scopes = vec![SCOPE_JOBS_READ.to_owned(), SCOPE_JOBS_WRITE.to_owned()];
        let mut keys = Vec::new();
        for tenant in [TENANT_A, TENANT_B] {
            let (secret, record) = new_api_key(
                runtime::random_bytes(),
                &tenant.parse().unwrap(),
                scopes.clone(),
                "test",
                0,
            );
            jobs.put_api_key(&record).await.expect("put key");
            keys.push(secret);
        }
        let state = runtime::state_with(&config, jobs, blobs);
        Harness {
            app: router(Arc::clone(&state)),
            backend: config.backend.clone(),
            state,
            key_b: keys.pop().unwrap_or_default(),
            key_a: keys.pop().unwrap_or_default(),
            backing,
            _dir: dir,
        }
    }

    /// The job store.
    pub fn jobs(&self) -> &Arc<dyn JobStore> {
        self.state.submit.jobs()
    }

    /// The blob store.
    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        self.state.submit.blobs()
    }

    /// Sends a request through the router.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Body::from(body)).expect("request");
        let resp = match self.app.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .unwrap_or_default();
        Reply {
            status,
            json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            headers,
        }
    }

    /// `GET path` as tenant A.
    pub async fn get(&self, path: &str) -> Reply {
        self.call(
            Method::GET,
            path,
            Some(&self.key_a.clone()),
            &[],
            Vec::new(),
        )
        .await
    }

    /// `GET path` with `key`.
    pub async fn get_with(&self, key: &str, path: &str) -> Reply {
        self.call(Method::GET, path, Some(key), &[], Vec::new())
            .await
    }

    /// `POST /v1/jobs` with a JSON body as tenant A, with an optional idempotency key.
    pub async fn submit(&self, body: &Value, idempotency_key: Option<&str>) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(k) = idempotency_key {
            headers.push(("idempotency-key", k));
        }
        self.call(
            Method::POST,
            "/v1/jobs",
            Some(&self.key_a.clone()),
            &headers,
            serde_json::to_vec(body).unwrap_or_default(),
        )
        .await
    }

    /// A job of tenant A submitted through the API ([`archives::SPEC`]), then made RUNNING in the
    /// store as the reconciler would (admitted and running now).
    pub async fn running_job(&self) -> tuneplane_core::job::JobRecord {
        let reply = self
            .submit(&archives::body(archives::SPEC, &archives::code()), None)
            .await;
        let id = reply.json["job_id"].as_str().unwrap_or_default().to_owned();
        let mut job = self
            .jobs()
            .get_job(&id)
            .await
            .expect("get")
            .expect("the job");
        job.state = tuneplane_core::job::JobState::Running;
        job.admitted_at_ms = Some(tuneplane_core::clock::now_ms());
        job.running_at_ms = job.admitted_at_ms;
        self.jobs().update_job(&job).await.expect("running")
    }

    /// Objects stored under `prefix`, counted directly on the backing storage.
    pub async fn object_count(&self, prefix: &str) -> usize {
        match &self.backing {
            Backing::Fs(root) => count_files(&root.join(prefix)),
            Backing::S3(client, bucket) => client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .send()
                .await
                .map(|o| o.contents().len())
                .expect("list objects"),
        }
    }

    /// Number of jobs of `tenant`.
    pub async fn job_count(&self, tenant: &str) -> usize {
        let q = tuneplane_core::store::JobQuery {
            limit: 1000,
            ..Default::default()
        };
        self.jobs()
            .list_jobs(&tenant.parse().unwrap(), &q)
            .await
            .map(|p| p.items.len())
            .expect("list")
    }
}

fn count_files(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() { count_files(&path) } else { 1 }
        })
        .sum()
}

/// A unique table or bucket name.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        runtime::random_id("x")
            .trim_start_matches("x-")
            .get(..6)
            .unwrap_or("0")
    )
}

/// `X-TunePlane-Signature` for `body` at time `t`.
pub fn tuneplane_signature(secret: &str, t: i64, body: &[u8]) -> String {
    format!(
        "t={t},v1={}",
        hmac_hex(secret, &[format!("{t}.").as_bytes(), body])
    )
}

/// `X-Hub-Signature-256` for `body`.
pub fn hub_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(secret, &[body]))
}

fn hmac_hex(secret: &str, parts: &[&[u8]]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("hmac");
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Writes `bytes` to a file (fixtures).
pub fn write_file(path: &std::path::Path, bytes: &[u8]) {
    let mut f = std::fs::File::create(path).expect("create the fixture file");
    f.write_all(bytes).unwrap();
}
