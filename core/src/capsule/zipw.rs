//! A deterministic zip writer: fixed timestamps and modes, no extra fields, one compression setting.
//!
//! Entries are streamed: each local header carries the "data descriptor follows" flag so CRC and
//! sizes are written after the data, and no entry is ever buffered whole. The central directory is
//! written sorted by path, so listings are in path order whatever order the data was written in.
//! Every byte written passes through a SHA-256 hasher: the archive's digest costs no second pass.

use std::io::{self, Write};

use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
};
use sha2::{Digest, Sha256};

/// Zip method: stored.
pub const STORED: u16 = 0;
/// Zip method: deflate.
pub const DEFLATED: u16 = 8;
/// The one deflate level used for every capsule.
pub const DEFLATE_LEVEL: u8 = 6;
/// DOS date of 1980-01-01 (the earliest a zip can hold), time 00:00:00.
const DOS_DATE: u16 = (1 << 5) | 1;
const DOS_TIME: u16 = 0;
/// General purpose flags: bit 3 (data descriptor), bit 11 (UTF-8 names).
const FLAGS: u16 = 0x0008 | 0x0800;
/// "Made by" Unix, spec version 2.0, so readers honour the mode in the external attributes.
const MADE_BY: u16 = (3 << 8) | 20;
const NEEDED: u16 = 20;
/// Zip32 limits; capsules stay below them (sizes are capped well under 4 GiB).
const MAX_ENTRIES: usize = 65_535;

/// Deflates one chunk as raw deflate. Chunks that are not last end with a sync flush, so
/// independently compressed chunks concatenate into one valid stream (each chunk starts fresh,
/// which is what lets chunks of one file compress in parallel).
pub fn deflate_chunk(c: &mut CompressorOxide, input: &[u8], last: bool) -> Vec<u8> {
    c.reset();
    let flush = if last {
        TDEFLFlush::Finish
    } else {
        TDEFLFlush::Sync
    };
    let mut out = Vec::with_capacity(input.len() / 2 + 64);
    let mut buf = vec![0u8; 256 * 1024];
    let mut rest = input;
    loop {
        let (status, read, written) = compress(c, rest, &mut buf, flush);
        rest = &rest[read..];
        out.extend_from_slice(&buf[..written]);
        match status {
            TDEFLStatus::Done => break,
            TDEFLStatus::Okay if rest.is_empty() && written < buf.len() && !last => break,
            TDEFLStatus::Okay => continue,
            // Only reachable on misuse of the compressor; a fresh reset above rules that out.
            TDEFLStatus::BadParam | TDEFLStatus::PutBufFailed => break,
        }
    }
    out
}

/// A new compressor with the capsule's settings.
pub fn compressor() -> Box<CompressorOxide> {
    Box::new(CompressorOxide::new(create_comp_flags_from_zip_params(
        i32::from(DEFLATE_LEVEL),
        -15,
        0,
    )))
}

/// Counts and hashes everything written to the inner writer.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Central {
    name: String,
    method: u16,
    crc: u32,
    compressed: u32,
    size: u32,
    mode: u32,
    offset: u32,
}

/// Totals of one finished entry.
#[derive(Debug, Clone, Copy)]
pub struct EntryEnd {
    /// CRC-32 of the uncompressed data.
    pub crc: u32,
    /// Bytes of (possibly compressed) data written.
    pub compressed: u64,
    /// Uncompressed bytes.
    pub size: u64,
}

/// The finished archive.
#[derive(Debug, Clone)]
pub struct Finished {
    /// SHA-256 of every byte of the archive.
    pub sha256: [u8; 32],
    /// Archive size in bytes.
    pub size: u64,
    /// Number of entries.
    pub entries: usize,
}

/// Streaming deterministic zip writer.
pub struct ZipWriter<W: Write> {
    out: Hashing<W>,
    central: Vec<Central>,
    open: Option<(String, u16, u32, u64)>,
}

fn too_big(what: &str) -> io::Error {
    io::Error::other(format!("{what} exceeds the zip32 limits of a capsule"))
}

fn u32_of(n: u64, what: &str) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| too_big(what))
}

impl<W: Write> ZipWriter<W> {
    /// Starts an archive on `out`.
    pub fn new(out: W) -> Self {
        Self {
            out: Hashing {
                inner: out,
                hasher: Sha256::new(),
                written: 0,
            },
            central: Vec::new(),
            open: None,
        }
    }

    /// Writes the local header of a new entry; data follows through [`Self::write_data`].
    pub fn begin(&mut self, name: &str, method: u16, mode: u32) -> io::Result<()> {
        if self.central.len() >= MAX_ENTRIES {
            return Err(too_big("entry count"));
        }
        let offset = self.out.written;
        let mut h = Vec::with_capacity(30 + name.len());
        h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        h.extend_from_slice(&NEEDED.to_le_bytes());
        h.extend_from_slice(&FLAGS.to_le_bytes());
        h.extend_from_slice(&method.to_le_bytes());
        h.extend_from_slice(&DOS_TIME.to_le_bytes());
        h.extend_from_slice(&DOS_DATE.to_le_bytes());
        h.extend_from_slice(&[0u8; 12]); // crc, compressed, size: in the data descriptor
        h.extend_from_slice(
            &u16::try_from(name.len())
                .map_err(|_| too_big("entry name"))?
                .to_le_bytes(),
        );
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        self.out.write_all(&h)?;
        self.open = Some((name.to_string(), method, mode, offset));
        Ok(())
    }

    /// Writes entry data (already compressed if the entry is deflated).
    pub fn write_data(&mut self, data: &[u8]) -> io::Result<()> {
        self.out.write_all(data)
    }

    /// Ends the open entry with its data descriptor.
    pub fn end(&mut self, e: EntryEnd) -> io::Result<()> {
        let Some((name, method, mode, offset)) = self.open.take() else {
            return Err(io::Error::other("zip entry ended twice"));
        };
        let (compressed, size) = (u32_of(e.compressed, &name)?, u32_of(e.size, &name)?);
        let mut d = Vec::with_capacity(16);
        d.extend_from_slice(&0x0807_4b50u32.to_le_bytes());
        d.extend_from_slice(&e.crc.to_le_bytes());
        d.extend_from_slice(&compressed.to_le_bytes());
        d.extend_from_slice(&size.to_le_bytes());
        self.out.write_all(&d)?;
        self.central.push(Central {
            name,
            method,
            crc: e.crc,
            compressed,
            size,
            mode,
            offset: u32_of(offset, "archive")?,
        });
        Ok(())
    }

    /// Adds a small in-memory entry, deflated unless deflate does not make it smaller.
    pub fn add_bytes(
        &mut self,
        name: &str,
        mode: u32,
        data: &[u8],
        c: &mut CompressorOxide,
    ) -> io::Result<()> {
        let deflated = deflate_chunk(c, data, true);
        let (method, body) = if deflated.len() < data.len() {
            (DEFLATED, &deflated[..])
        } else {
            (STORED, data)
        };
        self.begin(name, method, mode)?;
        self.write_data(body)?;
        self.end(EntryEnd {
            crc: crc32fast::hash(data),
            compressed: body.len() as u64,
            size: data.len() as u64,
        })
    }

    /// Writes the central directory (sorted by path) and the end record.
    pub fn finish(mut self) -> io::Result<(W, Finished)> {
        self.central.sort_by(|a, b| a.name.cmp(&b.name));
        let cd_start = u32_of(self.out.written, "archive")?;
        for c in &self.central {
            let mut h = Vec::with_capacity(46 + c.name.len());
            h.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            h.extend_from_slice(&MADE_BY.to_le_bytes());
            h.extend_from_slice(&NEEDED.to_le_bytes());
            h.extend_from_slice(&FLAGS.to_le_bytes());
            h.extend_from_slice(&c.method.to_le_bytes());
            h.extend_from_slice(&DOS_TIME.to_le_bytes());
            h.extend_from_slice(&DOS_DATE.to_le_bytes());
            h.extend_from_slice(&c.crc.to_le_bytes());
            h.extend_from_slice(&c.compressed.to_le_bytes());
            h.extend_from_slice(&c.size.to_le_bytes());
            h.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
            h.extend_from_slice(&[0u8; 8]); // extra len, comment len, disk, internal attributes
            h.extend_from_slice(&((0o100_000 | c.mode) << 16).to_le_bytes());
            h.extend_from_slice(&c.offset.to_le_bytes());
            h.extend_from_slice(c.name.as_bytes());
            self.out.write_all(&h)?;
        }
        let cd_size = u32_of(self.out.written - u64::from(cd_start), "central directory")?;
        let n = self.central.len() as u16;
        let mut e = Vec::with_capacity(22);
        e.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        e.extend_from_slice(&[0u8; 4]); // disk numbers
        e.extend_from_slice(&n.to_le_bytes());
        e.extend_from_slice(&n.to_le_bytes());
        e.extend_from_slice(&cd_size.to_le_bytes());
        e.extend_from_slice(&cd_start.to_le_bytes());
        e.extend_from_slice(&0u16.to_le_bytes());
        self.out.write_all(&e)?;
        self.out.flush()?;
        let Hashing {
            inner,
            hasher,
            written,
        } = self.out;
        Ok((
            inner,
            Finished {
                sha256: hasher.finalize().into(),
                size: written,
                entries: self.central.len(),
            },
        ))
    }
}
