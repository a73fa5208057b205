//! The CLI as a user runs it: validate, capsule build / inspect, demo.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tuneplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `tuneplane capsule build SRC --spec examples/hello-cpu/tuneplane.yaml -o OUT`.
fn capsule_build(src: &Path, out: &Path) -> Output {
    let spec = examples().join("hello-cpu/tuneplane.yaml");
    tuneplane(&["capsule", "build", p(src), "--spec", p(&spec), "-o", p(out)])
}

#[test]
fn validate_prints_the_authoritative_spec_as_json() {
    let spec = examples().join("hello-cpu/tuneplane.yaml");
    let out = tuneplane(&[
        "validate",
        p(&spec),
        "--fleet",
        p(&examples().join("fleet.yaml")),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["name"], "hello-cpu");
    assert_eq!(
        json["namespace"], "tuneplane-jobs",
        "defaults are filled in"
    );
    assert_eq!(json["deadlines"]["run_seconds"], 600);
}

#[test]
fn validate_prints_every_error_and_exits_non_zero() {
    let t = tempfile::tempdir().unwrap();
    let bad = t.path().join("bad.yaml");
    fs::write(&bad, "name: Bad\nimage: x\nentrypoint: e\npools: [{name: main, series: h100x, nodes: 9, gpus_per_node: 8}]\nextra: 1\n").unwrap();
    let out = tuneplane(&[
        "validate",
        p(&bad),
        "--fleet",
        p(&examples().join("fleet.yaml")),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    for needle in [
        "name:",
        "pools[0].series: unknown series \"h100x\"; known: h200, l40s",
        "extra: unknown field",
    ] {
        assert!(err.contains(needle), "{needle} missing in {err}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn capsule_build_is_byte_identical_from_different_paths_and_prints_the_digest_last() {
    let t = tempfile::tempdir().unwrap();
    let copy = t.path().join("deep/elsewhere");
    fs::create_dir_all(&copy).unwrap();
    for f in ["hello.py", "greeting.py", "tuneplane.yaml"] {
        fs::copy(examples().join("hello-cpu").join(f), copy.join(f)).unwrap();
    }
    let (a, b) = (t.path().join("a.zip"), t.path().join("b.zip"));
    let out_a = capsule_build(&examples().join("hello-cpu"), &a);
    let out_b = capsule_build(&copy, &b);
    assert!(
        out_a.status.success() && out_b.status.success(),
        "{}",
        text(&out_a.stderr)
    );
    let last = |o: &Output| text(&o.stdout).lines().last().unwrap().to_string();
    assert!(
        last(&out_a).starts_with("sha256:") && last(&out_a).len() == 71,
        "{}",
        last(&out_a)
    );
    assert_eq!(last(&out_a), last(&out_b));
    assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());

    let listing = Command::new("unzip").arg("-l").arg(&a).output().unwrap();
    let listing = text(&listing.stdout);
    for name in [
        "hello.py",
        "greeting.py",
        ".tuneplane/jobspec.json",
        ".tuneplane/manifest.json",
        ".tuneplane/runner.pex",
    ] {
        assert!(
            listing
                .lines()
                .any(|l| l.trim_end().ends_with(&format!("   {name}"))),
            "{name} not at its place in:\n{listing}"
        );
    }

    let inspect = tuneplane(&["capsule", "inspect", p(&a)]);
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    assert!(text(&inspect.stdout).contains(&last(&out_a)));
    assert!(text(&inspect.stdout).contains("ok: every entry matches the manifest"));
}

#[test]
fn rejected_source_exits_non_zero_names_the_entry_and_writes_no_file() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("code");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("train.py"), "print(1)\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("secrets")).unwrap();
    let out_path = t.path().join("out.zip");
    let out = capsule_build(&src, &out_path);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("\"secrets\": symbolic links are not allowed"),
        "{}",
        text(&out.stderr)
    );
    let left: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["code"], "no output or partial file is left behind");
}

#[test]
fn inspect_refuses_a_tampered_capsule() {
    let t = tempfile::tempdir().unwrap();
    let zip = t.path().join("c.zip");
    assert!(
        capsule_build(&examples().join("hello-cpu"), &zip)
            .status
            .success()
    );
    let mut bytes = fs::read(&zip).unwrap();
    // Flip a byte of hello.py's data, just after its name in the local header.
    let at = bytes.windows(8).position(|w| w == b"hello.py").unwrap();
    bytes[at + 8 + 4] ^= 0x55;
    fs::write(&zip, bytes).unwrap();
    let out = tuneplane(&["capsule", "inspect", p(&zip)]);
    assert!(!out.status.success());
}

#[test]
fn demo_runs_every_example_to_its_expected_end_and_exits_zero() {
    // As after `cargo install`: the binary alone in its own folder, run from an empty directory
    // (the examples are built in).
    let bin_dir = tempfile::tempdir().unwrap();
    let bin = bin_dir.path().join("tuneplane");
    fs::copy(env!("CARGO_BIN_EXE_tuneplane"), &bin).unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(&bin)
        .args(["demo", "--timeout-seconds", "240"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(
        fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "the demo left files in the directory it ran from"
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for needle in [
        "demo ok: every example ended as expected",
        "pending InsufficientGpu",
        "pending ImagePull",
        "PreRunningDeadlineExceeded",
        "countdown 1",
        "sibling import ok: model",
        "SERIES",
    ] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "SUMMARY")
        .skip(2)
        .take(5)
        .collect();
    assert_eq!(summary.len(), 5, "{stdout}");
    assert!(
        summary.iter().all(|l| l.trim_end().ends_with("yes")),
        "{summary:#?}"
    );
}

#[test]
fn every_command_has_help() {
    for args in [
        &["--help"][..],
        &["validate", "--help"],
        &["capsule", "--help"],
        &["capsule", "build", "--help"],
        &["capsule", "inspect", "--help"],
        &["demo", "--help"],
        &["quota", "--help"],
        &["admin", "quota", "--help"],
        &["admin", "quota", "set", "--help"],
        &["admin", "quota", "unset", "--help"],
        &["outputs", "--help"],
        &["logs", "--help"],
        &["status", "--help"],
    ] {
        let out = tuneplane(args);
        assert!(
            out.status.success() && text(&out.stdout).contains("Usage"),
            "{args:?}"
        );
    }
    // The rule of `outputs --get` and the attempt of `logs` are in their help.
    let help = text(&tuneplane(&["outputs", "--help"]).stdout);
    for needle in ["--get <PATH>", "a folder", "`.`", "--dir <DIR>"] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    let help = text(&tuneplane(&["logs", "--help"]).stdout);
    assert!(help.contains("--attempt <N>"), "{help}");
}

#[test]
fn completion_scripts_load_in_bash_and_name_the_commands() {
    let out = tuneplane(&["completion", "bash"]);
    let script = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tuneplane.bash");
    fs::write(&file, &script).unwrap();
    // Loading defines the completion function and registers it for `tuneplane`.
    let loaded = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p tuneplane", p(&file)))
        .output()
        .unwrap();
    assert!(
        loaded.status.success(),
        "bash refused the script: {}",
        text(&loaded.stderr)
    );
    assert!(
        text(&loaded.stdout).contains("tuneplane"),
        "{}",
        text(&loaded.stdout)
    );
    for shell in ["zsh", "fish"] {
        let out = tuneplane(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        for word in ["submit", "logs", "completion"] {
            assert!(
                text(&out.stdout).contains(word),
                "{shell} script lacks {word}"
            );
        }
    }
    let bad = tuneplane(&["completion", "powerpoint"]);
    assert!(!bad.status.success());
}

#[test]
fn a_closed_stdout_pipe_ends_the_command_quietly() {
    use std::process::Stdio;
    // The reader is gone before the command writes: the write fails with a broken pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .args(["completion", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_mistyped_command_gets_a_suggestion() {
    let out = tuneplane(&["sbumit"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("'submit'"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn client_flags_are_checked_before_anything_is_sent_or_packed() {
    // --limit 0 used to list everything.
    let out = tuneplane(&["jobs", "--limit", "0", "--key", "k"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--limit"),
        "{}",
        text(&out.stderr)
    );

    // A URL without a scheme names the fix.
    let out = tuneplane(&["jobs", "--api", "127.0.0.1:8080", "--key", "k"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("http://127.0.0.1:8080"), "{err}");
    assert!(!err.contains("builder error"), "{err}");

    // Nothing listens: the error says what to check.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let api = format!("http://127.0.0.1:{port}");
    let out = tuneplane(&["jobs", "--api", &api, "--key", "k"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("is `tuneplane dev` running? check TUNEPLANE_API"),
        "{err}"
    );

    // submit: no key, a bad spec and a missing folder are reported before packing or sending.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bad.yaml");
    fs::write(&spec, "name: x\nentrypiont: python a.py\n").unwrap();
    let missing = dir.path().join("no-such-folder");
    let run = |key: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tuneplane"));
        c.args(["submit", p(&missing), "--spec", p(&spec), "--api", &api])
            .env_remove("TUNEPLANE_API_KEY");
        if let Some(k) = key {
            c.args(["--key", k]);
        }
        c.output().unwrap()
    };
    let out = run(None);
    assert!(
        text(&out.stderr).contains("no API key"),
        "{}",
        text(&out.stderr)
    );
    let out = run(Some("k"));
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("did you mean \"entrypoint\"?"), "{err}");
    assert!(err.contains("nothing was sent"), "{err}");
}

/// Whether process `pid` still exists (a zombie waiting for its parent counts as ended).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn dev_stopped_by_sigterm_ends_every_process_it_started() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let pid_dir = dir.path().join("pids");
    fs::create_dir_all(&pid_dir).unwrap();
    let job = dir.path().join("job");
    fs::create_dir_all(&job).unwrap();
    fs::write(
        job.join("tuneplane.yaml"),
        format!(
            "name: sleeper\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 sleeper.py\n\
             env: {{PID_DIR: {}}}\n\
             pools:\n  - {{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}}\n",
            pid_dir.display()
        ),
    )
    .unwrap();
    // The job starts a child of its own, then both wait.
    fs::write(
        job.join("sleeper.py"),
        "import os, subprocess, time\n\
         d = os.environ['PID_DIR']\n\
         child = subprocess.Popen(['sleep', '300'])\n\
         open(os.path.join(d, 'tmp'), 'w').write(f'{os.getpid()} {child.pid}')\n\
         os.rename(os.path.join(d, 'tmp'), os.path.join(d, 'pids'))\n\
         time.sleep(300)\n",
    )
    .unwrap();
    let mut dev = Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .args(["dev", "--port", "0", "--data-dir"])
        .arg(dir.path().join("data"))
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = BufReader::new(dev.stdout.take().unwrap());
    let (mut api, mut key) = (String::new(), String::new());
    for _ in 0..40 {
        let mut line = String::new();
        if banner.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(v) = line.trim().strip_prefix("API:") {
            api = v.trim().to_owned();
        }
        if let Some(v) = line.trim().strip_prefix("API key:") {
            key = v.split_whitespace().next().unwrap_or_default().to_owned();
        }
        if !api.is_empty() && !key.is_empty() {
            break;
        }
    }
    assert!(!api.is_empty() && !key.is_empty(), "no banner");
    let out = Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .args(["submit", p(&job), "--api", &api, "--key", &key])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let started = Instant::now();
    let pids = loop {
        if let Ok(t) = fs::read_to_string(pid_dir.join("pids")) {
            break t;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the job never started"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let pids: Vec<u32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| alive(*p)), "the job's processes run");

    let term = Command::new("kill")
        .args(["-TERM", &dev.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let stopped = Instant::now();
    loop {
        if let Some(status) = dev.try_wait().unwrap() {
            assert!(status.success(), "dev exit {status:?}");
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(60),
            "dev did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Bounded wait for the kernel to finish the kills.
    for _ in 0..50 {
        if pids.iter().all(|p| !alive(*p)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<&u32> = pids.iter().filter(|p| alive(**p)).collect();
    assert!(left.is_empty(), "processes left running: {left:?}");
}
