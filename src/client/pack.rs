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
        if progress && (tty || i + 1 == files.len()) {
            let pct = (done * 100).checked_div(total).unwrap_or(100);
            eprint!(
                "\rpacking {}/{} files, {} ({pct}%)   ",
                i + 1,
                files.len(),
                crate::cmd::capsule::human_bytes(done)
            );
            let _ = std::io::stderr().flush();
        }
    }
    if progress {
        eprintln!();
    }
    Ok(zip.finish()?.0)
}

fn crc32(data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(data);
    h.finalize()
}
