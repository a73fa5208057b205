//! `tuneplane render`: the YAML of what the reconciler would create, from the example specs.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn render(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .arg("render")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("TUNEPLANE_K8S_GPU_PASSTHROUGH")
        .env_remove("TUNEPLANE_CAPSULE_DELIVERY")
        .output()
        .expect("run tuneplane");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn yaml(text: &str) -> serde_json::Value {
    yaml_serde::from_str(text).unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
}

#[test]
fn render_prints_the_rayjob_of_a_multi_pool_spec() {
    let sha = "ab".repeat(32);
    let url = format!("https://bucket.example/capsules/sha256/{sha}/capsule.zip?X-Amz-Signature=x");
    let (code, out, err) = render(&[
        "--spec",
        "examples/ray-multipool/tuneplane.yaml",
        "--fleet",
        "examples/fleet.yaml",
        "--job-id",
        "j-42",
        "--capsule-sha256",
        &sha,
        "--capsule-url",
        &url,
    ]);
    assert_eq!(code, 0, "{err}");
    let rj = yaml(&out);
    assert_eq!(rj["kind"], "RayJob");
    assert_eq!(rj["metadata"]["name"], "tp-j-42");
    let env: serde_json::Value = yaml(rj["spec"]["runtimeEnvYAML"].as_str().unwrap_or_default());
    assert_eq!(env["working_dir"], serde_json::json!(url));
    assert!(
        rj["spec"]["rayClusterSpec"]["workerGroupSpecs"]
            .as_array()
            .is_some_and(|g| g.len() >= 2)
    );
}

#[test]
fn render_prints_a_pod_for_a_cpu_job_without_gpus_when_passthrough_is_off() {
    let (code, out, err) = render(&[
        "--spec",
        "examples/hello-cpu/tuneplane.yaml",
        "--gpu-passthrough",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    let pod = yaml(&out);
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
}

#[test]
fn render_refuses_a_spec_that_never_fits_the_fleet_and_a_bad_setting() {
    let (code, _, err) = render(&[
        "--spec",
        "examples/too-big/tuneplane.yaml",
        "--fleet",
        "examples/fleet.yaml",
    ]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = render(&[
        "--spec",
        "examples/hello-cpu/tuneplane.yaml",
        "--capsule-delivery",
        "ftp",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("TUNEPLANE_CAPSULE_DELIVERY"), "{err}");
}

#[test]
fn a_closed_stdout_pipe_ends_the_command_quietly() {
    // `tuneplane render … | head -c 0`: the reader is gone before anything is written.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .args(["render", "--spec", "examples/ray-multipool/tuneplane.yaml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tuneplane");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
