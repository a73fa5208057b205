//! kubectl against the `kubesim` binary: `get nodes,pods,rayjobs -A`, `logs`, and `get events
//! --field-selector involvedObject.name=...` through the kubeconfig the binary writes.
//!
//! Runs when `kubectl` is on PATH. With `KUBESIM_REQUIRE_KUBECTL=1` a missing kubectl fails the
//! test instead of skipping it (set it where kubectl is installed, e.g. in CI).

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // Only our own child, by its handle.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=10s")
        .args(args)
        .output()
        .expect("running kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Polls `kubectl` until `check` accepts its output, for at most `secs` seconds.
fn kubectl_until(
    kubeconfig: &Path,
    args: &[&str],
    secs: u64,
    check: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (ok, text) = kubectl(kubeconfig, args);
        if ok && check(&text) {
            return text;
        }
        if Instant::now() > deadline {
            panic!("kubectl {args:?} never gave the expected output; last output:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn kubectl_lists_logs_and_filters_events_against_the_binary() {
    if !kubectl_available() {
        assert_ne!(
            std::env::var("KUBESIM_REQUIRE_KUBECTL").as_deref(),
            Ok("1"),
            "kubectl is required but not on PATH"
        );
        eprintln!("skipping: kubectl is not on PATH");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    let child = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .arg("--fleet")
        .arg(fixture("fleet.yaml"))
        .args(["--port", "0", "--rayjob-seconds", "60"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting kubesim");
    let _server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(
            Instant::now() < deadline,
            "kubesim did not write its kubeconfig"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let objects = fixture("objects.yaml");
    let objects = objects.to_string_lossy();
    let (ok, text) = kubectl(&kubeconfig, &["create", "--validate=false", "-f", &objects]);
    assert!(ok, "kubectl create failed:\n{text}");

    let listing = kubectl_until(&kubeconfig, &["get", "nodes,pods,rayjobs", "-A"], 20, |t| {
        t.contains("tp-kubectl-") && t.contains("Running")
    });
    for want in [
        "h200-0",
        "l40s-1",
        "NotReady",
        "SchedulingDisabled",
        "hello",
        "tp-kubectl",
    ] {
        assert!(listing.contains(want), "missing {want:?} in:\n{listing}");
    }

    kubectl_until(
        &kubeconfig,
        &["get", "pod", "hello", "-o", "jsonpath={.status.phase}"],
        20,
        |t| t.trim() == "Succeeded",
    );
    let (ok, logs) = kubectl(&kubeconfig, &["logs", "hello"]);
    assert!(ok, "kubectl logs failed:\n{logs}");
    assert_eq!(logs, "hello from kubesim\n");

    let events = kubectl_until(
        &kubeconfig,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=hello",
        ],
        10,
        |t| t.contains("Scheduled"),
    );
    assert!(
        events.contains("Successfully assigned default/hello to"),
        "{events}"
    );
    assert!(
        !events.contains("tp-kubectl"),
        "the field selector must filter other objects out:\n{events}"
    );

    let (ok, rayjob) = kubectl(
        &kubeconfig,
        &[
            "get",
            "rayjob",
            "tp-kubectl",
            "-o",
            "jsonpath={.status.jobDeploymentStatus}",
        ],
    );
    assert!(ok && rayjob == "Running", "rayjob status: {rayjob}");
}
