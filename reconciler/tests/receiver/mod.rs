//! A callback receiver on 127.0.0.1 for the callback tests: it keeps every request it gets
//! (headers, body, when), answers by a policy (fail the first N, fail at random, delay), and
//! checks what arrived: signatures, duplicates, order.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tuneplane_core::callback::sign;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Got {
    /// The request's path.
    pub path: String,
    /// The event id header.
    pub id: String,
    /// The signature header.
    pub signature: String,
    /// The raw body.
    pub body: Vec<u8>,
    /// When it arrived, Unix ms.
    pub at_ms: i64,
    /// What the receiver answered.
    pub status: u16,
}

impl Got {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a delivery body is JSON")
    }
}

/// How the receiver answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    /// Answer 500 to the first this many requests.
    pub fail_first: usize,
    /// Then answer 500 to one request in this many (0: never), by a seeded sequence.
    pub fail_one_in: u64,
    /// Wait up to this long before answering (seeded).
    pub max_delay: Duration,
}

#[derive(Default)]
struct Inner {
    got: Vec<Got>,
    rng: u64,
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    /// Its address.
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    policy: Policy,
}

async fn handle(
    State(r): State<Receiver>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let (fail, delay) = {
        let mut inner = r.inner.lock().unwrap();
        inner.rng = inner
            .rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let roll = inner.rng >> 33;
        let n = inner.got.len();
        let fail = n < r.policy.fail_first
            || (r.policy.fail_one_in > 0 && roll % r.policy.fail_one_in == 0);
        let max = r.policy.max_delay.as_millis() as u64;
        let delay = if max > 0 { roll % max } else { 0 };
        (fail, delay)
    };
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let status = if fail { 500 } else { 200 };
    r.inner.lock().unwrap().got.push(Got {
        path: uri.path().to_owned(),
        id: header("x-tuneplane-event-id"),
        signature: header("x-tuneplane-signature"),
        body: body.to_vec(),
        at_ms: tuneplane_core::clock::now_ms(),
        status,
    });
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start(policy: Policy, seed: u64) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let r = Receiver {
            addr,
            inner: Arc::new(Mutex::new(Inner {
                got: Vec::new(),
                rng: seed,
            })),
            policy,
        };
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(handle))
            .with_state(r.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        r
    }

    /// The URL of path `path` on it.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    /// Everything it got so far.
    pub fn got(&self) -> Vec<Got> {
        self.inner.lock().unwrap().got.clone()
    }

    /// The accepted (200) deliveries, each event id once per path (its first accepted copy), in
    /// arrival order, after checking every request's signature against `secret`.
    pub fn accepted_once(&self, secret: &str) -> Vec<Got> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for g in self.got() {
            assert_valid_signature(&g, secret);
            if g.status == 200 && seen.insert((g.path.clone(), g.id.clone())) {
                out.push(g);
            }
        }
        out
    }
}

/// Asserts `g`'s signature header is `t=<unix>,v1=<hmac of t.body>` under `secret`, with a `t`
/// near its arrival.
pub fn assert_valid_signature(g: &Got, secret: &str) {
    let (t, v1) = g
        .signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .unwrap_or_else(|| panic!("malformed signature header {:?}", g.signature));
    let t: i64 = t.parse().expect("t is a number");
    assert!(
        (g.at_ms / 1000 - t).abs() <= 300,
        "signature time {t} is far from the arrival {}",
        g.at_ms
    );
    assert_eq!(v1, sign(secret, t, &g.body), "bad signature on {}", g.id);
}

/// The accepted deliveries per job id, in arrival order.
pub fn by_job(got: &[Got]) -> BTreeMap<String, Vec<Got>> {
    let mut out: BTreeMap<String, Vec<Got>> = BTreeMap::new();
    for g in got {
        let job = g.json()["job"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        out.entry(job).or_default().push(g.clone());
    }
    out
}
