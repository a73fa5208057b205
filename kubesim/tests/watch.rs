//! Watches through kube-rs: the runtime watcher sees changes in order and relists after a 410,
//! a reflector store converges, and raw watches honour selectors and `timeoutSeconds`.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

async fn next_event<S>(stream: &mut S) -> watcher::Event<Pod>
where
    S: futures_util::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin,
{
    match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(ev))) => ev,
        Ok(Some(Err(e))) => panic!("watcher error: {e}"),
        Ok(None) => panic!("watcher ended"),
        Err(_) => panic!("no watcher event within 10s"),
    }
}

/// Skips the initial listing (Init, InitApply*, InitDone).
async fn skip_init<S>(stream: &mut S) -> Vec<String>
where
    S: futures_util::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin,
{
    let mut listed = Vec::new();
    for _ in 0..1000 {
        match next_event(stream).await {
            watcher::Event::Init => {}
            watcher::Event::InitApply(p) => listed.push(name_of(&p)),
            watcher::Event::InitDone => return listed,
            other => panic!("unexpected event during init: {other:?}"),
        }
    }
    panic!("init never finished")
}

fn quiet_config() -> tuneplane_kubesim::SimConfig {
    // No fleet: pods stay Pending and untouched, so the only changes are the test's.
    tuneplane_kubesim::SimConfig {
        fleet: None,
        ..fast_config()
    }
}

#[tokio::test]
async fn watcher_sees_create_modify_delete_in_order() {
    let (_sim, client) = start(quiet_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    assert!(skip_init(&mut stream).await.is_empty());

    pods.create(&PostParams::default(), &pod("w1", "busybox", 0, None))
        .await
        .unwrap();
    pods.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"step": "2"}}})),
    )
    .await
    .unwrap();
    pods.delete("w1", &DeleteParams::default()).await.unwrap();

    // The scheduler may also write the pod (no nodes: `PodScheduled=False`, as a real one does),
    // which shows as a further Apply of the same step; the test's own three changes must arrive
    // in order, so repeats of one state are folded before comparing.
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..50 {
        if seen.last().is_some_and(|s| s.starts_with("delete:")) {
            break;
        }
        match next_event(&mut stream).await {
            watcher::Event::Apply(p) => {
                let step = p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("step"))
                    .cloned()
                    .unwrap_or_else(|| "1".into());
                let entry = format!("apply:{}:{step}", name_of(&p));
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
            }
            watcher::Event::Delete(p) => seen.push(format!("delete:{}", name_of(&p))),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["apply:w1:1", "apply:w1:2", "delete:w1"]);
}

#[tokio::test]
async fn watcher_relists_after_410_gone() {
    let (sim, client) = start(quiet_config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    skip_init(&mut stream).await;
    pods.create(&PostParams::default(), &pod("before", "busybox", 0, None))
        .await
        .unwrap();
    assert!(matches!(
        next_event(&mut stream).await,
        watcher::Event::Apply(_)
    ));

    // Another type's change moves the resourceVersion past the watcher's; compaction then ends
    // the open watch, and resuming from the watcher's version is 410 Gone.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "bump"}})).unwrap(),
    )
    .await
    .unwrap();
    sim.compact();
    pods.create(&PostParams::default(), &pod("after", "busybox", 0, None))
        .await
        .unwrap();

    // The watcher reports the 410 and must then relist: a fresh Init with both pods.
    let mut relisted = None;
    let mut saw_gone = false;
    for _ in 0..20 {
        let item = match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(item)) => item,
            other => panic!("watcher stalled: {other:?}"),
        };
        let event = match item {
            Ok(ev) => ev,
            Err(e) => {
                saw_gone |= e.to_string().contains("too old resource version");
                continue;
            }
        };
        match event {
            watcher::Event::Init => {
                let mut names = Vec::new();
                loop {
                    match next_event(&mut stream).await {
                        watcher::Event::InitApply(p) => names.push(name_of(&p)),
                        watcher::Event::InitDone => break,
                        other => panic!("unexpected {other:?}"),
                    }
                }
                relisted = Some(names);
                break;
            }
            watcher::Event::Apply(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_gone, "the resumed watch must be answered with 410 Gone");
    let mut names = relisted.expect("the watcher never relisted");
    names.sort();
    assert_eq!(names, ["after", "before"]);
}

#[tokio::test]
async fn reflector_store_converges_to_the_server_state() {
    let (_sim, client) = start(quiet_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let (reader, writer) = reflector::store();
    let driver = tokio::spawn(
        reflector(writer, watcher(pods.clone(), watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    for i in 0..20 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("r{i:02}"), "busybox", 0, None),
        )
        .await
        .unwrap();
    }
    for i in 0..5 {
        pods.delete(&format!("r{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    pods.patch(
        "r10",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .unwrap();
    let server: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(name_of)
        .collect();
    assert_eq!(server.len(), 15);
    wait_for(10, "reflector convergence", || {
        let reader = reader.clone();
        let server = server.clone();
        async move {
            let mut local: Vec<String> = reader.state().iter().map(|p| name_of(p)).collect();
            local.sort();
            let labelled = reader.state().iter().any(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("x"))
            });
            (local == server && labelled).then_some(())
        }
    })
    .await;
    driver.abort();
}

#[tokio::test]
async fn field_selector_watch_sees_a_pod_enter_when_it_is_bound() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let params = WatchParams::default()
        .fields("spec.nodeName=cpu-0")
        .timeout(20);
    let mut stream = pods.watch(&params, "0").await.unwrap().boxed();
    let mut cpu_pod = pod("cpu-job", "busybox", 0, None);
    if let Some(spec) = cpu_pod.spec.as_mut() {
        spec.node_selector =
            Some([("kubernetes.io/hostname".to_string(), "cpu-0".to_string())].into());
    }
    pods.create(&PostParams::default(), &cpu_pod).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next()).await;
    match first {
        Ok(Some(Ok(WatchEvent::Added(p)))) => assert_eq!(name_of(&p), "cpu-job"),
        other => panic!("expected ADDED when the pod is bound to cpu-0, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_ends_at_timeout_seconds() {
    let (_sim, client) = start(quiet_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut stream = pods
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while stream.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the watch must close after timeoutSeconds");
}

#[tokio::test]
async fn watch_with_bookmarks_allowed_gets_bookmarks_with_the_latest_version() {
    let config = tuneplane_kubesim::SimConfig {
        bookmark_interval: Duration::from_millis(100),
        ..quiet_config()
    };
    let (_sim, client) = start(config).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created = pods
        .create(&PostParams::default(), &pod("bm", "busybox", 0, None))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap_or_default();
    let params = WatchParams::default().timeout(10); // bookmarks are on by default
    let mut stream = pods.watch(&params, &rv).await.unwrap().boxed();
    // The scheduler may touch the pod first (no fleet: unschedulable); bookmarks follow.
    for _ in 0..20 {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(WatchEvent::Bookmark(b)))) => {
                let at: u64 = b.metadata.resource_version.parse().unwrap_or(0);
                assert!(
                    at >= rv.parse().unwrap_or(u64::MAX),
                    "bookmark at {at}, created at {rv}"
                );
                return;
            }
            Ok(Some(Ok(WatchEvent::Modified(_)))) => {}
            other => panic!("expected a bookmark, got {other:?}"),
        }
    }
    panic!("no bookmark among the first events");
}

#[tokio::test]
async fn kuberay_crds_are_established_only_when_kuberay_runs() {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let crd = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let (_sim, client) = start(quiet_config()).await;
    let crds: Api<DynamicObject> = Api::all_with(client, &crd);
    let rayjobs = crds.get("rayjobs.ray.io").await.unwrap();
    assert_eq!(
        rayjobs.data["status"]["conditions"][1]["type"],
        "Established"
    );
    let config = tuneplane_kubesim::SimConfig {
        kuberay: false,
        ..quiet_config()
    };
    let (_sim2, client2) = start(config).await;
    let crds2: Api<DynamicObject> = Api::all_with(client2.clone(), &crd);
    assert!(crds2.get("rayjobs.ray.io").await.is_err());
    let rj: Api<RayJob> = Api::namespaced_with(client2, "default", &rayjob_resource());
    assert!(
        matches!(rj.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 404)
    );
}
