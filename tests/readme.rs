//! The README as a test: every ```sh block of README.md marked with a `<!-- readme-test: ... -->`
//! line just before it runs, in the README's order, as a user would type it, and what the marker
//! says it prints is checked. A README command that no longer works fails this test.
//!
//! Marker fields (space-separated, values in double quotes where they hold spaces):
//! - `session=NAME`: blocks of one session share a fresh folder (with `examples/`), the shell
//!   variables earlier lines set, and the servers earlier blocks started; sessions run one after
//!   another, each ended before the next starts.
//! - A command that starts the stack (`cargo run --release -- dev ...`) runs in the background
//!   until the session ends or the next such command (a user's Ctrl-C); its banner's `export
//!   TUNEPLANE_API=... TUNEPLANE_API_KEY=...` line is what a user copies, and later commands get it
//!   (a line `export ... # from the banner` is replaced by the banner's).
//! - `in-repo`: the session runs in the checkout itself (the real control plane's scripts keep
//!   their state beside them), not in a fresh folder.
//! - `expect="TEXT"` (repeatable): the block's output must hold TEXT.
//! - `allow-exit="WORD=CODE"`: a command containing WORD may end with exit status CODE (as the
//!   README documents, e.g. `watch` of a job that fails exits 3); every other command must exit 0.
//! - `skip="TEXT"`: lines holding TEXT are not run (the test command inside itself).
//! - `timeout=SECONDS`: each command of the block may take this long (default 300); the real
//!   control plane's first `k8s-up.sh` builds it from Go modules, which takes far longer.
//! - `long`: run only by `make readme-long` (`cargo test --test readme -- --ignored`).
//!
//! What a user types is changed only where it must be: `cargo run --release --` and a leading
//! `tuneplane` run this build's binary (the test command builds debug, not release), `<job id>` and
//! `j-...` are the id of the job the block's last submission printed, `<subscription id>` the id
//! the session's last `subscriptions add` printed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One marked block.
#[derive(Debug, Clone, Default)]
struct Block {
    line: usize,
    session: String,
    in_repo: bool,
    long: bool,
    timeout: u64,
    expect: Vec<String>,
    allow_exit: Vec<(String, i32)>,
    skip: Vec<String>,
    commands: Vec<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `key=value` and `key="a value"` fields of a marker.
fn fields(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let end = rest.find([' ', '=']).unwrap_or(rest.len());
        let key = rest[..end].to_owned();
        rest = &rest[end..];
        let value = if let Some(r) = rest.strip_prefix("=\"") {
            let close = r
                .find('"')
                .expect("an unclosed quote in a readme-test marker");
            let v = r[..close].to_owned();
            rest = &r[close + 1..];
            v
        } else if let Some(r) = rest.strip_prefix('=') {
            let close = r.find(' ').unwrap_or(r.len());
            let v = r[..close].to_owned();
            rest = &r[close..];
            v
        } else {
            String::new()
        };
        out.push((key, value));
        rest = rest.trim_start();
    }
    out
}

/// The marked blocks of `readme`, in order; continuation lines joined, comment-only lines dropped.
fn blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(marker) = lines[i]
            .trim()
            .strip_prefix("<!-- readme-test:")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            i += 1;
            continue;
        };
        assert_eq!(
            lines.get(i + 1).map(|l| l.trim()),
            Some("```sh"),
            "README line {}: a readme-test marker must be followed by a ```sh block",
            i + 1
        );
        let mut block = Block {
            line: i + 2,
            timeout: 300,
            ..Block::default()
        };
        for (k, v) in fields(marker) {
            match k.as_str() {
                "session" => block.session = v,
                "in-repo" => block.in_repo = true,
                "long" => block.long = true,
                "timeout" => {
                    block.timeout = v.parse().unwrap_or_else(|_| {
                        panic!("README line {}: timeout={v:?} is not seconds", i + 1)
                    })
                }
                "expect" => block.expect.push(v),
                "skip" => block.skip.push(v),
                "allow-exit" => {
                    let (word, code) = v.split_once('=').expect("allow-exit=\"WORD=CODE\"");
                    block
                        .allow_exit
                        .push((word.to_owned(), code.parse().unwrap()));
                }
                other => panic!("README line {}: unknown readme-test field {other:?}", i + 1),
            }
        }
        assert!(
            !block.session.is_empty(),
            "README line {}: no session",
            i + 1
        );
        let mut j = i + 2;
        let mut pending = String::new();
        while j < lines.len() && lines[j].trim() != "```" {
            let line = lines[j];
            if !pending.is_empty() {
                pending.push('\n');
            }
            pending.push_str(line);
            if !line.trim_end().ends_with('\\') {
                let command = std::mem::take(&mut pending);
                let trimmed = command.trim();
                if !trimmed.is_empty() && !trimmed.starts_with('#') {
                    block.commands.push(command);
                }
            }
            j += 1;
        }
        out.push(block);
        i = j + 1;
    }
    out
}

/// A session: its folder, its shell variables (a file each command sources and rewrites), the
/// servers it started and the id of the job last submitted.
struct Session {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    servers: Vec<Child>,
    last_job: Option<String>,
    last_subscription: Option<String>,
    output: String,
}

impl Session {
    fn new(in_repo: bool) -> Session {
        let tmp = tempfile::tempdir().unwrap();
        let dir = if in_repo {
            repo()
        } else {
            std::os::unix::fs::symlink(repo().join("examples"), tmp.path().join("examples"))
                .unwrap();
            tmp.path().to_path_buf()
        };
        std::fs::write(tmp.path().join(".env"), "").unwrap();
        Session {
            _tmp: tmp,
            dir,
            servers: Vec::new(),
            last_job: None,
            last_subscription: None,
            output: String::new(),
        }
    }

    fn env_file(&self) -> PathBuf {
        self._tmp.path().join(".env")
    }

    /// `command` as this test runs it (see the module docs).
    fn rewrite(&self, command: &str) -> String {
        let bin = env!("CARGO_BIN_EXE_tuneplane");
        if command.trim_start().starts_with("export TUNEPLANE_API=")
            && command.contains("from the banner")
        {
            // The session already has the banner's line (`serve`).
            return "true".into();
        }
        let mut c = command.replace("cargo run --release --", bin);
        let trimmed = c.trim_start();
        if let Some(rest) = trimmed.strip_prefix("tuneplane ") {
            c = format!("{bin} {rest}");
        }
        if c.contains("<subscription id>") {
            let id = self
                .last_subscription
                .clone()
                .unwrap_or_else(|| panic!("{command}: no subscription was added before it"));
            c = c.replace("<subscription id>", &id);
        }
        if c.contains("<job id>") || c.contains("j-...") {
            let id = self
                .last_job
                .clone()
                .unwrap_or_else(|| panic!("{command}: no job was submitted before it"));
            c = c.replace("<job id>", &id).replace("j-...", &id);
        }
        c
    }

    fn script(&self, command: &str) -> String {
        format!(
            "set -a\nsource {env}\n{command}\nrc=$?\nexport -p > {env}\nexit $rc\n",
            env = self.env_file().display()
        )
    }

    /// Runs one command in the foreground (at most `timeout` seconds); its exit status.
    fn run(&mut self, command: &str, timeout: u64) -> i32 {
        let started = Instant::now();
        let out = Command::new("timeout")
            .arg(timeout.to_string())
            .arg("bash")
            .arg("-c")
            .arg(self.script(&self.rewrite(command)))
            .current_dir(&self.dir)
            .env("NO_COLOR", "1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if command.contains("subscriptions add") {
            // "subscription sub_... sends ... to ... as ...".
            if let Some(id) = text
                .lines()
                .find_map(|l| l.strip_prefix("subscription "))
                .and_then(|rest| rest.split_whitespace().next())
            {
                self.last_subscription = Some(id.to_owned());
            }
        }
        if command.contains("submit") {
            // "submitted: j-... (QUEUED)" (a pipeline prints one per step: the first is kept).
            if let Some(id) = text
                .lines()
                .find(|l| l.starts_with("submitted: "))
                .and_then(|l| l.split_whitespace().nth(1))
            {
                self.last_job = Some(id.to_owned());
            }
        }
        eprintln!(
            "readme$ {}\n{text}(exit {}, {:.1} s)",
            command.trim(),
            out.status.code().unwrap_or(-1),
            started.elapsed().as_secs_f64()
        );
        self.output.push_str(&text);
        out.status.code().unwrap_or(-1)
    }

    /// Starts a server in the background and waits (60 s) for its banner's export line, which
    /// joins the session's variables.
    fn serve(&mut self, command: &str) {
        self.stop_servers();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -a\nsource {}\nexec {}",
                self.env_file().display(),
                self.rewrite(command)
            ))
            .current_dir(&self.dir)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let export = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    eprintln!("readme (server)| {line}");
                    self.output.push_str(&line);
                    self.output.push('\n');
                    if let Some(e) = line.trim().strip_prefix("export TUNEPLANE_API=") {
                        break format!("export TUNEPLANE_API={e}\n");
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("{command}: no banner with the export line within 60 s");
                }
            }
        };
        let mut env = std::fs::read_to_string(self.env_file()).unwrap();
        env.push_str(&export);
        std::fs::write(self.env_file(), env).unwrap();
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        self.servers.push(child);
    }

    fn end(mut self) {
        self.stop_servers();
    }

    fn stop_servers(&mut self) {
        for mut s in self.servers.drain(..) {
            // SIGTERM, as the README says ends it cleanly; then wait (30 s at most).
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(s.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if s.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

impl Drop for Session {
    /// A failed block still stops the servers its session started.
    fn drop(&mut self) {
        self.stop_servers();
    }
}

/// Runs `block` in `session`; every command exits as allowed and the output holds what the
/// marker expects.
fn run_block(session: &mut Session, block: &Block) {
    let start = session.output.len();
    let started = Instant::now();
    for command in &block.commands {
        if block.skip.iter().any(|s| command.contains(s.as_str())) {
            continue;
        }
        if command.contains("cargo run --release -- dev") {
            session.serve(command);
            continue;
        }
        let status = session.run(command, block.timeout);
        let allowed = block
            .allow_exit
            .iter()
            .any(|(word, code)| command.contains(word.as_str()) && *code == status);
        assert!(
            status == 0 || allowed,
            "README line {}: `{}` exited {status}",
            block.line,
            command.trim()
        );
    }
    let said = &session.output[start..];
    for e in &block.expect {
        assert!(
            said.contains(e.as_str()),
            "README line {}: the block's output does not hold {e:?}:\n{said}",
            block.line
        );
    }
    eprintln!(
        "readme: block at README line {} ({} commands) took {:.1} s",
        block.line,
        block.commands.len(),
        started.elapsed().as_secs_f64()
    );
}

fn run_sessions(long: bool) {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let all = blocks(&readme);
    let chosen: Vec<&Block> = all.iter().filter(|b| b.long == long).collect();
    assert!(!chosen.is_empty(), "no readme-test blocks");
    let mut order: Vec<&str> = Vec::new();
    for b in &chosen {
        if !order.contains(&b.session.as_str()) {
            order.push(&b.session);
        }
    }
    for name in order {
        let started = Instant::now();
        let in_repo = chosen.iter().any(|b| b.session == name && b.in_repo);
        let mut session = Session::new(in_repo);
        for b in chosen.iter().filter(|b| b.session == name) {
            run_block(&mut session, b);
        }
        session.end();
        eprintln!(
            "readme: session {name} took {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
}

/// The README's marked blocks that run in `scripts/test.sh`.
#[test]
fn the_readmes_commands_work_as_written() {
    run_sessions(false);
}

/// The long ones (a real control plane): `make readme-long`.
#[test]
#[ignore = "long: make readme-long"]
fn the_readmes_long_blocks_work_as_written() {
    run_sessions(true);
}

#[test]
fn markers_parse_into_blocks_with_their_fields() {
    let text = "x\n<!-- readme-test: session=tour in-repo expect=\"6/6 succeeded\" allow-exit=\"watch=3\" skip=\"scripts/test.sh\" -->\n```sh\n# a comment\necho a   # note\ncurl x \\\n  -H y\n```\n";
    let b = blocks(text);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].session, "tour");
    assert!(b[0].in_repo && !b[0].long);
    assert_eq!(b[0].expect, ["6/6 succeeded"]);
    assert_eq!(b[0].allow_exit, [("watch".to_owned(), 3)]);
    assert_eq!(b[0].skip, ["scripts/test.sh"]);
    assert_eq!(b[0].commands, ["echo a   # note", "curl x \\\n  -H y"]);
    let _ = Path::new("");
}
