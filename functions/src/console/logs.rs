//! The log preview: the last lines of every container log in a job's archive
//! (`logs/<job id>/logs.tar.gz`, written by the reconciler), read with bounded memory.
//!
//! Each log is streamed through a fixed buffer; only the first [`MAX_LINE_BYTES`] bytes of a line
//! are kept and only the last [`TAIL_LINES`] lines, so a log that is one 100 MiB line costs the
//! same memory as a short one: about `TAIL_LINES × MAX_LINE_BYTES` plus the read buffer.

use std::collections::VecDeque;
use std::io::Read;

use tuneplane_core::ids::JobId;
use tuneplane_core::store::BlobStore;

/// Lines kept per log.
pub const TAIL_LINES: usize = 40;
/// Largest archive previewed, bytes (bigger ones are download-only).
pub const MAX_ARCHIVE_BYTES: u64 = 32 * 1024 * 1024;
/// Most uncompressed bytes read while previewing.
pub const MAX_UNPACKED_BYTES: u64 = 128 * 1024 * 1024;
/// Most log files of one archive previewed; the rest are only in the download.
pub const MAX_FILES: usize = 16;
/// Longest line kept, characters; a longer line is cut there.
pub const MAX_LINE_CHARS: usize = 400;
/// Bytes of a line kept while reading (room for [`MAX_LINE_CHARS`] characters of UTF-8).
pub const MAX_LINE_BYTES: usize = MAX_LINE_CHARS * 4;
/// Read buffer per log, bytes.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// The tail of one log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTail {
    /// Path in the archive (`<pod>/<container>.log`).
    pub path: String,
    /// Last lines, oldest first.
    pub lines: Vec<String>,
    /// True when earlier lines were left out.
    pub truncated: bool,
}

/// Most bytes of live output read per container for the job page's live tail (its last
/// segments); the tail shows the last lines of them.
pub const LIVE_TAIL_BYTES: u64 = 64 * 1024;

/// The live tail of a running job: per container (in shipping order of their first segment),
/// the last lines of its last segments, or an empty list when nothing was shipped yet.
pub async fn live_tails(blobs: &dyn BlobStore, job_id: &JobId) -> Vec<LogTail> {
    use tuneplane_core::live::{Manifest, manifest_key};
    let manifest = match blobs.get(&manifest_key(job_id)).await {
        Ok(Some(bytes)) => Manifest::read_or_empty(job_id, &bytes),
        _ => return Vec::new(),
    };
    let mut order: Vec<(String, String)> = Vec::new();
    for s in &manifest.segments {
        let key = (s.pod.clone(), s.container.clone());
        if !order.contains(&key) {
            order.push(key);
        }
    }
    let mut out = Vec::new();
    for (pod, container) in order {
        // The container's last segments, newest first, up to the byte budget.
        let mut picked = Vec::new();
        let mut size = 0;
        for s in manifest
            .segments
            .iter()
            .rev()
            .filter(|s| s.pod == pod && s.container == container)
        {
            if size > 0 && size + s.bytes > LIVE_TAIL_BYTES {
                break;
            }
            size += s.bytes;
            picked.push(s);
        }
        let earlier = picked.last().is_some_and(|s| s.offset > 0);
        let mut text = Vec::new();
        for s in picked.iter().rev() {
            if let Ok(Some(bytes)) = blobs.get(&s.key).await {
                text.extend_from_slice(&bytes);
            }
        }
        let Ok((lines, total)) = tail_lines(text.as_slice()) else {
            continue;
        };
        out.push(LogTail {
            path: format!("{pod}/{container}"),
            truncated: earlier || total > lines.len(),
            lines,
        });
    }
    out
}

/// The preview of the archive at `key`, or `None` when absent, too big or unreadable.
pub async fn preview_blob(blobs: &dyn BlobStore, key: &str) -> Option<Vec<LogTail>> {
    let meta = blobs.head(key).await.ok()??;
    if meta.size > MAX_ARCHIVE_BYTES {
        return None;
    }
    let bytes = blobs.get(key).await.ok()??;
    match preview(&bytes) {
        Ok(tails) => Some(tails),
        Err(e) => {
            tracing::info!(key, error = %e, "log archive preview failed");
            None
        }
    }
}

/// Tails of every log in a `.tar.gz` (the index and empty files left out); the submitter's and
/// main containers' logs first, init containers last.
pub fn preview(tar_gz: &[u8]) -> std::io::Result<Vec<LogTail>> {
    let gz = flate2::read::GzDecoder::new(tar_gz).take(MAX_UNPACKED_BYTES);
    let mut archive = tar::Archive::new(gz);
    let mut out = Vec::new();
    for entry in archive.entries()? {
        let entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        if path == "index.json" || !entry.header().entry_type().is_file() {
            continue;
        }
        let (lines, total) = tail_lines(entry)?;
        if total > 0 {
            out.push(LogTail {
                path,
                truncated: total > TAIL_LINES,
                lines,
            });
        }
        if out.len() >= MAX_FILES {
            break;
        }
    }
    out.sort_by_key(|t| {
        (
            t.path.contains("init") as u8,
            !t.path.contains("submitter") as u8,
        )
    });
    Ok(out)
}

/// The last [`TAIL_LINES`] lines of `reader` (each cut to [`MAX_LINE_CHARS`]) and the number of
/// lines, with a trailing line that has no newline counted like `BufRead::split` does.
pub fn tail_lines(mut reader: impl Read) -> std::io::Result<(Vec<String>, usize)> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let mut ring: VecDeque<Vec<u8>> = VecDeque::with_capacity(TAIL_LINES + 1);
    let mut current: Vec<u8> = Vec::with_capacity(MAX_LINE_BYTES);
    // True once any byte of the current line was read (a last line without newline counts).
    let mut open = false;
    let mut total = 0usize;
    let mut finish = |current: &mut Vec<u8>, ring: &mut VecDeque<Vec<u8>>| {
        total = total.saturating_add(1);
        // Reuse the oldest line's allocation once the ring is full.
        let mut next = if ring.len() == TAIL_LINES {
            ring.pop_front().unwrap_or_default()
        } else {
            Vec::with_capacity(MAX_LINE_BYTES)
        };
        next.clear();
        std::mem::swap(current, &mut next);
        ring.push_back(next);
    };
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for piece in buf[..n].split_inclusive(|b| *b == b'\n') {
            let (content, ends) = match piece.split_last() {
                Some((b'\n', rest)) => (rest, true),
                _ => (piece, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(current.len());
            current.extend_from_slice(&content[..content.len().min(room)]);
            open |= !content.is_empty();
            if ends {
                finish(&mut current, &mut ring);
                open = false;
            }
        }
    }
    if open {
        finish(&mut current, &mut ring);
    }
    let lines = ring
        .iter()
        .map(|l| {
            String::from_utf8_lossy(l)
                .chars()
                .take(MAX_LINE_CHARS)
                .collect()
        })
        .collect();
    Ok((lines, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(files: &[(&str, String)]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, path, data.as_bytes()).unwrap();
        }
        b.into_inner().and_then(|g| g.finish()).unwrap()
    }

    #[test]
    fn preview_keeps_the_last_lines_of_each_log_and_skips_the_index() {
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let bytes = archive(&[
            ("index.json", "{}".into()),
            ("pod-a/init.log", "fetching\n".into()),
            ("pod-a/main.log", long),
        ]);
        let tails = preview(&bytes).unwrap();
        assert_eq!(tails.len(), 2);
        assert_eq!(tails[0].path, "pod-a/main.log");
        assert!(tails[0].truncated);
        assert_eq!(tails[0].lines.len(), TAIL_LINES);
        assert_eq!(tails[0].lines.last().map(String::as_str), Some("line 99"));
        assert_eq!(tails[1].lines, vec!["fetching".to_string()]);
    }

    #[test]
    fn tails_count_lines_like_split_and_cut_long_lines() {
        let cases: [(&[u8], usize, &[&str]); 5] = [
            (b"", 0, &[]),
            (b"a\nb\n", 2, &["a", "b"]),
            (b"a\nb", 2, &["a", "b"]),
            (b"a\n\nb\n", 3, &["a", "", "b"]),
            (b"\n", 1, &[""]),
        ];
        for (input, total, lines) in cases {
            let (got, n) = tail_lines(input).unwrap();
            assert_eq!((got.as_slice(), n), (lines_of(lines).as_slice(), total));
        }
        let long = format!("{}\nend", "é".repeat(10_000));
        let (got, n) = tail_lines(long.as_bytes()).unwrap();
        assert_eq!(n, 2);
        assert_eq!(got[0].chars().count(), MAX_LINE_CHARS);
        assert_eq!(got[1], "end");
    }

    fn lines_of(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(preview(b"not a gzip").is_err());
    }
}
