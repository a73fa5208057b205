//! Packing code for submission: a directory becomes a zip (checked locally first, with progress);
//! an archive file is sent as it is. The server builds the capsule from it.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use anyhow::Context;
use tuneplane_core::capsule::zipw::{
    DEFLATED, EntryEnd, STORED, ZipWriter, compressor, deflate_chunk,
};
use tuneplane_core::capsule::{ArchiveKind, Limits, walk_dir};

/// Reads `source` into an archive the API accepts, reporting progress on stderr.
pub fn pack(source: &Path) -> anyhow::Result<Vec<u8>> {
    pack_with(source, true)
}

/// Like [`pack`], without progress output.
pub fn pack_quiet(source: &Path) -> anyhow::Result<Vec<u8>> {
    pack_with(source, false)
}

fn pack_with(source: &Path, progress: bool) -> anyhow::Result<Vec<u8>> {
    let meta =
        std::fs::metadata(source).with_context(|| format!("cannot read {}", source.display()))?;
    if !meta.is_dir() {
        ArchiveKind::sniff(source)?;
        return std::fs::read(source).with_context(|| format!("cannot read {}", source.display()));
    }
    let files = walk_dir(source, &Limits::default())?;
    let total: u64 = files.iter().map(|f| f.size).sum();
    let tty = std::io::stderr().is_terminal();
    let mut zip = ZipWriter::new(Vec::new());
    let mut c = compressor();
    let mut done = 0u64;
    for (i, f) in files.iter().enumerate() {
        let mut data = Vec::with_capacity(f.size as usize);
        std::fs::File::open(&f.abs)
            .and_then(|mut h| h.read_to_end(&mut data))
            .with_context(|| format!("cannot read {}", f.abs.display()))?;
        let deflated = deflate_chunk(&mut c, &data, true);
        let (method, body) = if deflated.len() < data.len() {
            (DEFLATED, &deflated)
        } else {
            (STORED, &data)
        };
        zip.begin(&f.path, method, f.mode)?;
        zip.write_data(body)?;
        zip.end(EntryEnd {
            crc: crc32(&data),
            compressed: body.len() as u64,
            size: data.len() as u64,
        })?;
        done += f.size;
        if progress && let Some(line) = progress_line(i + 1, files.len(), done, total, tty) {
            eprint!("{line}");
            let _ = std::io::stderr().flush();
        }
    }
    if progress && tty {
        eprintln!();
    }
    Ok(zip.finish()?.0)
}

/// What packing prints after `files_done` of `files` (`bytes_done` of `bytes_total`): on a
/// terminal a line rewritten in place (`\r`); elsewhere (a log, a pipe) one plain line at the end.
fn progress_line(
    files_done: usize,
    files: usize,
    bytes_done: u64,
    bytes_total: u64,
    tty: bool,
) -> Option<String> {
    let size = human_bytes(bytes_done);
    if tty {
        let pct = (bytes_done * 100).checked_div(bytes_total).unwrap_or(100);
        Some(format!(
            "\rpacking {files_done}/{files} files, {size} ({pct}%)   "
        ))
    } else if files_done == files {
        Some(format!("packed {files} files, {size}\n"))
    } else {
        None
    }
}

fn crc32(data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(data);
    h.finalize()
}

/// `1.5 MiB`-style sizes.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::progress_line;

    #[test]
    fn progress_rewrites_a_terminal_line_and_prints_one_plain_line_elsewhere() {
        let tty = progress_line(1, 3, 512, 1024, true).unwrap_or_default();
        assert!(
            tty.starts_with("\rpacking 1/3 files") && tty.contains("(50%)"),
            "{tty:?}"
        );
        assert_eq!(progress_line(1, 3, 512, 1024, false), None);
        let done = progress_line(3, 3, 1024, 1024, false).unwrap_or_default();
        assert!(
            done.starts_with("packed 3 files, ") && done.ends_with('\n'),
            "{done:?}"
        );
        assert!(!done.contains('\r'));
    }
}
