//! Capsule build throughput and peak memory, next to `zip -r -X -q` + `sha256sum` on the same tree.
//!
//! Run with `cargo bench --bench capsule_build` (or `make bench`). Generates, under
//! `target/bench-capsule/`, a tree of ~200 MB (half compressible text in files of every size, half
//! incompressible data) and a larger tree (600 MB by default) for the memory figure, then prints
//! MB/s of `tuneplane capsule build` (release binary, a separate process) and of
//! `zip -r -X -q` followed by `sha256sum`, each the median of three warm runs, plus the peak RSS
//! of the capsule build on the larger tree. Sizes: `TUNEPLANE_BENCH_MB`, `TUNEPLANE_BENCH_BIG_MB`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SPEC: &str = "name: bench\nimage: python:3.12\nentrypoint: python3 train.py\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n";

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
    /// Source-code-like text: words from a small vocabulary with numbers mixed in.
    fn text(&mut self, n: usize) -> Vec<u8> {
        const WORDS: &[&str] = &[
            "def",
            "return",
            "self",
            "import",
            "torch",
            "model",
            "layer",
            "batch",
            "loss",
            "grad",
            "for",
            "in",
            "range",
            "if",
            "else",
            "tensor",
            "optimizer",
            "step",
            "epoch",
            "print",
            "data",
            "=",
            "(",
            ")",
            ":",
        ];
        let mut v = Vec::with_capacity(n + 32);
        while v.len() < n {
            let r = self.next();
            v.extend_from_slice(WORDS[(r % WORDS.len() as u64) as usize].as_bytes());
            v.push(if r.is_multiple_of(11) { b'\n' } else { b' ' });
            if r.is_multiple_of(7) {
                v.extend_from_slice(format!("{}", r % 100_000).as_bytes());
                v.push(b' ');
            }
        }
        v.truncate(n);
        v
    }
}

/// Writes a tree of about `mb` MB unless it already exists; returns its byte count.
fn tree(root: &Path, mb: usize) -> u64 {
    let done = root.join(".complete");
    if !done.exists() {
        let _ = fs::remove_dir_all(root);
        let mut rng = Rng(0x5EED_0000 + mb as u64);
        let half = mb << 19;
        let mut written = 0usize;
        let mut i = 0;
        // Compressible half: many small source files, some medium, a few large logs.
        while written < half {
            let size = match i % 10 {
                0..=6 => 2_000 + (rng.next() % 30_000) as usize,
                7 | 8 => 200_000 + (rng.next() % 800_000) as usize,
                _ => 4_000_000 + (rng.next() % 4_000_000) as usize,
            };
            let dir = root.join(format!("src/pkg{}", i % 17));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(format!("mod_{i}.py")), rng.text(size)).unwrap();
            written += size;
            i += 1;
        }
        // Incompressible half: weights and archives.
        let mut j = 0;
        while written < 2 * half {
            let size = 1_000_000 + (rng.next() % 15_000_000) as usize;
            let dir = root.join("weights");
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(format!("shard_{j}.bin")), rng.bytes(size)).unwrap();
            written += size;
            j += 1;
        }
        fs::write(root.join("train.py"), "print('train')\n").unwrap();
        fs::write(&done, "").unwrap();
    }
    let mut total = 0;
    visit(root, &mut |p| {
        total += fs::metadata(p).unwrap().len();
        // Warm the page cache so both tools read from memory.
        let _ = fs::read(p).unwrap();
    });
    total
}

fn visit(dir: &Path, f: &mut dyn FnMut(&Path)) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            visit(&p, f);
        } else {
            f(&p);
        }
    }
}

/// Runs a command to completion; returns wall time and peak RSS (KiB) sampled from /proc.
fn timed(cmd: &mut Command) -> (Duration, u64) {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(s) = fs::read_to_string(&status_path)
            && let Some(line) = s.lines().find(|l| l.starts_with("VmHWM:"))
        {
            peak = peak.max(
                line.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            );
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{cmd:?} failed");
            return (start.elapsed(), peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-capsule");
    fs::create_dir_all(&target).unwrap();
    let spec = target.join("spec.yaml");
    fs::write(&spec, SPEC).unwrap();
    let mb: usize = std::env::var("TUNEPLANE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let big_mb: usize = std::env::var("TUNEPLANE_BENCH_BIG_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let bin = env!("CARGO_BIN_EXE_tuneplane");

    let root = target.join(format!("tree-{mb}"));
    eprintln!("preparing a {mb} MB tree in {}", root.display());
    let bytes = tree(&root, mb);
    let out = target.join("capsule.zip");
    let zip_out = target.join("zip.zip");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut sizes = (0, 0);
    for _ in 0..3 {
        let (t, _) = timed(
            Command::new(bin)
                .args(["capsule", "build"])
                .arg(&root)
                .arg("--spec")
                .arg(&spec)
                .arg("-o")
                .arg(&out),
        );
        ours.push(t);
        let _ = fs::remove_file(&zip_out);
        let start = Instant::now();
        let z = Command::new("zip")
            .arg("-r")
            .arg("-X")
            .arg("-q")
            .arg(&zip_out)
            .arg(".")
            .current_dir(&root)
            .status()
            .unwrap();
        let h = Command::new("sha256sum")
            .arg(&zip_out)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(z.success() && h.success());
        theirs.push(start.elapsed());
        sizes = (
            fs::metadata(&out).unwrap().len(),
            fs::metadata(&zip_out).unwrap().len(),
        );
    }
    let (ours, theirs) = (median(ours), median(theirs));
    let rate = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    println!(
        "capsule build benchmark: {:.0} MB tree, {} cores, median of 3 warm runs",
        bytes as f64 / 1e6,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:<34} {:>9} {:>10} {:>12}",
        "tool", "seconds", "MB/s", "output MB"
    );
    println!(
        "{:<34} {:>9.2} {:>10.1} {:>12.1}",
        "tuneplane capsule build",
        ours.as_secs_f64(),
        rate(ours),
        sizes.0 as f64 / 1e6
    );
    println!(
        "{:<34} {:>9.2} {:>10.1} {:>12.1}",
        "zip -r -X -q + sha256sum",
        theirs.as_secs_f64(),
        rate(theirs),
        sizes.1 as f64 / 1e6
    );
    println!(
        "speed-up: {:.2}x",
        theirs.as_secs_f64() / ours.as_secs_f64()
    );

    if big_mb > 0 {
        let big = target.join(format!("tree-{big_mb}"));
        eprintln!("preparing a {big_mb} MB tree in {}", big.display());
        let big_bytes = tree(&big, big_mb);
        let (t, peak) = timed(
            Command::new(bin)
                .args(["capsule", "build"])
                .arg(&big)
                .arg("--spec")
                .arg(&spec)
                .arg("-o")
                .arg(&out),
        );
        println!(
            "peak RSS building a {:.0} MB tree: {:.1} MiB ({:.1} MB/s)",
            big_bytes as f64 / 1e6,
            peak as f64 / 1024.0,
            big_bytes as f64 / 1e6 / t.as_secs_f64()
        );
    }
    let _ = fs::remove_file(&out);
    let _ = fs::remove_file(&zip_out);
}
