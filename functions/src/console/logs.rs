//! The log preview: the last lines of every container log in a job's archive
//! (`logs/<job id>/logs.tar.gz`, written by the reconciler), read with bounded memory.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};

use tuneplane_core::store::BlobStore;

/// Lines kept per log.
pub const TAIL_LINES: usize = 40;
/// Largest archive previewed, bytes (bigger ones are download-only).
pub const MAX_ARCHIVE_BYTES: u64 = 32 * 1024 * 1024;
/// Most uncompressed bytes read while previewing.
pub const MAX_UNPACKED_BYTES: u64 = 128 * 1024 * 1024;
/// Most logs previewed.
pub const MAX_FILES: usize = 16;
/// Longest line kept, characters.
const MAX_LINE_CHARS: usize = 400;

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
        let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES + 1);
        let mut total = 0usize;
        for line in BufReader::new(entry).split(b'\n') {
            let line = line?;
            total += 1;
            let text: String = String::from_utf8_lossy(&line)
                .chars()
                .take(MAX_LINE_CHARS)
                .collect();
            tail.push_back(text);
            if tail.len() > TAIL_LINES {
                tail.pop_front();
            }
        }
        if total > 0 {
            out.push(LogTail {
                path,
                truncated: total > TAIL_LINES,
                lines: tail.into(),
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
            b.append_data(&mut h, path, data.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        b.into_inner()
            .and_then(|g| g.finish())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn preview_keeps_the_last_lines_of_each_log_and_skips_the_index() {
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let bytes = archive(&[
            ("index.json", "{}".into()),
            ("pod-a/init.log", "fetching\n".into()),
            ("pod-a/main.log", long),
        ]);
        let tails = preview(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tails.len(), 2);
        assert_eq!(tails[0].path, "pod-a/main.log");
        assert!(tails[0].truncated);
        assert_eq!(tails[0].lines.len(), TAIL_LINES);
        assert_eq!(tails[0].lines.last().map(String::as_str), Some("line 99"));
        assert_eq!(tails[1].lines, vec!["fetching".to_string()]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(preview(b"not a gzip").is_err());
    }
}
