//! Safe unpacking of user archives (tar, tar.gz, zip) into a private staging folder.
//!
//! Entries are read one at a time and refused, naming the entry, on absolute paths, `..`, symlinks,
//! hard links, devices, FIFOs, duplicates (also by case), bad names, the reserved folder, too many
//! entries, too many bytes or a suspicious compression ratio. Only regular files and folders are
//! ever created, with fixed modes, so nothing in the staging folder can point outside it.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::rc::Rc;

use super::paths::{PathSet, clean_path};
use super::source::normal_mode;
use super::{CapsuleError, Limits, Result};

/// Kinds of archive accepted for user code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    /// Plain tar.
    Tar,
    /// Gzip-compressed tar.
    TarGz,
    /// A zip archive (detected by its `PK` signature).
    Zip,
}

impl ArchiveKind {
    /// Recognises an archive by its first bytes.
    pub fn from_magic(head: &[u8]) -> Option<Self> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Self::TarGz)
        } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Self::Zip)
        } else if head.get(257..262) == Some(b"ustar") {
            Some(Self::Tar)
        } else {
            None
        }
    }

    /// Recognises the archive in a file.
    pub fn sniff(path: &Path) -> Result<Self> {
        let mut head = Vec::with_capacity(512);
        File::open(path)
            .and_then(|f| f.take(512).read_to_end(&mut head))
            .map_err(|e| CapsuleError::io(path, e))?;
        Self::from_magic(&head).ok_or_else(|| {
            CapsuleError::RejectedSource(format!(
                "{} is not a directory, tar, tar.gz or zip archive",
                path.display()
            ))
        })
    }
}

/// Unpacks `reader` into the empty folder `dest`, enforcing every rule and limit.
pub fn stage_archive<R: Read + Seek>(
    reader: R,
    kind: ArchiveKind,
    dest: &Path,
    limits: &Limits,
) -> Result<()> {
    let mut st = Stager {
        dest,
        limits,
        names: PathSet::default(),
        entries: 0,
        total: 0,
        files: 0,
    };
    match kind {
        ArchiveKind::Zip => st.zip(reader)?,
        ArchiveKind::Tar | ArchiveKind::TarGz => {
            let packed = Rc::new(Cell::new(0u64));
            let counting = Counting {
                inner: reader,
                count: Rc::clone(&packed),
            };
            if kind == ArchiveKind::TarGz {
                st.tar(flate2::read::GzDecoder::new(counting), Some(&packed))?;
            } else {
                st.tar(counting, None)?;
            }
        }
    }
    if st.files == 0 {
        return Err(CapsuleError::RejectedSource(
            "the archive has no files; a capsule needs at least one file (e.g. the script the entrypoint runs)".into(),
        ));
    }
    Ok(())
}

/// Counts bytes read from the compressed stream, for the ratio check.
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

struct Stager<'a> {
    dest: &'a Path,
    limits: &'a Limits,
    names: PathSet,
    entries: usize,
    total: u64,
    files: usize,
}

fn unreadable(what: &str, e: impl std::fmt::Display) -> CapsuleError {
    CapsuleError::RejectedSource(format!("the {what} archive is truncated or corrupt: {e}"))
}

impl Stager<'_> {
    fn count_entry(&mut self) -> Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(CapsuleError::RejectedSource(format!(
                "more than {} entries; package fewer files (e.g. leave data sets out of the code)",
                self.limits.max_entries
            )));
        }
        Ok(())
    }

    fn tar<R: Read>(&mut self, reader: R, packed: Option<&Rc<Cell<u64>>>) -> Result<()> {
        let mut archive = tar::Archive::new(reader);
        let entries = archive.entries().map_err(|e| unreadable("tar", e))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| unreadable("tar", e))?;
            self.count_entry()?;
            let raw = entry.path_bytes().into_owned();
            let shown = String::from_utf8_lossy(&raw).into_owned();
            let reject = |reason: &str| CapsuleError::rejected(&shown, reason);
            use tar::EntryType as T;
            let kind = entry.header().entry_type();
            match kind {
                T::XGlobalHeader => continue, // pax comment block (e.g. from `git archive`): no file
                T::Symlink => {
                    return Err(reject(
                        "symbolic links are not allowed; put the file itself in the archive",
                    ));
                }
                T::Link => {
                    return Err(reject(
                        "hard links are not allowed; put the file itself in the archive",
                    ));
                }
                T::Char | T::Block => return Err(reject("device files are not allowed")),
                T::Fifo => return Err(reject("FIFOs are not allowed")),
                T::Regular | T::Continuous | T::Directory => {}
                other => {
                    return Err(reject(&format!(
                        "unsupported entry type {:?}",
                        other.as_byte() as char
                    )));
                }
            }
            let path = clean_path(&raw).map_err(|r| reject(&r))?;
            if kind == T::Directory {
                self.names.add_dir(&path).map_err(|r| reject(&r))?;
                continue;
            }
            self.names.add_file(&path).map_err(|r| reject(&r))?;
            let mode = entry.header().mode().map_err(|e| unreadable("tar", e))?;
            let declared = entry.header().size().map_err(|e| unreadable("tar", e))?;
            self.write_file(
                &path,
                &shown,
                normal_mode(mode),
                &mut entry,
                declared,
                packed.map(|p| &**p),
            )?;
        }
        Ok(())
    }

    fn zip<R: Read + Seek>(&mut self, mut reader: R) -> Result<()> {
        // The zip reader keeps one entry per name; an archive that lists a name twice would be
        // unpacked differently by different tools, so find such names in the raw directory first.
        if let Some(dup) = duplicate_in_central_directory(&mut reader)? {
            return Err(CapsuleError::rejected(
                dup,
                "duplicate entry; each path may appear only once",
            ));
        }
        let mut archive = zip::ZipArchive::new(reader).map_err(|e| unreadable("zip", e))?;
        if archive.len() > self.limits.max_entries {
            return Err(CapsuleError::RejectedSource(format!(
                "the archive has {} entries; at most {} are allowed",
                archive.len(),
                self.limits.max_entries
            )));
        }
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).map_err(|e| unreadable("zip", e))?;
            self.count_entry()?;
            let raw = entry.name_raw().to_vec();
            let shown = String::from_utf8_lossy(&raw).into_owned();
            let reject = |reason: &str| CapsuleError::rejected(&shown, reason);
            let mode =
                entry
                    .unix_mode()
                    .unwrap_or(if entry.is_dir() { 0o040_755 } else { 0o100_644 });
            match mode & 0o170_000 {
                0o120_000 => {
                    return Err(reject(
                        "symbolic links are not allowed; put the file itself in the archive",
                    ));
                }
                0o020_000 | 0o060_000 => return Err(reject("device files are not allowed")),
                0o010_000 => return Err(reject("FIFOs are not allowed")),
                0o140_000 => return Err(reject("sockets are not allowed")),
                _ => {}
            }
            let path = clean_path(&raw).map_err(|r| reject(&r))?;
            if entry.is_dir() {
                self.names.add_dir(&path).map_err(|r| reject(&r))?;
                continue;
            }
            self.names.add_file(&path).map_err(|r| reject(&r))?;
            let (declared, packed) = (entry.size(), entry.compressed_size());
            self.check_ratio(&shown, declared, packed)?;
            self.write_file(&path, &shown, normal_mode(mode), &mut entry, declared, None)?;
        }
        Ok(())
    }

    fn check_ratio(&self, shown: &str, unpacked: u64, packed: u64) -> Result<()> {
        if unpacked > self.limits.ratio_floor_bytes
            && unpacked > self.limits.max_ratio.saturating_mul(packed.max(1))
        {
            return Err(CapsuleError::rejected(
                shown,
                format!(
                    "suspicious compression ratio ({unpacked} bytes from {packed}; limit {}:1); this looks like a compression bomb",
                    self.limits.max_ratio
                ),
            ));
        }
        Ok(())
    }

    /// Copies one entry's data into the staging folder, checking the limits as bytes arrive.
    fn write_file(
        &mut self,
        path: &str,
        shown: &str,
        mode: u32,
        data: &mut dyn Read,
        declared: u64,
        packed: Option<&Cell<u64>>,
    ) -> Result<()> {
        if self.total.saturating_add(declared) > self.limits.max_total_bytes {
            return Err(self.too_big());
        }
        let target = self.dest.join(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| CapsuleError::io(parent, e))?;
        }
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&target)
            .map_err(|e| CapsuleError::io(&target, e))?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        loop {
            let n = data
                .read(&mut buf)
                .map_err(|e| unreadable("code", format!("{shown}: {e}")))?;
            if n == 0 {
                break;
            }
            written += n as u64;
            self.total += n as u64;
            if written > declared {
                return Err(CapsuleError::rejected(
                    shown,
                    "entry holds more data than its header declares",
                ));
            }
            if self.total > self.limits.max_total_bytes {
                return Err(self.too_big());
            }
            if let Some(p) = packed {
                self.check_ratio(shown, self.total, p.get())?;
            }
            std::io::Write::write_all(&mut out, &buf[..n])
                .map_err(|e| CapsuleError::io(&target, e))?;
        }
        if written != declared {
            return Err(CapsuleError::rejected(shown, "entry is truncated"));
        }
        self.files += 1;
        Ok(())
    }

    fn too_big(&self) -> CapsuleError {
        CapsuleError::RejectedSource(format!(
            "more than {} bytes of code once unpacked; keep data sets out of the code and load them at run time",
            self.limits.max_total_bytes
        ))
    }
}

/// Scans the zip's central directory for a name listed twice. Returns the name, if any.
fn duplicate_in_central_directory<R: Read + Seek>(reader: &mut R) -> Result<Option<String>> {
    use std::io::SeekFrom;
    let bad = |e: std::io::Error| unreadable("zip", e);
    let len = reader.seek(SeekFrom::End(0)).map_err(bad)?;
    let tail_len = len.min(22 + 65_535);
    reader.seek(SeekFrom::Start(len - tail_len)).map_err(bad)?;
    let mut tail = vec![0u8; tail_len as usize];
    reader.read_exact(&mut tail).map_err(bad)?;
    let Some(eocd) = tail.windows(4).rposition(|w| w == b"PK\x05\x06") else {
        return Ok(None); // not our concern here: the zip reader reports the damage
    };
    let field = |at: usize, n: usize| -> u64 {
        tail.get(eocd + at..eocd + at + n).map_or(0, |b| {
            b.iter()
                .rev()
                .fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
        })
    };
    let (cd_size, cd_offset) = (field(12, 4), field(16, 4));
    if cd_size == 0xFFFF_FFFF
        || cd_offset == 0xFFFF_FFFF
        || cd_size > 64 << 20
        || cd_offset + cd_size > len
    {
        return Ok(None); // zip64 or damaged: left to the zip reader
    }
    reader.seek(SeekFrom::Start(cd_offset)).map_err(bad)?;
    let mut cd = vec![0u8; cd_size as usize];
    reader.read_exact(&mut cd).map_err(bad)?;
    reader.seek(SeekFrom::Start(0)).map_err(bad)?;
    let mut seen = std::collections::HashSet::new();
    let mut at = 0usize;
    while at + 46 <= cd.len() && cd[at..at + 4] == *b"PK\x01\x02" {
        let u16_at = |o: usize| usize::from(u16::from_le_bytes([cd[at + o], cd[at + o + 1]]));
        let (n, m, k) = (u16_at(28), u16_at(30), u16_at(32));
        let Some(name) = cd.get(at + 46..at + 46 + n) else {
            break;
        };
        if !seen.insert(name.to_vec()) {
            return Ok(Some(String::from_utf8_lossy(name).into_owned()));
        }
        at += 46 + n + m + k;
    }
    Ok(None)
}
