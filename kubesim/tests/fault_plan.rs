//! The seeded fault plan as a kube-rs client sees it: error statuses, dropped connections (a
//! transport error, not an HTTP answer), slow answers, scopes, counters, and clearing the plan.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tuneplane_kubesim::{FaultPlan, FaultScope};

/// A client without kube-rs's own retry layer, so every injected fault reaches the caller.
fn bare_client(sim: &tuneplane_kubesim::KubeSim) -> kube::Client {
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn a_dropped_connection_is_a_transport_error_and_the_next_request_succeeds() {
    let (sim, _) = start(fast_config()).await;
    let nodes: Api<Node> = Api::all(bare_client(&sim));
    assert!(nodes.get("h200-0").await.is_ok());
    sim.set_fault_plan(Some(FaultPlan {
        drop_rate: 1.0,
        ..FaultPlan::default()
    }));
    for _ in 0..3 {
        match nodes.get("h200-0").await {
            Err(kube::Error::HyperError(_) | kube::Error::Service(_)) => {}
            other => panic!("expected a transport error, got {other:?}"),
        }
    }
    sim.set_fault_plan(None);
    assert!(nodes.get("h200-0").await.is_ok());
    let c = sim.fault_counts();
    assert_eq!((c.drops, c.lost_responses, c.error_total()), (3, 0, 0));
    assert_eq!(c.requests, 5);
}

#[tokio::test]
async fn errors_follow_the_plan_codes_and_429_says_when_to_retry() {
    let (sim, _) = start(fast_config()).await;
    let nodes: Api<Node> = Api::all(bare_client(&sim));
    sim.set_fault_plan(Some(FaultPlan {
        retry_after_secs: 2,
        ..FaultPlan::outage(429, FaultScope::All)
    }));
    match nodes.get("h200-0").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
            assert_eq!(s.details.map(|d| d.retry_after_seconds), Some(2));
        }
        other => panic!("expected 429, got {other:?}"),
    }
    sim.set_fault_plan(Some(FaultPlan {
        error_rate: 1.0,
        error_codes: vec![500, 503],
        ..FaultPlan::default()
    }));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        match nodes.get("h200-0").await {
            Err(kube::Error::Api(s)) => seen.insert(s.code),
            other => panic!("expected an error status, got {other:?}"),
        };
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [500, 503]);
    assert_eq!(sim.fault_counts().error_total(), 21);
}

#[tokio::test]
async fn a_mutating_scope_spares_reads_and_slow_answers_are_delayed() {
    let (sim, _) = start(fast_config()).await;
    let client = bare_client(&sim);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    sim.set_fault_plan(Some(FaultPlan::outage(503, FaultScope::Mutating)));
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "m"}})).unwrap();
    assert!(maps.create(&PostParams::default(), &cm).await.is_err());
    assert!(maps.list(&Default::default()).await.is_ok());
    assert!(maps.get_opt("m").await.is_ok_and(|m| m.is_none()));
    sim.set_fault_plan(Some(FaultPlan {
        slow_rate: 1.0,
        slow_min: Duration::from_millis(200),
        slow_max: Duration::from_millis(200),
        scope: FaultScope::Mutating,
        ..FaultPlan::default()
    }));
    let started = Instant::now();
    assert!(maps.create(&PostParams::default(), &cm).await.is_ok());
    assert!(maps.delete("m", &DeleteParams::default()).await.is_ok());
    // Two delayed writes: at least the two delays (a lower bound, not a performance assertion).
    assert!(started.elapsed() >= Duration::from_millis(400));
    let c = sim.fault_counts();
    assert_eq!((c.errors.get(&503), c.slow, c.requests), (Some(&1), 2, 5));
}

#[tokio::test]
async fn a_lost_response_applies_the_write_but_the_client_sees_a_transport_error() {
    let (sim, _) = start(fast_config()).await;
    let maps: Api<ConfigMap> = Api::namespaced(bare_client(&sim), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "lost"}})).unwrap();
    sim.set_fault_plan(Some(FaultPlan {
        lost_response_rate: 1.0,
        scope: FaultScope::Mutating,
        ..FaultPlan::default()
    }));
    match maps.create(&PostParams::default(), &cm).await {
        Err(kube::Error::HyperError(_) | kube::Error::Service(_)) => {}
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert!(maps.get_opt("lost").await.is_ok_and(|m| m.is_some()));
    sim.set_fault_plan(None);
    match maps.create(&PostParams::default(), &cm).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected 409 AlreadyExists, got {other:?}"),
    }
    assert_eq!(sim.fault_counts().lost_responses, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_a_heavy_plan_every_request_is_answered_or_fails_never_hangs() {
    let (sim, _) = start(fast_config()).await;
    let client = bare_client(&sim);
    sim.set_fault_plan(Some(FaultPlan {
        seed: 99,
        error_rate: 0.2,
        drop_rate: 0.2,
        lost_response_rate: 0.2,
        slow_rate: 0.2,
        slow_min: Duration::from_millis(1),
        slow_max: Duration::from_millis(20),
        ..FaultPlan::default()
    }));
    let mut tasks = Vec::new();
    for t in 0..6 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
            let nodes: Api<Node> = Api::all(client);
            let (mut ok, mut failed) = (0u32, 0u32);
            for i in 0..60 {
                let name = format!("m-{t}-{i}");
                let cm: ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
                let call = async {
                    match i % 4 {
                        0 => maps.create(&PostParams::default(), &cm).await.map(|_| ()),
                        1 => nodes.list(&Default::default()).await.map(|_| ()),
                        2 => {
                            let params = kube::api::WatchParams::default().timeout(1);
                            nodes.watch(&params, "0").await.map(|_| ())
                        }
                        _ => maps
                            .delete(&format!("m-{t}-{}", i - 3), &DeleteParams::default())
                            .await
                            .map(|_| ()),
                    }
                };
                match tokio::time::timeout(Duration::from_secs(20), call).await {
                    Ok(Ok(())) => ok += 1,
                    Ok(Err(_)) => failed += 1,
                    Err(_) => panic!("request {t}/{i} got neither an answer nor an error"),
                }
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (o, f) = t.await.unwrap();
        ok += o;
        failed += f;
    }
    let c = sim.fault_counts();
    assert_eq!(u64::from(ok + failed), c.requests);
    assert!(ok > 0 && failed > 0, "{ok} ok, {failed} failed");
    assert!(c.drops > 0 && c.lost_responses > 0 && c.slow > 0, "{c:?}");
}
