//! The console's log preview holds a bounded tail, not whole lines: previewing an archive whose
//! log is one 64 MiB line must not raise the process's peak resident memory by more than a few
//! MiB. The peak is the kernel's `VmHWM` (Linux), which is why this is its own test binary with
//! a single test: nothing else runs in the process while it measures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::io::Read;

use tuneplane_functions::console::logs::{MAX_LINE_BYTES, TAIL_LINES, preview};

/// Peak resident set size of this process so far, bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

const LONG_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// A `.tar.gz` with one log that is a single 64 MiB line, then a short last line, built by
/// streaming (it compresses to well under a MiB).
fn archive() -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let data = std::io::repeat(b'a')
        .take(LONG_LINE_BYTES)
        .chain(&b"\nlast line\n"[..]);
    let mut h = tar::Header::new_gnu();
    h.set_size(LONG_LINE_BYTES + 11);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "pod-a/main.log", data).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn a_log_that_is_one_huge_line_is_previewed_in_bounded_memory() {
    let bytes = archive();
    let before = peak_rss();
    let tails = preview(&bytes).unwrap();
    let grew = peak_rss().saturating_sub(before);
    assert_eq!(tails.len(), 1);
    assert_eq!(tails[0].lines.len(), 2);
    assert_eq!(tails[0].lines[1], "last line");
    assert!(tails[0].lines[0].len() <= MAX_LINE_BYTES && !tails[0].truncated);
    // Holding the line would take 64 MiB; the tail is TAIL_LINES short lines plus the readers.
    let limit = 16 * 1024 * 1024;
    assert!(
        grew < limit,
        "previewing raised peak memory by {grew} bytes (limit {limit}, {TAIL_LINES} lines kept)"
    );
}
