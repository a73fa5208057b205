//! Building a capsule in one pass over the data, compressing in parallel with bounded memory.
//!
//! Three roles run at once: a reader walks the files in order and cuts them into 1 MiB chunks;
//! workers deflate chunks (each chunk on its own, ending in a sync flush, so a big file uses every
//! core); the calling thread writes results strictly in order, hashing each file for the manifest
//! and the whole archive for its identity as it goes. At most [`IN_FLIGHT`] chunks exist at any
//! time, so memory stays flat whatever the size of the code. The bytes produced do not depend on the
//! number of threads.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::manifest::{FORMAT_VERSION, Manifest, ManifestFile};
use super::source::walk_dir;
use super::zipw::{self, DEFLATED, EntryEnd, STORED, ZipWriter};
use super::{
    CapsuleError, JOBSPEC_PATH, Limits, MANIFEST_PATH, RUNNER_PATH, Result, SourceFile, ingest,
    runner,
};
use crate::spec::JobSpec;

/// Chunk size for reading and parallel compression.
const CHUNK: usize = 1 << 20;
/// Chunks alive at once (read, compressing or waiting to be written).
const IN_FLIGHT: usize = 8;
/// Bytes test-compressed to decide whether a large file is worth deflating.
const SAMPLE: usize = 64 * 1024;

/// A finished capsule.
#[derive(Debug, Clone)]
pub struct Built {
    /// Lower-case hex SHA-256 of the zip: the capsule's identity.
    pub sha256: String,
    /// Size of the zip in bytes.
    pub size: u64,
    /// The manifest written into the capsule.
    pub manifest: Manifest,
}

/// Builds a capsule from a directory or an archive file (tar, tar.gz or zip) into `out`.
/// Archives are unpacked into a private folder under `scratch` first (removed afterwards).
pub fn build_from_source<W: Write>(
    source: &Path,
    spec: &JobSpec,
    limits: &Limits,
    scratch: &Path,
    out: W,
) -> Result<(W, Built)> {
    let meta = std::fs::metadata(source).map_err(|e| CapsuleError::io(source, e))?;
    if meta.is_dir() {
        let files = walk_dir(source, limits)?;
        return build_capsule(&files, spec, out);
    }
    let staging = tempdir_in(scratch)?;
    let file = File::open(source).map_err(|e| CapsuleError::io(source, e))?;
    let kind = ingest::ArchiveKind::sniff(source)?;
    ingest::stage_archive(file, kind, staging.path(), limits)?;
    let files = walk_dir(staging.path(), limits)?;
    build_capsule(&files, spec, out)
}

/// A folder removed when dropped.
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn tempdir_in(parent: &Path) -> Result<TempDir> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = crate::clock::now_nanos();
    let name = format!(
        ".tuneplane-stage-{}-{nanos}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let path = parent.join(name);
    std::fs::create_dir_all(&path).map_err(|e| CapsuleError::io(&path, e))?;
    Ok(TempDir(path))
}

struct Job {
    data: Vec<u8>,
    last: bool,
    reply: SyncSender<Done>,
}

struct Done {
    raw: Vec<u8>,
    deflated: Option<Vec<u8>>,
}

enum Order {
    Begin { idx: usize, method: u16 },
    Chunk(Receiver<Done>),
    End,
    Failed(CapsuleError),
}

/// Builds a capsule from listed files (sorted by path) into `out`.
pub fn build_capsule<W: Write>(files: &[SourceFile], spec: &JobSpec, out: W) -> Result<(W, Built)> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let (order_tx, order_rx) = sync_channel::<Order>(IN_FLIGHT);
    let (job_tx, job_rx) = sync_channel::<Job>(IN_FLIGHT);
    let job_rx = Arc::new(Mutex::new(job_rx));

    std::thread::scope(|s| {
        for _ in 0..workers {
            let rx = Arc::clone(&job_rx);
            s.spawn(move || worker(&rx));
        }
        s.spawn(move || read_files(files, &order_tx, job_tx));
        write_all(files, spec, out, &order_rx)
    })
}

fn worker(rx: &Mutex<Receiver<Job>>) {
    let mut c = zipw::compressor();
    loop {
        // Hold the lock only to take a job, never while compressing.
        let job = match rx.lock() {
            Ok(guard) => guard.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let deflated = zipw::deflate_chunk(&mut c, &job.data, job.last);
        // The writer may have stopped on an error; then nobody waits for this chunk.
        let _ = job.reply.send(Done {
            raw: job.data,
            deflated: Some(deflated),
        });
    }
}

/// Decides how a file larger than one chunk is stored, from a test compression of its start.
fn worth_deflating(sample: &[u8]) -> bool {
    let mut c = zipw::compressor();
    let deflated = zipw::deflate_chunk(&mut c, sample, true);
    deflated.len() * 100 < sample.len() * 95
}

fn read_files(files: &[SourceFile], orders: &SyncSender<Order>, jobs: SyncSender<Job>) {
    for (idx, f) in files.iter().enumerate() {
        if let Err(e) = read_file(idx, f, orders, &jobs) {
            let _ = orders.send(Order::Failed(e));
            return;
        }
    }
}

/// Returns Ok(()) also when the writer hung up: it has its own error to report.
fn read_file(
    idx: usize,
    f: &SourceFile,
    orders: &SyncSender<Order>,
    jobs: &SyncSender<Job>,
) -> Result<()> {
    let mut file = File::open(&f.abs).map_err(|e| CapsuleError::io(&f.abs, e))?;
    let mut remaining = f.size;
    let mut first = true;
    let mut deflate = f.size > 0;
    if f.size == 0
        && orders
            .send(Order::Begin {
                idx,
                method: STORED,
            })
            .is_err()
    {
        return Ok(());
    }
    while remaining > 0 {
        let len = remaining.min(CHUNK as u64) as usize;
        let mut data = vec![0u8; len];
        file.read_exact(&mut data).map_err(|e| changed(f, e))?;
        remaining -= len as u64;
        let last = remaining == 0;
        if first {
            if f.size > CHUNK as u64 {
                deflate = worth_deflating(&data[..SAMPLE.min(len)]);
            }
            let method = if deflate { DEFLATED } else { STORED };
            if orders.send(Order::Begin { idx, method }).is_err() {
                return Ok(());
            }
            first = false;
        }
        let (tx, rx) = sync_channel(1);
        if deflate {
            if jobs
                .send(Job {
                    data,
                    last,
                    reply: tx,
                })
                .is_err()
            {
                return Ok(());
            }
        } else {
            let _ = tx.send(Done {
                raw: data,
                deflated: None,
            });
        }
        if orders.send(Order::Chunk(rx)).is_err() {
            return Ok(());
        }
    }
    let mut probe = [0u8; 1];
    if file
        .read(&mut probe)
        .map_err(|e| CapsuleError::io(&f.abs, e))?
        != 0
    {
        return Err(changed(f, std::io::Error::other("file grew")));
    }
    let _ = orders.send(Order::End);
    Ok(())
}

fn changed(f: &SourceFile, e: std::io::Error) -> CapsuleError {
    CapsuleError::io(
        &f.abs,
        std::io::Error::other(format!(
            "file changed while the capsule was built ({e}); retry"
        )),
    )
}

/// One entry being written: the header waits for the first chunk so a small file can fall back
/// to being stored when deflate would not shrink it.
struct Open {
    idx: usize,
    method: u16,
    header_written: bool,
    crc: crc32fast::Hasher,
    sha: Sha256,
    size: u64,
    compressed: u64,
}

fn write_all<W: Write>(
    files: &[SourceFile],
    spec: &JobSpec,
    out: W,
    orders: &Receiver<Order>,
) -> Result<(W, Built)> {
    let io = |e| CapsuleError::io("<capsule output>", e);
    let mut zip = ZipWriter::new(out);
    let mut entries: Vec<ManifestFile> = Vec::with_capacity(files.len() + 2);
    let mut open: Option<Open> = None;
    while entries.len() < files.len() {
        let Ok(order) = orders.recv() else {
            return Err(CapsuleError::Invalid("capsule reader stopped early".into()));
        };
        match order {
            Order::Failed(e) => return Err(e),
            Order::Begin { idx, method } => {
                open = Some(Open {
                    idx,
                    method,
                    header_written: false,
                    crc: crc32fast::Hasher::new(),
                    sha: Sha256::new(),
                    size: 0,
                    compressed: 0,
                });
            }
            Order::Chunk(rx) => {
                let (Some(o), Ok(done)) = (open.as_mut(), rx.recv()) else {
                    return Err(CapsuleError::Invalid(
                        "capsule compression stopped early".into(),
                    ));
                };
                let f = &files[o.idx];
                let body = match (&done.deflated, o.header_written) {
                    // Small file: keep deflate only if it actually shrinks the data.
                    (Some(d), false) if f.size <= CHUNK as u64 && d.len() >= done.raw.len() => {
                        o.method = STORED;
                        &done.raw
                    }
                    (Some(d), _) if o.method == DEFLATED => d,
                    _ => &done.raw,
                };
                if !o.header_written {
                    zip.begin(&f.path, o.method, f.mode).map_err(io)?;
                    o.header_written = true;
                }
                zip.write_data(body).map_err(io)?;
                o.crc.update(&done.raw);
                o.sha.update(&done.raw);
                o.size += done.raw.len() as u64;
                o.compressed += body.len() as u64;
            }
            Order::End => {
                let Some(o) = open.take() else {
                    return Err(CapsuleError::Invalid(
                        "capsule entry ended before it began".into(),
                    ));
                };
                let f = &files[o.idx];
                if !o.header_written {
                    zip.begin(&f.path, STORED, f.mode).map_err(io)?;
                }
                zip.end(EntryEnd {
                    crc: o.crc.finalize(),
                    compressed: o.compressed,
                    size: o.size,
                })
                .map_err(io)?;
                entries.push(ManifestFile {
                    path: f.path.clone(),
                    size: o.size,
                    mode: f.mode,
                    sha256: hex::encode(o.sha.finalize()),
                });
            }
        }
    }
    finish(zip, spec, entries)
}

/// Appends the platform's files and the central directory.
fn finish<W: Write>(
    mut zip: ZipWriter<W>,
    spec: &JobSpec,
    mut files: Vec<ManifestFile>,
) -> Result<(W, Built)> {
    let io = |e| CapsuleError::io("<capsule output>", e);
    let mut c = zipw::compressor();
    let jobspec = spec.canonical_json();
    let runner = runner::runner_pex();
    let jobspec_sha256 = hex::encode(Sha256::digest(jobspec.as_bytes()));
    let runner_sha256 = hex::encode(Sha256::digest(runner));
    files.push(ManifestFile {
        path: JOBSPEC_PATH.into(),
        size: jobspec.len() as u64,
        mode: 0o644,
        sha256: jobspec_sha256.clone(),
    });
    files.push(ManifestFile {
        path: RUNNER_PATH.into(),
        size: runner.len() as u64,
        mode: 0o644,
        sha256: runner_sha256.clone(),
    });
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        format: FORMAT_VERSION,
        files,
        runner_sha256,
        jobspec_sha256,
    };
    zip.add_bytes(JOBSPEC_PATH, 0o644, jobspec.as_bytes(), &mut c)
        .map_err(io)?;
    zip.add_bytes(RUNNER_PATH, 0o644, runner, &mut c)
        .map_err(io)?;
    zip.add_bytes(
        MANIFEST_PATH,
        0o644,
        manifest.to_canonical_json().as_bytes(),
        &mut c,
    )
    .map_err(io)?;
    let (out, fin) = zip.finish().map_err(io)?;
    Ok((
        out,
        Built {
            sha256: hex::encode(fin.sha256),
            size: fin.size,
            manifest,
        },
    ))
}
