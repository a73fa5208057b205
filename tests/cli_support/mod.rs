//! Helpers shared by the tests that run the `tuneplane` binary's `admin` commands on an embedded
//! store in a temporary folder.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::path::Path;
use std::process::{Command, Output};

/// Bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tuneplane admin ARGS --data-dir DIR` (never DynamoDB: the store variables are cleared).
pub fn admin(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tuneplane"))
        .arg("admin")
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("TUNEPLANE_TABLE")
        .env_remove("TUNEPLANE_DATA_DIR")
        .output()
        .unwrap()
}

/// The standard output of a command that must have succeeded (else its exit and output).
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `tuneplane COMMAND ARGS` as a client of the API at `url` with `key` (60 s at most).
pub async fn client(url: &str, key: &str, command: &str, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tuneplane"));
    cmd.arg(command)
        .args(args)
        .env("TUNEPLANE_API", url)
        .env("TUNEPLANE_API_KEY", key);
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("the CLI did not finish within 60 s")
        .unwrap()
}
