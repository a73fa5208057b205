//! The submission path under concurrent load: `POST /v1/jobs` with 1 MiB of code (inline, a tar of
//! half incompressible and half text files, different in every request so each builds and stores a
//! new capsule) against the one-process stack on embedded stores (`tuneplane::dev::Stack`: the API,
//! the reconciler on a one-node simulated fleet, filesystem blobs), over loopback.
//!
//! Run with `cargo bench --bench submit`. Prints requests/s and p50/p99/max latency for each
//! concurrency level; bounded by a request count (`TUNEPLANE_BENCH_REQUESTS`, default 200 per
//! level) and a 300 s deadline per level. Asserts nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location
#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use tuneplane::dev::{Backend, Stack, StackOptions};
use tuneplane_core::fleet::Fleet;

const SPEC: &str = "name: bench\nimage: python:3.12\nentrypoint: python3 train.py\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n";
const CODE_BYTES: usize = 1 << 20;

/// A tar of ~1 MiB: eight 64 KiB pseudo-random files and text files, unique per `seed`.
fn code(seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut builder = tar::Builder::new(Vec::with_capacity(CODE_BYTES + 64 * 1024));
    let mut add = |name: String, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        builder.append_data(&mut h, name, data).unwrap();
    };
    for f in 0..8 {
        let data: Vec<u8> = (0..CODE_BYTES / 16 / 8)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()
            })
            .collect();
        add(format!("data/blob{f}.bin"), &data);
    }
    let line = format!("# request {seed}: some training code that compresses well\n");
    let text = line.repeat(CODE_BYTES / 2 / line.len());
    for f in 0..8 {
        add(
            format!("src/module{f}.py"),
            &text.as_bytes()[..text.len() / 8],
        );
    }
    add("train.py".into(), b"print('hello')\n");
    builder.into_inner().unwrap()
}

fn body(seed: u64) -> Vec<u8> {
    let inline = base64::engine::general_purpose::STANDARD.encode(code(seed));
    serde_json::to_vec(&serde_json::json!({"spec": SPEC, "code": {"inline": inline}})).unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn level(stack: &Stack, concurrency: usize, requests: usize, seed0: u64) {
    let client = reqwest::Client::new();
    let url = format!("{}/v1/jobs", stack.api_url);
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(300);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, url, key, next) = (
            client.clone(),
            url.clone(),
            stack.api_key.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests || Instant::now() > deadline {
                    return out;
                }
                let body = body(seed0 + i as u64);
                let start = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(&key)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status();
                let text = response.text().await.unwrap();
                let took = start.elapsed().as_secs_f64() * 1e3;
                assert!(status.is_success(), "{status}: {text}");
                out.push(took);
            }
        }));
    }
    let mut times = Vec::new();
    for t in tasks {
        times.extend(t.await.unwrap());
    }
    let wall = started.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    println!(
        "POST /v1/jobs, 1 MiB code, {concurrency:>2} concurrent: {} requests in {wall:.1} s = {:.1} req/s \
         ({:.1} MB/s of code); latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        times.len(),
        times.len() as f64 / wall,
        times.len() as f64 * CODE_BYTES as f64 / 1e6 / wall,
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.last().copied().unwrap_or(0.0)
    );
}

fn main() {
    let requests: usize = std::env::var("TUNEPLANE_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let fleet =
            Fleet::from_yaml("node_groups:\n  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}\n")
                .unwrap();
        let stack = Stack::start(StackOptions {
            data_dir: dir.path().join("stack"),
            port: 0,
            fleet,
            execute: false,
            unpullable_images: Vec::new(),
            pass_interval: Duration::from_secs(3),
            backend: Backend::Embedded,
            cluster: tuneplane::dev::ClusterChoice::Simulated,
            webhooks: None,
            capsule_delivery: tuneplane_core::render::CapsuleDelivery::Presigned,
            blob_tls: None,
            preemption_min_run: None,
        })
        .await
        .unwrap();
        level(&stack, 4, 8, 1_000_000).await; // warm-up
        for (k, concurrency) in [1, 4, 16].into_iter().enumerate() {
            level(&stack, concurrency, requests, (k as u64 + 1) * 10_000_000).await;
        }
        stack.shutdown().await;
    });
}
