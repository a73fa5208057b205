//! Scale figures for kubesim: 1,000 nodes and 10,000 pods, through a kube-rs client over HTTP.
//!
//! Prints create throughput, time to schedule everything, list latency (full, paginated, with
//! selectors), watch event latency, reflector sync time, controller pass time and the process RSS.
//! Run with `cargo bench -p tuneplane-kubesim --bench scale` (release profile). Figures, not
//! assertions: nothing here fails on timing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure with its location

use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use tuneplane_core::fleet::Fleet;
use tuneplane_kubesim::{KubeSim, SimConfig};

const NODES_PER_GROUP: u32 = 100;
const GROUPS: u32 = 10;
const PODS: usize = 10_000;

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn fleet() -> Fleet {
    let mut yaml = String::from("node_groups:\n");
    for g in 0..GROUPS {
        let series = if g.is_multiple_of(2) { "h200" } else { "l40s" };
        yaml.push_str(&format!("  - {{name: g{g}, series: {series}, count: {NODES_PER_GROUP}, gpus: 8, cpus: 96, memory_gb: 1024}}\n"));
    }
    Fleet::from_yaml(&yaml).expect("fleet")
}

fn pod(i: usize) -> Pod {
    let series = if i.is_multiple_of(2) { "h200" } else { "l40s" };
    serde_json::from_value(json!({
        "metadata": {"name": format!("p{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string(), "tuneplane.io/job-id": format!("job-{}", i / 8)}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"tuneplane/gpu-series": series},
            "containers": [{"name": "main", "image": "ghcr.io/acme/train:1", "command": ["python", "train.py"],
                "env": [{"name": "TUNEPLANE_JOB_ID", "value": format!("job-{}", i / 8)}],
                "resources": {"limits": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "0"}}}],
        },
    }))
    .expect("pod")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn time_list(api: &Api<Pod>, lp: &ListParams, runs: usize) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut n = 0;
    for _ in 0..runs {
        let t = Instant::now();
        n = api.list(lp).await.map(|l| l.items.len()).unwrap_or(0);
        times.push(t.elapsed());
    }
    (median(times), n)
}

#[tokio::main]
async fn main() {
    let rss_start = rss_kib("VmRSS:");
    let config = SimConfig {
        watch_history: std::env::var("KUBESIM_BENCH_HISTORY")
            .ok()
            .and_then(|h| h.parse().ok())
            .unwrap_or(20_000),
        fleet: Some(fleet()),
        kuberay: false,
        ..SimConfig::default()
    };
    let sim = KubeSim::start(config).await.expect("start");
    let client = kube::Client::try_from(kube::Config::new(sim.url().parse().expect("kubesim URL")))
        .expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    println!(
        "kubesim scale bench: {} nodes, {PODS} pods",
        GROUPS * NODES_PER_GROUP
    );

    let t = Instant::now();
    futures_util::stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &pod(i))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("create");
    let created = t.elapsed();
    println!(
        "create {PODS} pods (16 in flight): {:.2?} ({:.0} pods/s)",
        created,
        PODS as f64 / created.as_secs_f64()
    );

    let t = Instant::now();
    let store = sim.store().clone();
    for _ in 0..600 {
        let running = store
            .all(&tuneplane_kubesim::resources::PODS)
            .iter()
            .filter(|p| tuneplane_kubesim::json::str_at(p, "/status/phase") == Some("Running"))
            .count();
        if running == PODS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("all pods scheduled and Running after: {:.2?}", t.elapsed());
    println!(
        "process RSS with 1k nodes + 10k running pods (+ their ~40k events) stored: {} MiB",
        rss_kib("VmRSS:") / 1024
    );

    let (d, n) = time_list(&pods, &ListParams::default(), 5).await;
    println!("list all pods (one page, {n} items): median {d:.2?}");
    let t = Instant::now();
    let mut total = 0;
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = pods.list(&lp).await.expect("list");
        total += page.items.len();
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    println!(
        "list all pods in pages of 500 ({total} items): {:.2?}",
        t.elapsed()
    );
    let (d, n) = time_list(&pods, &ListParams::default().labels("shard=3"), 5).await;
    println!("list pods with label selector shard=3 ({n} items): median {d:.2?}");
    let (d, n) = time_list(
        &pods,
        &ListParams::default().fields("spec.nodeName=g0-7"),
        5,
    )
    .await;
    println!("list pods with field selector spec.nodeName=g0-7 ({n} items): median {d:.2?}");
    let t = Instant::now();
    let n = nodes
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    println!("list all nodes ({n} items): {:.2?}", t.elapsed());

    // Watch latency: time from a patch being acknowledged... to its event arriving on an open watch.
    let rv = pods
        .list(&ListParams::default().limit(1))
        .await
        .ok()
        .and_then(|l| l.metadata.resource_version)
        .unwrap_or_default();
    let mut stream = pods
        .watch(&WatchParams::default().labels("shard=5").timeout(120), &rv)
        .await
        .expect("watch")
        .boxed();
    let mut latencies = Vec::new();
    for i in 0..100 {
        let name = format!("p{:05}", 5 + 10 * i);
        let t = Instant::now();
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"bench": i.to_string()}}})),
        )
        .await
        .expect("patch");
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
                Ok(Some(Ok(WatchEvent::Modified(p))))
                    if p.metadata.name.as_deref() == Some(name.as_str()) =>
                {
                    break;
                }
                Ok(Some(Ok(_))) => {}
                other => panic!("watch broke: {other:?}"),
            }
        }
        latencies.push(t.elapsed());
    }
    println!(
        "watch: patch -> event received (100 patches, one watch among 10k pods): p50 {:.2?}, p99 {:.2?}",
        pct(latencies.clone(), 0.5),
        pct(latencies, 0.99)
    );

    let t = Instant::now();
    let (reader, writer) = reflector::store();
    let driver = tokio::spawn(
        reflector(writer, watcher(pods.clone(), watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    reader.wait_until_ready().await.expect("reflector");
    println!(
        "reflector initial sync of {} pods (pages of 500): {:.2?}",
        reader.state().len(),
        t.elapsed()
    );
    driver.abort();

    use tuneplane_kubesim::controllers::{
        events::Recorder, kubelet::Kubelet, scheduler::Scheduler,
    };
    let mut recorder = Recorder::new(store.clone());
    let (mut scheduler, mut kubelet) = (Scheduler::default(), Kubelet::new(Default::default()));
    let (mut sched, mut kube) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        scheduler.step(&store, &mut recorder);
        sched.push(t.elapsed());
        let t = Instant::now();
        kubelet.step(&store, &mut recorder, None);
        kube.push(t.elapsed());
    }
    println!(
        "controller pass over 10k running pods: scheduler median {:.2?}, kubelet median {:.2?}",
        median(sched),
        median(kube)
    );
    println!(
        "process RSS (server + client in one process): start {} MiB, now {} MiB, peak {} MiB",
        rss_start / 1024,
        rss_kib("VmRSS:") / 1024,
        rss_kib("VmHWM:") / 1024
    );
}
