//! The runner inside a real extracted capsule, run by the machine's python3.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::fs;
use std::io::{BufRead, BufReader, Cursor};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tuneplane_core::capsule::{Limits, build_from_source, build_runner_pex, runner_pex};
use tuneplane_core::render::bootstrap::MISMATCH_EXIT;
use tuneplane_core::spec::{Defaults, validate};

/// Builds a capsule of `files` with `entrypoint` and extracts it into `dest`.
fn extracted(files: &[(&str, &str)], entrypoint: &str, dest: &Path) {
    let src = dest.with_extension("src");
    fs::create_dir_all(&src).unwrap();
    for (name, body) in files {
        fs::write(src.join(name), body).unwrap();
    }
    let text = format!(
        "name: r\nimage: python:3.12\nentrypoint: {entrypoint:?}\nenv: {{FROM_SPEC: yes-it-is}}\npools: [{{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}}]\n"
    );
    let spec = validate(&text, None, &Defaults::default()).unwrap().spec;
    let (bytes, _) = build_from_source(
        &src,
        &spec,
        &Limits::default(),
        dest.parent().unwrap(),
        Vec::new(),
    )
    .unwrap();
    zip::ZipArchive::new(Cursor::new(bytes))
        .unwrap()
        .extract(dest)
        .unwrap();
}

#[test]
fn runner_runs_the_entrypoint_in_the_capsule_root_and_returns_its_status() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    extracted(
        &[
            (
                "main.py",
                "import os, helper\nprint('cwd-ok' if os.getcwd() == os.environ['TUNEPLANE_CAPSULE_ROOT'] else 'cwd-wrong')\nprint(helper.X, os.environ['FROM_SPEC'], os.environ['TUNEPLANE_JOB_ID'])\nraise SystemExit(3)\n",
            ),
            ("helper.py", "X = 'sibling-import-ok'\n"),
        ],
        "python3 main.py",
        &root,
    );
    // Started from another directory, as a workload would.
    let out = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .current_dir(t.path())
        .env("TUNEPLANE_JOB_ID", "job-42")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cwd-ok"), "{stdout}");
    assert!(
        stdout.contains("sibling-import-ok yes-it-is job-42"),
        "{stdout}"
    );
}

#[test]
fn runner_forwards_sigterm_to_the_entrypoint() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("capsule");
    extracted(
        &[(
            "wait.sh",
            "trap 'echo got-term; exit 42' TERM\necho ready\nwhile true; do sleep 0.05; done\n",
        )],
        "bash wait.sh",
        &root,
    );
    let mut child = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("runner did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(42));
    assert_eq!(lines.next().unwrap().unwrap(), "got-term");
}

#[test]
fn runner_refuses_a_capsule_without_its_manifest() {
    let t = tempfile::tempdir().unwrap();
    let pex = t.path().join(".tuneplane/runner.pex");
    fs::create_dir_all(pex.parent().unwrap()).unwrap();
    fs::write(&pex, runner_pex()).unwrap();
    let out = Command::new("python3").arg(&pex).output().unwrap();
    assert_eq!(out.status.code(), Some(MISMATCH_EXIT));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("capsule checksum mismatch: cannot read")
            && stderr.contains("manifest.json"),
        "{stderr}"
    );
}

#[test]
fn runner_refuses_a_file_changed_after_the_capsule_was_built_and_runs_nothing() {
    for (change, expect) in [
        ("changed", "main.py: sha256 "),
        ("removed", "main.py: No such file"),
    ] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("capsule");
        extracted(
            &[("main.py", "open('ran', 'w').write('user code ran')\n")],
            "python3 main.py",
            &root,
        );
        if change == "changed" {
            fs::write(root.join("main.py"), "print('tampered')\n").unwrap();
        } else {
            fs::remove_file(root.join("main.py")).unwrap();
        }
        let out = Command::new("python3")
            .arg(root.join(".tuneplane/runner.pex"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(MISMATCH_EXIT), "{change}: {stderr}");
        assert!(
            stderr.contains("capsule checksum mismatch: ")
                && stderr.contains(expect)
                && stderr.contains("nothing was executed"),
            "{change}: {stderr}"
        );
        assert!(!root.join("ran").exists(), "{change}: user code ran");
    }
}

#[test]
fn runner_is_built_reproducibly() {
    let a = build_runner_pex();
    assert!(a.starts_with(b"PK\x03\x04"));
    let names: Vec<String> = {
        let z = zip::ZipArchive::new(Cursor::new(&a)).unwrap();
        z.file_names().map(|n| n.unwrap().into_owned()).collect()
    };
    assert_eq!(names, ["__main__.py"]);
    assert_eq!(build_runner_pex(), a, "two builds give the same bytes");
    assert_eq!(runner_pex(), a.as_slice());
}
