//! Generators of hostile archives, written byte by byte so that no library "fixes" them on the way.

#![allow(dead_code)]

use tuneplane_core::capsule::zipw::{ZipWriter, compressor};

/// One tar entry with a raw name.
pub struct TarEntry {
    /// Raw name bytes (may be absolute, contain `..` or be invalid UTF-8).
    pub name: Vec<u8>,
    /// Entry type.
    pub kind: tar::EntryType,
    /// File content.
    pub data: Vec<u8>,
    /// Link target for links.
    pub link: Vec<u8>,
    /// Mode bits.
    pub mode: u32,
}

impl TarEntry {
    /// A regular file.
    pub fn file(name: &str, data: &[u8]) -> Self {
        Self {
            name: name.as_bytes().to_vec(),
            kind: tar::EntryType::Regular,
            data: data.to_vec(),
            link: vec![],
            mode: 0o644,
        }
    }
    /// A folder.
    pub fn dir(name: &str) -> Self {
        Self {
            kind: tar::EntryType::Directory,
            mode: 0o755,
            ..Self::file(name, b"")
        }
    }
    /// A symlink or hard link.
    pub fn link(kind: tar::EntryType, name: &str, target: &str) -> Self {
        Self {
            kind,
            link: target.as_bytes().to_vec(),
            ..Self::file(name, b"")
        }
    }
    /// A device or FIFO.
    pub fn special(kind: tar::EntryType, name: &str) -> Self {
        Self {
            kind,
            ..Self::file(name, b"")
        }
    }
}

/// A ustar archive of `entries`, names written raw into the header.
pub fn tar_archive(entries: &[TarEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut h = tar::Header::new_ustar();
        {
            let old = h.as_old_mut();
            old.name = [0; 100];
            old.name[..e.name.len()].copy_from_slice(&e.name);
            old.linkname[..e.link.len()].copy_from_slice(&e.link);
        }
        h.set_size(e.data.len() as u64);
        h.set_entry_type(e.kind);
        h.set_mode(e.mode);
        h.set_mtime(0);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// A zip with arbitrary (even duplicate) names.
pub fn zip_raw(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut z = ZipWriter::new(Vec::new());
    let mut c = compressor();
    for (name, data) in entries {
        z.add_bytes(name, 0o644, data, &mut c).unwrap();
    }
    z.finish().unwrap().0
}
