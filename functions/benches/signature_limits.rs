//! Cost of hostile webhook signature headers, measured through the real router in-process (the
//! server time of one request): 10,000 `v1=` values on a 1 MiB body must be refused before any
//! HMAC work, and the worst header the limits still let through (4 values) costs one HMAC over
//! the body. Prints medians and maxima; asserts nothing (a measurement, not a test).
//!
//! Run with `cargo bench -p tuneplane-functions --bench signature_limits`.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tower::ServiceExt;
use tuneplane_functions::config::{Backend, Config, SignatureScheme, WebhookSource};
use tuneplane_functions::{router, runtime};

const SECRET: &str = "whsec-bench-0123456789";
const ROUNDS: usize = 50;

fn sign(t: i64, body: &[u8]) -> String {
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()) else {
        unreachable!("HMAC takes keys of any length")
    };
    m.update(format!("{t}.").as_bytes());
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}

fn stats(mut v: Vec<u128>) -> (f64, f64) {
    v.sort_unstable();
    let ms = |ns: u128| ns as f64 / 1e6;
    (ms(v[v.len() / 2]), ms(v[v.len() - 1]))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("no temporary directory");
        return;
    };
    let Ok(tenant) = tuneplane_core::ids::TenantId::parse("acme") else {
        eprintln!("\"acme\" is not a tenant name");
        return;
    };
    let mut webhooks = BTreeMap::new();
    webhooks.insert(
        "ci".to_owned(),
        WebhookSource {
            secret: SECRET.into(),
            tenant,
            template: None,
            scheme: SignatureScheme::TunePlane,
        },
    );
    let config = Config {
        backend: Backend::Local {
            dir: dir.path().to_path_buf(),
            blob_secret: "bench-blob-secret".into(),
            blob_url: "http://127.0.0.1:9/blobs".into(),
        },
        submit: Default::default(),
        webhooks,
        event_senders: Default::default(),
        json_logs: false,
        listen: None,
        playground_pod_networks: Vec::new(),
        rate_per_key: None,
        rate_per_source: None,
        grant_key: None,
        console_secret: None,
    };
    let Ok((jobs, blobs)) = runtime::stores(&config).await else {
        eprintln!("cannot open the stores");
        return;
    };
    let app = router(runtime::state_with(&config, jobs, blobs));
    let body = vec![b'x'; 1 << 20];
    let t = runtime::now_ms() / 1000;
    let wrong = sign(t, b"another body");
    let cases: [(&str, String); 3] = [
        (
            "10,000 v1= values",
            format!("t={t}{}", format!(",v1={wrong}").repeat(10_000)),
        ),
        (
            "5 v1= values",
            format!("t={t}{}", format!(",v1={wrong}").repeat(5)),
        ),
        (
            "4 v1= values (limit)",
            format!("t={t}{}", format!(",v1={wrong}").repeat(4)),
        ),
    ];
    println!("webhook signature refusal through the router, 1 MiB body, {ROUNDS} requests each");
    for (name, header) in &cases {
        let mut samples = Vec::with_capacity(ROUNDS);
        let mut statuses = Vec::new();
        for _ in 0..ROUNDS {
            let Ok(req) = Request::post("/v1/webhooks/ci")
                .header("x-tuneplane-signature", header.as_str())
                .header("content-type", "application/json")
                .body(Body::from(body.clone()))
            else {
                return;
            };
            let start = Instant::now();
            let status = match app.clone().oneshot(req).await {
                Ok(r) => r.status(),
                Err(never) => match never {},
            };
            samples.push(start.elapsed().as_nanos());
            statuses.push(status);
        }
        let all_401 = statuses.iter().all(|s| *s == StatusCode::UNAUTHORIZED);
        let (median, max) = stats(samples);
        println!("  {name:<22} median {median:>7.3} ms  max {max:>7.3} ms  (all 401: {all_401})");
    }
}
