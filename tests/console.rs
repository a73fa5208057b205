//! Browser tests of the web console: a headless Chromium (Debian `chromium` + `chromium-driver`)
//! against the `tuneplane dev` stack on 127.0.0.1 — sign in, submit `examples/hello-cpu` and watch
//! it succeed, read a pending job's reason in the event view, compare the capacity page with
//! `GET /v1/capacity` and the reconciler's admission snapshot, stop a job, and screenshot every page
//! at desktop and 360 px width into `target/console-screenshots/`.
//!
//! The tests run one at a time (one browser and one stack at a time on a small machine).

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "console/harness.rs"]
mod harness;

use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use harness::{World, archive_of, eventually, repo};
use serde_json::{Value, json};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `body` on its own runtime, one test at a time.
fn run<F: std::future::Future<Output = ()>>(body: impl FnOnce() -> F) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(body());
}

const PENDING_SPEC: &str = "name: wants-four-h200\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, series: h200, nodes: 4, gpus_per_node: 8}\n";

/// Submits `spec` with hello-cpu's code through `POST /v1/jobs`; returns the job id.
async fn submit_api(w: &World, spec: &str) -> String {
    submit_folder(w, "hello-cpu", spec).await
}

/// Submits `spec` with the code of `examples/<folder>` through `POST /v1/jobs`; the job id.
async fn submit_folder(w: &World, folder: &str, spec: &str) -> String {
    let archive = archive_of(
        &repo().join("examples").join(folder),
        &w.dir
            .path()
            .join(format!("{}.tar.gz", folder.replace('/', "-"))),
    );
    let bytes = std::fs::read(archive).unwrap();
    let body = json!({"spec": spec, "code": {"inline": base64::engine::general_purpose::STANDARD.encode(bytes)}});
    let res = reqwest::Client::new()
        .post(w.url("/v1/jobs"))
        .bearer_auth(&w.stack.api_key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("submit");
    let bytes = res.bytes().await.unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    v["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job id in {v}"))
        .to_owned()
}

/// `GET path` on the API with the stack's key, as JSON.
async fn get_json(w: &World, path: &str) -> Value {
    let res = reqwest::Client::new()
        .get(w.url(path))
        .bearer_auth(&w.stack.api_key)
        .send()
        .await
        .expect("GET");
    let bytes = res.bytes().await.unwrap();
    serde_json::from_slice(&bytes).expect("a JSON answer")
}

/// Types `spec` into the submit page's editor, as a user would (an `input` event follows).
async fn edit_spec(w: &World, spec: &str) {
    w.js("const s = document.getElementById('spec'); s.value = arguments[0]; s.dispatchEvent(new Event('input'));", vec![json!(spec)]).await;
}

/// Reloads job `id`'s page (every 500 ms, 60 s at most) until `check` holds on it.
async fn reload_job_page_until<F, Fut>(w: &World, id: &str, what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let path = format!("/console/jobs/{id}");
    eventually(what, 120, Duration::from_millis(500), || async {
        w.open(&path).await;
        check().await
    })
    .await;
}

#[test]
fn signing_in_and_submitting_hello_cpu_reaches_succeeded_with_events_and_a_log_preview() {
    run(|| async {
        let w = World::start().await;
        w.open("/console/sign-in").await;
        w.screenshots("sign-in").await;
        w.sign_in().await;
        // The session cookie is HttpOnly: page scripts cannot read it.
        let visible = w.js("return document.cookie;", vec![]).await;
        assert!(!visible.as_str().unwrap_or_default().contains("tp_session"));

        w.open("/console/submit").await;
        let code = archive_of(
            &repo().join("examples/hello-cpu"),
            &w.dir.path().join("hello-cpu.tar.gz"),
        );
        let spec =
            std::fs::read_to_string(repo().join("examples/hello-cpu/tuneplane.yaml")).unwrap();
        // A mistake first: the editor shows the validator's problem inline.
        edit_spec(&w, &spec.replace("hello-cpu", "Hello_CPU")).await;
        w.wait_for_text(
            "inline validation",
            "#spec-feedback .field-errors li",
            |t| t.starts_with("name"),
        )
        .await;
        w.screenshots("submit-invalid").await;
        edit_spec(&w, &spec).await;
        w.wait_for_text("the spec to validate", "#spec-feedback .ok", |t| {
            t.contains("valid")
        })
        .await;
        w.type_into("#code", &code.display().to_string()).await;
        w.screenshots("submit").await;
        w.click("#submit-form button[type=submit]").await;
        w.wait_for_path("the job page", |p| p.contains("notice=submitted"))
            .await;
        let path = w.path().await;
        let id = path
            .trim_start_matches("/console/jobs/")
            .split('?')
            .next()
            .unwrap_or_default()
            .to_owned();

        // The page follows the job by itself (auto-refresh), no reload needed.
        eventually(
            "the page to show the job finished",
            360,
            Duration::from_millis(500),
            || async {
                let status = w.job_status().await.unwrap_or_default();
                matches!(status.as_str(), "SUCCEEDED" | "FAILED")
            },
        )
        .await;
        // Times are shown in the browser's time zone, with relative ages.
        let times = w.texts("#job-region time[data-ms]").await;
        assert!(
            times
                .iter()
                .all(|t| t.contains("GMT+5:30") && (t.contains("just now") || t.contains("ago"))),
            "local times: {times:?}"
        );
        w.client.refresh().await.unwrap();
        assert_eq!(w.job_status().await.as_deref(), Some("SUCCEEDED"));
        let events = w.texts("table.events tbody tr").await;
        assert!(
            events.iter().any(|e| e.contains("Submitted")),
            "events: {events:?}"
        );
        let logs = w.texts("pre.log").await.join("\n");
        assert!(
            logs.contains("countdown 1") && logs.contains("done"),
            "log preview: {logs}"
        );
        w.screenshots("job-succeeded").await;

        w.open("/console/jobs").await;
        let rows = w.texts("table.jobs tbody tr").await;
        assert!(
            rows.iter()
                .any(|r| r.contains(&id) && r.contains("SUCCEEDED") && r.contains("Pod")),
            "rows: {rows:?}"
        );
        w.screenshots("jobs").await;
        w.finish().await;
    });
}

#[test]
fn a_pending_job_shows_its_reason_in_the_event_view_and_can_be_stopped() {
    run(|| async {
        let w = World::start().await;
        w.sign_in().await;
        let id = submit_api(&w, PENDING_SPEC).await;
        reload_job_page_until(&w, &id, "a pending reason", || async {
            !w.texts(".pending").await.is_empty()
        })
        .await;
        // The reason the API reports, in plain words beside the reconciler's message, and as an
        // entry of the event view.
        let job = get_json(&w, &format!("/v1/jobs/{id}")).await;
        let (reason, message) = (
            job["pending"]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            job["pending"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        assert!(!reason.is_empty(), "no pending reason in {job}");
        let pending = w.texts(".pending").await.join("\n");
        assert!(
            pending.contains(&reason) && pending.contains(&message),
            "{pending}"
        );
        assert!(!w.texts(".pending .words").await.join("").is_empty());
        // Its deadline: a countdown once admitted, or when it will start while queued.
        let deadline = w.texts(".pending .deadline").await.join("");
        assert!(
            deadline.contains("PreRunningDeadlineExceeded in")
                || deadline.contains("starts at admission"),
            "deadline: {deadline:?}"
        );
        let events = w.texts("table.events tbody tr").await;
        assert!(
            events
                .iter()
                .any(|e| e.contains(&reason) && e.contains(&message)),
            "the event view lacks {reason}: {events:?}"
        );
        w.screenshots("job-pending").await;

        w.click("details.stop summary").await;
        w.click("details.stop button[type=submit]").await;
        w.client.accept_alert().await.expect("confirmation dialog");
        w.wait_for_path("the stop notice", |p| p.contains("notice=stop-requested"))
            .await;
        reload_job_page_until(&w, &id, "the job STOPPED", || async {
            w.job_status().await.as_deref() == Some("STOPPED")
        })
        .await;
        w.screenshots("job-stopped").await;
        w.finish().await;
    });
}

#[test]
fn the_capacity_page_shows_the_snapshot_the_api_returns_and_admission_uses() {
    run(|| async {
        let w = World::start().await;
        w.sign_in().await;
        eventually(
            "a capacity snapshot",
            300,
            Duration::from_millis(200),
            || async {
                w.open("/console/capacity").await;
                !w.texts("section.series").await.is_empty()
            },
        )
        .await;
        let api = get_json(&w, "/v1/capacity").await;
        let snapshot: tuneplane_core::capacity::CapacitySnapshot =
            serde_json::from_value(api["snapshot"].clone()).unwrap();
        let admission = admission_snapshot(&w).await;
        let sections = w
            .client
            .find_all(fantoccini::Locator::Css("section.series"))
            .await
            .unwrap_or_default();
        assert_eq!(sections.len(), snapshot.series.len());
        for s in sections {
            let attr = |name: &'static str| {
                let s = s.clone();
                async move { s.attr(name).await.ok().flatten().unwrap_or_default() }
            };
            let series = attr("data-series").await;
            let shown: Vec<u32> = [
                attr("data-total").await,
                attr("data-used").await,
                attr("data-free").await,
                attr("data-blocked").await,
                attr("data-largest").await,
                attr("data-nodes").await,
            ]
            .iter()
            .map(|v| v.parse().unwrap_or(u32::MAX))
            .collect();
            // The visible figures are the attributes' numbers.
            let total = s
                .find(fantoccini::Locator::Css("dd.total"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap_or_default();
            assert_eq!(total, shown[0].to_string());
            for (source, snap) in [("GET /v1/capacity", &snapshot), ("admission", &admission)] {
                let c = &snap.series[&series];
                let expected = vec![
                    c.total_gpus,
                    c.used_gpus,
                    c.free_gpus,
                    c.blocked_gpus,
                    c.largest_free_block,
                    c.nodes,
                ];
                assert_eq!(shown, expected, "series {series}: console vs {source}");
            }
        }
        let node_rows = w.texts("table.nodes tbody tr").await;
        assert_eq!(node_rows.len(), snapshot.nodes.len());
        assert!(
            node_rows.iter().any(|r| r.contains("Cordoned")),
            "the fleet's cordoned h200 node"
        );
        w.screenshots("capacity").await;
        w.finish().await;
    });
}

/// The snapshot the reconciler plans admissions against, computed from the simulated cluster's
/// Nodes and Pods by the reconciler's own functions.
async fn admission_snapshot(w: &World) -> tuneplane_core::capacity::CapacitySnapshot {
    use k8s_openapi::api::core::v1::Node;
    use tuneplane_reconciler::watched_pod::WatchedPod;
    let url = w
        .stack
        .sim
        .as_ref()
        .expect("simulated cluster")
        .url()
        .parse()
        .unwrap();
    let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
    let nodes = kube::Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    let pods = kube::Api::<WatchedPod>::all(client)
        .list(&Default::default())
        .await
        .unwrap();
    let nodes: Vec<_> = nodes
        .items
        .iter()
        .map(tuneplane_reconciler::cluster::node_info)
        .collect();
    let pods: Vec<_> = pods
        .items
        .iter()
        .map(tuneplane_reconciler::cluster::pod_info)
        .collect();
    tuneplane_core::capacity_compute::compute_capacity(0, &nodes, &pods)
}

#[test]
fn playgrounds_are_listed_with_a_countdown_and_deleted_from_the_console() {
    run(|| async {
        let w = World::start().await;
        w.sign_in().await;
        w.open("/console/playgrounds").await;
        w.type_into("#pg-model", "Qwen/Qwen2.5-0.5B-Instruct").await;
        w.click("section form.stack button[type=submit]").await;
        w.wait_for_text("the playground row", "table.playgrounds tbody tr", |r| {
            r.contains("Qwen")
        })
        .await;
        let left = w.texts("[data-countdown-to]").await.join(" ");
        assert!(left.contains('m'), "countdown: {left}");
        // The reconciler creates the pod; the page (refreshing itself) shows its state and URL.
        eventually(
            "the playground running with its proxy URL",
            300,
            Duration::from_millis(100),
            || async {
                w.open("/console/playgrounds").await;
                let state = w
                    .texts("table.playgrounds td[data-label=State]")
                    .await
                    .join(" ");
                let url = w.texts("table.playgrounds code.url").await.join(" ");
                state.contains("Running")
                    && url.contains("/v1/playgrounds/pg-")
                    && url.ends_with("/proxy/")
            },
        )
        .await;
        w.screenshots("playgrounds").await;
        w.click("table.playgrounds button.danger").await;
        w.client.accept_alert().await.expect("confirmation dialog");
        // Deleted: the row is gone from the page the delete redirects to, at once.
        eventually(
            "the deleted playground to leave the page",
            300,
            Duration::from_millis(200),
            || async {
                w.texts("p.empty")
                    .await
                    .iter()
                    .any(|t| t == "No playgrounds.")
            },
        )
        .await;
        assert!(w.texts("table.playgrounds tbody tr").await.is_empty());
        w.finish().await;
    });
}

#[test]
fn the_console_can_be_used_with_the_keyboard_alone() {
    run(|| async {
        let w = World::start().await;
        w.open("/console/sign-in").await;
        let tab = char::from(fantoccini::key::Key::Tab).to_string();
        let enter = char::from(fantoccini::key::Key::Enter).to_string();
        let active = || async {
            let e = w.client.active_element().await.unwrap();
            let id = e.attr("id").await.ok().flatten().unwrap_or_default();
            let class = e.attr("class").await.ok().flatten().unwrap_or_default();
            (e, format!("{id}.{class}"))
        };
        // The first Tab reaches the skip link; further Tabs reach the key field; Enter signs in.
        w.find("body").await.send_keys(&tab).await.unwrap();
        assert_eq!(active().await.1, ".skip");
        let mut found = false;
        for _ in 0..6 {
            let (e, name) = active().await;
            if name.starts_with("api_key") {
                e.send_keys(&format!("{}{enter}", w.stack.api_key))
                    .await
                    .unwrap();
                found = true;
                break;
            }
            e.send_keys(&tab).await.unwrap();
        }
        assert!(found, "the API key field is not reachable with Tab");
        w.wait_for_path("the jobs page", |p| p == "/console/jobs")
            .await;
        // The main navigation is reachable and announces the current page.
        let current = w.texts("header nav a[aria-current=page]").await;
        assert_eq!(current, vec!["Jobs".to_string()]);
        w.finish().await;
    });
}

const TICKER_SPEC: &str = "name: ticker\nimage: python:3.12-slim\nentrypoint: \"for i in $(seq 1 120); do echo tick $i; sleep 1; done\"\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";

#[test]
fn a_running_job_page_shows_its_live_output_and_stays_compact_on_a_phone() {
    run(|| async {
        let w = World::start().await;
        w.sign_in().await;
        let id = submit_api(&w, TICKER_SPEC).await;
        // Opening the page marks the job followed; its output appears while it runs.
        reload_job_page_until(&w, &id, "live output on the job page", || async {
            w.texts("details.live pre.log")
                .await
                .join("\n")
                .contains("tick ")
        })
        .await;
        assert_eq!(w.job_status().await.as_deref(), Some("RUNNING"));
        // The page refreshes itself: later lines arrive without a reload.
        let first = w.texts("details.live pre.log").await.join("\n");
        eventually(
            "more live output without a reload",
            60,
            Duration::from_millis(500),
            || async { w.texts("details.live pre.log").await.join("\n") != first },
        )
        .await;
        let height = |width: u32| {
            let w = &w;
            async move {
                w.client.set_window_size(width, 900).await.unwrap();
                w.js("return document.documentElement.scrollHeight;", vec![])
                    .await
                    .as_u64()
                    .unwrap_or(0)
            }
        };
        let desktop = height(1280).await;
        let phone = height(360).await;
        let _ = height(1280).await;
        println!("job page height: desktop {desktop} px, 360 px wide {phone} px");
        assert!(
            phone <= desktop * 2,
            "the 360 px page is {phone} px tall, more than twice the desktop's {desktop} px"
        );
        w.screenshots("job-running-live").await;
        let _ = reqwest::Client::new()
            .post(w.url(&format!("/v1/jobs/{id}/stop")))
            .bearer_auth(&w.stack.api_key)
            .send()
            .await;
        w.finish().await;
    });
}

#[test]
fn a_job_run_again_shows_its_attempts_evidence_and_downloadable_outputs_on_any_screen() {
    use tuneplane_core::job::{Attempt, Failure, FailureReason, JobState};
    run(|| async {
        let w = World::start().await;
        w.sign_in().await;
        // A job the fleet cannot host stays queued; it is then written as the reconciler
        // leaves a job whose second attempt was evicted after its first lost its node.
        let id = submit_api(&w, PENDING_SPEC).await;
        let blobs = w.stack.blobs.clone();
        let first_logs = format!("logs/{id}/attempt-1/logs.tar.gz");
        blobs.put(&first_logs, b"archive".to_vec()).await.unwrap();
        let mut written = false;
        for _ in 0..50 {
            let mut job = w.stack.jobs.get_job(&id).await.unwrap().unwrap();
            let mut lost = Failure::new(FailureReason::NodeLost, "node h200-1 was deleted");
            lost.evidence = vec!["node/h200-1: deleted".into()];
            // Times up to now, as the reconciler writes them.
            let now = tuneplane_core::clock::now_ms();
            job.attempts = vec![Attempt {
                number: 1,
                admitted_at_ms: Some(job.submitted_at_ms),
                running_at_ms: Some(job.submitted_at_ms),
                finished_at_ms: now - 1,
                workload_name: Some(format!("tp-{id}")),
                logs_key: Some(first_logs.clone()),
                placements: Vec::new(),
                failure: lost,
            }];
            job.attempt = 2;
            job.state = JobState::Failed;
            job.pending = None;
            job.finished_at_ms = Some(now);
            let mut evicted = Failure::new(FailureReason::Evicted, "pod evicted by the kubelet");
            evicted.evidence = vec![
                "pod/tp-a-very-long-pod-name-of-a-ray-worker-group-0123456789: DisruptionTarget TerminationByKubelet: the node was low on resource: memory".into(),
            ];
            job.failure = Some(evicted);
            // The reconciler may write the queued job meanwhile: read again and retry.
            if w.stack.jobs.update_job(&job).await.is_ok() {
                written = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(written, "could not write the job record");
        let weights: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        for (path, bytes) in [
            ("metrics.json", b"{\"loss\": 0.25}".to_vec()),
            (
                "model/a-long-folder-name-for-the-final-weights/weights-of-the-model.safetensors",
                weights,
            ),
        ] {
            blobs
                .put(&format!("outputs/default/{id}/{path}"), bytes)
                .await
                .unwrap();
        }
        blobs
            .put(
                &format!("checkpoints/default/{id}/step-20/state.pt"),
                vec![1; 100],
            )
            .await
            .unwrap();
        tuneplane_core::outputs::complete_checkpoint(
            blobs.as_ref(),
            "default",
            &id,
            "step-20",
            1,
            tuneplane_core::clock::now_ms(),
            2,
        )
        .await
        .unwrap();

        w.open(&format!("/console/jobs/{id}")).await;
        assert_eq!(w.job_status().await.as_deref(), Some("FAILED"));
        assert_eq!(
            w.texts("dd.attempt").await,
            vec!["2 of up to 3".to_string()]
        );
        let evidence = w.texts("section.failure ul.evidence li").await;
        assert!(evidence[0].contains("TerminationByKubelet"), "{evidence:?}");
        let attempts = w.texts("table.attempts tbody tr").await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert!(
            attempts[0].contains("NodeLost") && attempts[0].contains("node/h200-1: deleted"),
            "{attempts:?}"
        );
        let outputs = w.texts("table.outputs tbody tr").await;
        assert_eq!(outputs.len(), 2, "{outputs:?}");
        assert_eq!(
            w.texts("table.checkpoints tbody tr td:first-child").await,
            vec!["step-20".to_string()]
        );

        // The browser follows each link to the object itself (the redirect to its presigned
        // URL is on the same origin under `tuneplane dev`).
        let fetch = "return fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.ok ? r.arrayBuffer() : Promise.reject(r.status)).then(b => b.byteLength);";
        let links = w
            .js(
                "return Array.from(document.querySelectorAll('table.outputs a, table.attempts a')).map(a => a.getAttribute('href'));",
                vec![],
            )
            .await;
        let links: Vec<String> = serde_json::from_value(links).unwrap();
        assert_eq!(links.len(), 3, "{links:?}");
        let mut sizes = Vec::new();
        for link in &links {
            sizes.push(w.js(fetch, vec![json!(link)]).await.as_u64());
        }
        assert_eq!(sizes, [Some(7), Some(14), Some(4096)], "{links:?}");
        w.screenshots("job-attempts-outputs").await;
        w.finish().await;
    });
}

/// An array's page lists its children with their states and the counts; a pipeline step's page
/// lists the steps it depends on; the jobs list shows the array as one line.
#[test]
fn an_arrays_page_lists_its_children_and_a_steps_page_its_dependencies() {
    run(|| async {
        let w = World::start().await;
        w.sign_in().await;
        let sweep_spec =
            std::fs::read_to_string(repo().join("examples/sweep/tuneplane.yaml")).unwrap();
        let sweep = submit_folder(&w, "sweep", &sweep_spec).await;
        let path = format!("/console/jobs/{sweep}");
        reload_job_page_until(&w, &sweep, "the array's children all succeeded", || async {
            w.texts(".children .counts")
                .await
                .iter()
                .any(|t| t == "6/6 succeeded")
        })
        .await;
        w.open(&path).await;
        let rows = w.texts(".children tbody tr").await;
        assert_eq!(rows.len(), 6, "{rows:?}");
        assert!(rows.iter().all(|r| r.contains("SUCCEEDED")), "{rows:?}");
        // No empty Logs and Outputs of its own: where its children's are.
        let logs = w.texts("#logs-title + p").await;
        assert!(
            logs.iter()
                .any(|t| t.contains(&format!("tuneplane logs {sweep} --index 0"))),
            "{logs:?}"
        );
        assert!(w.texts("#outputs-title").await.is_empty());
        w.screenshots("array").await;
        w.open("/console/jobs").await;
        let listed = w.texts("tr[data-job-id]").await;
        assert_eq!(
            listed.iter().filter(|t| t.contains("sweep")).count(),
            1,
            "{listed:?}"
        );

        let prepare_spec =
            std::fs::read_to_string(repo().join("examples/pipeline/prepare/tuneplane.yaml"))
                .unwrap();
        let prepare = submit_folder(&w, "pipeline/prepare", &prepare_spec).await;
        let train_spec =
            std::fs::read_to_string(repo().join("examples/pipeline/train/tuneplane.yaml")).unwrap();
        let train = submit_folder(
            &w,
            "pipeline/train",
            &format!("{train_spec}depends_on: [{{job: {prepare}}}]\n"),
        )
        .await;
        reload_job_page_until(&w, &train, "train lists prepare", || async {
            w.texts(".dependencies li")
                .await
                .iter()
                .any(|t| t.contains(&prepare) && t.contains("prepare"))
        })
        .await;
        w.screenshots("pipeline-step").await;
    });
}
