//! Log archives: every container (init containers included) of every pod of a job — Ray head and
//! workers, the submitter, or the CPU Pod — in `logs/<job id>/logs.tar.gz` with an `index.json`.
//!
//! The archive is written before the terminal record, and the workload deleted only after that, so
//! logs survive the pods. Writing is a replace (`put_file`): a pass that crashed after archiving
//! simply archives again.
//!
//! Memory stays bounded whatever the logs' size: each log streams from the API server into a
//! temporary file that keeps only its last bytes ([`Tail`], a ring), the `.tar.gz` is written to a
//! temporary file beside them, and the blob store uploads it from there (in parts on S3 when
//! large). A job's logs together keep at most a configured number of bytes
//! (`TUNEPLANE_LOG_ARCHIVE_MAX_BYTES`, [`DEFAULT_MAX_BYTES`]), shared by its containers
//! ([`Budget`]); a longer log keeps its end (where the error is), its stored file starts with a
//! one-line marker saying how many leading bytes were left out, and its `index.json` entry says
//! the same (`truncated_bytes` of `original_bytes`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use futures_util::io::AsyncBufReadExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use serde::Serialize;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tuneplane_core::constants::JOB_ID_LABEL;
use tuneplane_core::ids::JobId;
use tuneplane_core::render::label_value;
use tuneplane_core::store::BlobStore;

use crate::cluster::SUBMITTER_LABEL;
use crate::error::{Error, Result};
use crate::kube_io::Kube;

/// Most bytes of a job's logs its archive keeps unless configured otherwise
/// (`TUNEPLANE_LOG_ARCHIVE_MAX_BYTES`): 256 MiB, shared by the job's containers.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// Longest one attempt at reading one container's log may take (other calls get
/// `kube_io::ATTEMPT_TIMEOUT`): the whole log streams through the API server from the kubelet,
/// which can be slow.
pub const LOG_READ_TIMEOUT: Duration = Duration::from_secs(180);

/// Prefix of the temporary directories archives are written in (in the system's temporary
/// directory, `TMPDIR`); the binary removes any left by an earlier process at startup.
pub const SCRATCH_PREFIX: &str = "tuneplane-archive-";

/// The blob key of a job's log archive.
pub fn logs_key(job_id: &str) -> String {
    format!("logs/{job_id}/logs.tar.gz")
}

/// Blob key of the log archive of the attempt whose workload is `workload`: [`logs_key`] for the
/// first attempt, `logs/<id>/attempt-<N>/logs.tar.gz` for attempt N ≥ 2 (each attempt keeps its
/// own archive).
pub fn attempt_logs_key(job_id: &str, workload: &str) -> String {
    match tuneplane_core::render::attempt_of_workload(job_id, workload) {
        Some(n) if n >= 2 => format!("logs/{job_id}/attempt-{n}/logs.tar.gz"),
        _ => logs_key(job_id),
    }
}

/// One entry of `index.json`.
#[derive(Debug, Clone, Serialize)]
pub struct IndexEntry {
    /// The pod: one labelled with the job's id, or KubeRay's submitter pod of the workload.
    pub pod: String,
    /// The container of `pod`; the log is stored as `<pod>/<container>.log`.
    pub container: String,
    /// True for init containers.
    pub init: bool,
    /// Path of the log inside the archive (absent when it could not be read).
    pub path: Option<String>,
    /// Length of the stored file (a cut log's marker line included); 0 when it could not be read.
    pub bytes: u64,
    /// Length of the log as the API server served it.
    pub original_bytes: u64,
    /// Leading bytes of the log left out to keep the job's archive within its cap; 0 when the
    /// whole log is stored. When not 0, the stored file is a one-line marker saying so followed
    /// by the log from this byte on (its last `original_bytes - truncated_bytes` bytes).
    pub truncated_bytes: u64,
    /// Why the log could not be read (a container that never started).
    pub error: Option<String>,
}

/// The archive's `index.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Index {
    /// The job whose logs these are; the archive is stored under [`logs_key`] of it.
    pub job_id: JobId,
    /// The job's RayJob or Pod; KubeRay's submitter pod is found by its name.
    pub workload: String,
    /// When archived, Unix milliseconds.
    pub archived_at_ms: i64,
    /// Most bytes of logs the archive keeps (`TUNEPLANE_LOG_ARCHIVE_MAX_BYTES`), shared by the
    /// containers ([`Budget`]).
    pub max_bytes: u64,
    /// One entry per container.
    pub entries: Vec<IndexEntry>,
}

/// How a job's cap is shared by its containers, whose logs are read one after another: each may
/// keep what is left of the cap divided by the containers not read yet. Logs longer than their
/// share all get equal shares; a shorter log leaves what it did not use to the containers read
/// after it (init containers, usually short, are read first). No log is ever kept shorter than
/// the cap divided by the number of containers (or whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    left: u64,
    containers: u64,
}

impl Budget {
    /// A cap of `max_bytes` shared by `containers`.
    pub fn new(max_bytes: u64, containers: usize) -> Budget {
        Budget {
            left: max_bytes,
            containers: u64::try_from(containers).unwrap_or(u64::MAX),
        }
    }

    /// The most the next container's stored log may take.
    pub fn share(&self) -> u64 {
        self.left / self.containers.max(1)
    }

    /// Notes that the next container's log took `stored` bytes.
    pub fn spend(&mut self, stored: u64) {
        self.left = self.left.saturating_sub(stored);
        self.containers = self.containers.saturating_sub(1);
    }
}

/// The last `capacity` bytes of a log, written as it streams into a file used as a ring: byte `i`
/// of the log is at `i % capacity`. Memory holds no more than the chunk being written.
pub struct Tail {
    file: tokio::fs::File,
    capacity: u64,
    written: u64,
    /// The file's position (writes are sequential until the ring wraps).
    position: u64,
}

impl Tail {
    /// An empty tail in `file` (a fresh temporary file) keeping `capacity` bytes.
    pub fn new(file: File, capacity: u64) -> Tail {
        Tail {
            file: tokio::fs::File::from_std(file),
            capacity,
            written: 0,
            position: 0,
        }
    }

    /// Appends the next bytes of the log.
    pub async fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        let total = self.written + data.len() as u64;
        if self.capacity > 0 {
            // Only the last `capacity` bytes of the chunk can survive it.
            let skip = data
                .len()
                .saturating_sub(usize::try_from(self.capacity).unwrap_or(usize::MAX));
            let mut data = &data[skip..];
            let mut at = (total - data.len() as u64) % self.capacity;
            while !data.is_empty() {
                let room = usize::try_from(self.capacity - at).unwrap_or(usize::MAX);
                let n = room.min(data.len());
                if at != self.position {
                    self.file.seek(SeekFrom::Start(at)).await?;
                }
                self.file.write_all(&data[..n]).await?;
                self.position = at + n as u64;
                data = &data[n..];
                at = self.position % self.capacity;
            }
        }
        self.written = total;
        Ok(())
    }

    /// Bytes of the log written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The log as far as it was written, for reading back.
    pub async fn finish(mut self) -> std::io::Result<Kept> {
        self.file.flush().await?;
        Ok(Kept {
            file: self.file.into_std().await,
            capacity: self.capacity,
            written: self.written,
        })
    }
}

/// A log that was read: its [`Tail`]'s file, and how much of it there was.
pub struct Kept {
    file: File,
    capacity: u64,
    written: u64,
}

impl Kept {
    /// Length of the log as served.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The oldest byte of the log the ring still holds.
    fn oldest(&self) -> u64 {
        self.written.saturating_sub(self.capacity)
    }

    /// Byte `offset` of the log (one the ring still holds).
    fn byte_at(&self, offset: u64) -> std::io::Result<u8> {
        let mut b = [0u8; 1];
        self.file
            .read_exact_at(&mut b, offset % self.capacity.max(1))?;
        Ok(b[0])
    }

    /// What is stored of this log in an archive whose cap is `max_bytes`: from which byte on,
    /// after which marker line (`None` when the whole log is kept). Stored file (marker
    /// included) stays within the ring's capacity; the kept part starts at a character boundary
    /// (UTF-8), so a reader of text does not meet half a character.
    pub fn cut(&self, max_bytes: u64) -> std::io::Result<(u64, Option<String>)> {
        if self.written <= self.capacity {
            return Ok((0, None));
        }
        let oldest = self.oldest();
        let mut from = oldest;
        // The marker names `from`, and its length moves `from`: a few rounds settle it (its
        // length only grows with `from`).
        for _ in 0..8 {
            let marker = marker_line(from, self.written, max_bytes);
            let mut start = oldest.saturating_add(marker.len() as u64).min(self.written);
            let mut skipped = 0;
            while start < self.written && skipped < 3 && is_continuation(self.byte_at(start)?) {
                start += 1;
                skipped += 1;
            }
            if start == from {
                return Ok((from, Some(marker)));
            }
            from = start;
        }
        Ok((from, Some(marker_line(from, self.written, max_bytes))))
    }

    /// A reader of bytes `from..` of the log (which the ring must still hold).
    fn reader(&self, from: u64) -> RingReader<'_> {
        RingReader {
            kept: self,
            next: from,
        }
    }
}

/// True for a byte inside a UTF-8 character (not its first).
fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// The first line of a cut log's stored file.
pub fn marker_line(truncated: u64, original: u64, max_bytes: u64) -> String {
    format!(
        "[tuneplane: the first {truncated} of this log's {original} bytes were left out to keep \
         the job's log archive within {max_bytes} bytes; its end follows]\n"
    )
}

/// Reads a [`Kept`] log's ring from a byte of the log to its end, in order.
struct RingReader<'a> {
    kept: &'a Kept,
    next: u64,
}

impl Read for RingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let (capacity, end) = (self.kept.capacity, self.kept.written);
        if self.next >= end || buf.is_empty() {
            return Ok(0);
        }
        let at = self.next % capacity;
        let len = (end - self.next).min(capacity - at);
        let len = usize::try_from(len).unwrap_or(usize::MAX).min(buf.len());
        let n = self.kept.file.read_at(&mut buf[..len], at)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "a log's temporary file is shorter than what was written to it",
            ));
        }
        self.next += n as u64;
        Ok(n)
    }
}

/// One container of a job's pods, in the index's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// Its pod.
    pub pod: String,
    /// Its name.
    pub name: String,
    /// True for an init container.
    pub init: bool,
}

/// What became of one container's log.
pub enum Collected {
    /// Read, with what was kept of it.
    Read(Kept),
    /// Not read, and why (the API server's words).
    Failed(String),
    /// Not read (why), but shipped live before: the bytes of its live segments from byte 0
    /// (a lost node's logs, which no kubelet serves any more).
    Shipped {
        /// Why the log itself could not be read.
        why: String,
        /// The shipped text.
        text: Vec<u8>,
    },
}

/// What was shipped live of `pod`/`container` (segments from byte 0, contiguous), if anything.
async fn live_copy(
    blobs: &dyn BlobStore,
    manifest: &tuneplane_core::live::Manifest,
    pod: &str,
    container: &str,
    max_bytes: u64,
) -> Result<Option<Vec<u8>>> {
    let mut segments: Vec<_> = manifest
        .segments
        .iter()
        .filter(|s| s.pod == pod && s.container == container)
        .collect();
    segments.sort_by_key(|s| s.offset);
    let mut text = Vec::new();
    for seg in segments {
        // Only what continues the text: a gap (a merged-away segment read meanwhile) ends it.
        if seg.offset != text.len() as u64 || text.len() as u64 + seg.bytes > max_bytes {
            break;
        }
        match blobs.get(&seg.key).await? {
            Some(bytes) => text.extend_from_slice(&bytes),
            None => break,
        }
    }
    Ok((!text.is_empty()).then_some(text))
}

async fn list(kube: &Kube, api: &Api<Pod>, selector: &str) -> Result<Vec<Pod>> {
    let params = ListParams::default().labels(selector);
    let pods = kube
        .call("list pods", selector, || api.list(&params))
        .await?;
    Ok(pods.items)
}

/// Archives of one job that may fail on API server errors reading a log (the step is retried next
/// pass) before one is written with those errors in its index instead: a log the API server keeps
/// failing to serve (its node gone) must not keep the job from ending.
pub const STRICT_ARCHIVE_ATTEMPTS: u32 = 10;

/// Streams one container's log into a fresh [`Tail`] of `capacity` bytes in `dir`. A failed read
/// of the stream is the API server's (`Err`, retried by [`Kube::call`]); a failed write of the
/// temporary file is ours (`Ok(Err)`).
async fn stream_tail(
    api: Api<Pod>,
    pod: String,
    params: LogParams,
    dir: PathBuf,
    capacity: u64,
) -> Result<std::io::Result<Kept>, kube::Error> {
    let stream = api.log_stream(&pod, &params).await?;
    read_tail(Box::pin(stream), &dir, capacity, None).await
}

/// A log stream being read.
type LogStream<'a> = std::pin::Pin<Box<dyn futures_util::io::AsyncBufRead + Send + 'a>>;

/// Reads `stream` into a fresh [`Tail`] of `capacity` bytes in `dir` until it ends, or until
/// `until` (what was read by then is kept: a followed log of a container still running).
async fn read_tail(
    mut stream: LogStream<'_>,
    dir: &Path,
    capacity: u64,
    until: Option<tokio::time::Instant>,
) -> Result<std::io::Result<Kept>, kube::Error> {
    let mut tail = match tempfile::tempfile_in(dir) {
        Ok(file) => Tail::new(file, capacity),
        Err(e) => return Ok(Err(e)),
    };
    loop {
        let next = match until {
            Some(at) => match tokio::time::timeout_at(at, stream.fill_buf()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => stream.fill_buf().await,
        };
        let chunk = next.map_err(kube::Error::ReadEvents)?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        if let Err(e) = tail.write(chunk).await {
            return Ok(Err(e));
        }
        stream.consume_unpin(n);
    }
    Ok(tail.finish().await)
}

/// How the archive of an attempt that is stopped (at the user's request, or preempted) ends its
/// pods, so that what the entrypoint prints during its grace is archived too: every running
/// container's log is followed first, then `delete` runs (the workload's deletion: its pods get
/// SIGTERM and their grace), and the logs are read until their containers end, `within` at most.
pub struct Ending {
    /// Deletes the workload (its pods keep their grace).
    pub delete: futures_util::future::BoxFuture<'static, Result<()>>,
    /// Longest the followed logs are read after the deletion (the pods' grace and a margin).
    pub within: Duration,
}

/// Whether `pod`'s container `name` is running (its log can be followed to its end).
fn running(pod: &Pod, name: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == name))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// Reads the logs of the job's pods in `namespace` and stores the archive at
/// [`attempt_logs_key`] of the workload; returns its key. The
/// archive keeps at most `max_bytes` of logs ([`Budget`]).
///
/// `strict`: a log read that still fails on an API server error (5xx, 429, transport) after
/// [`Kube::call`]'s retries fails the archive, so a later pass tries again; otherwise the error is
/// written in the index. Errors that are the answer (a container that never started, a pod already
/// gone) are written in the index either way.
///
/// `ending`: the attempt is being stopped and its pods still run; they are ended by the archive
/// itself once their logs are followed ([`Ending`]).
#[allow(clippy::too_many_arguments)]
pub async fn archive(
    kube: &Kube,
    blobs: &dyn BlobStore,
    job_id: &JobId,
    namespace: &str,
    workload: &str,
    strict: bool,
    max_bytes: u64,
    ending: Option<Ending>,
) -> Result<String> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
    let pods = workload_pods(kube, &api, job_id, workload).await?;
    let local = |source: std::io::Error| Error::Archive {
        job_id: job_id.clone(),
        source,
    };
    let containers = containers_of(&pods);
    let scratch = tempfile::Builder::new()
        .prefix(SCRATCH_PREFIX)
        .tempdir()
        .map_err(local)?;
    let reader = kube.clone().with_attempt_timeout(LOG_READ_TIMEOUT);
    let mut budget = Budget::new(max_bytes, containers.len());
    let mut collected: Vec<Option<Collected>> = containers.iter().map(|_| None).collect();
    // Init containers first: what their (usually short) logs leave goes to the others.
    let mut order: Vec<usize> = (0..containers.len()).collect();
    order.sort_by_key(|&i| !containers[i].init);
    // A stopped attempt: the logs of its running containers are followed from here, and only
    // then are its pods told to end, so what they print in their grace is read too.
    let mut followed: BTreeMap<usize, Result<LogStream<'_>>> = BTreeMap::new();
    let mut until = None;
    if let Some(ending) = ending {
        for (i, c) in containers.iter().enumerate() {
            if c.init || !pods.get(&c.pod).is_some_and(|p| running(p, &c.name)) {
                continue;
            }
            let params = LogParams {
                container: Some(c.name.clone()),
                follow: true,
                ..LogParams::default()
            };
            let object = format!("pod {namespace}/{} container {}", c.pod, c.name);
            let opened = reader
                .call("follow logs", &object, || async {
                    let stream = api.log_stream(&c.pod, &params).await?;
                    Ok(Box::pin(stream) as LogStream<'_>)
                })
                .await;
            followed.insert(i, opened);
        }
        ending.delete.await?;
        until = Some(tokio::time::Instant::now() + ending.within);
    }
    // The live segment list, read at the first log that cannot be read.
    let mut manifest: Option<tuneplane_core::live::Manifest> = None;
    for i in order {
        let Container { pod, name, .. } = &containers[i];
        let capacity = budget.share();
        let params = LogParams {
            container: Some(name.clone()),
            ..LogParams::default()
        };
        let object = format!("pod {namespace}/{pod} container {name}");
        let read = match followed.remove(&i) {
            // Read while its container goes through its grace, up to `until`.
            Some(opened) => match opened {
                Ok(stream) => read_tail(stream, scratch.path(), capacity, until)
                    .await
                    .map_err(|e| Error::kube("follow logs", object.clone(), e)),
                Err(e) => Err(e),
            },
            None => {
                reader
                    .call("logs", &object, || {
                        stream_tail(
                            api.clone(),
                            pod.clone(),
                            params.clone(),
                            scratch.path().to_path_buf(),
                            capacity,
                        )
                    })
                    .await
            }
        };
        let outcome = match read {
            Ok(Ok(kept)) => {
                budget.spend(kept.written().min(capacity));
                Collected::Read(kept)
            }
            Ok(Err(e)) => return Err(local(e)),
            // The API server failing even after retries is no answer about the log: end
            // this attempt, and a later pass archives again, rather than store an archive
            // without the log.
            Err(e)
                if strict
                    && matches!(&e, Error::Kube { source, .. } if crate::kube_io::retryable(source)) =>
            {
                return Err(e);
            }
            // With the API server's reason ("container ... is waiting to start").
            Err(e) => {
                let why = unread_because(&e);
                // A lost node takes its logs along: keep what was shipped live before.
                if manifest.is_none() {
                    let list = blobs
                        .get(&tuneplane_core::live::manifest_key(job_id))
                        .await?;
                    manifest = Some(match list {
                        Some(b) => tuneplane_core::live::Manifest::read_or_empty(job_id, &b),
                        None => tuneplane_core::live::Manifest::empty(job_id.clone()),
                    });
                }
                let copy = match &manifest {
                    Some(m) => live_copy(blobs, m, pod, name, capacity).await?,
                    None => None,
                };
                match copy {
                    Some(text) => {
                        budget.spend(text.len() as u64);
                        Collected::Shipped { why, text }
                    }
                    None => {
                        budget.spend(0);
                        Collected::Failed(why)
                    }
                }
            }
        };
        collected[i] = Some(outcome);
    }
    let head = Index {
        job_id: job_id.clone(),
        workload: workload.to_owned(),
        archived_at_ms: crate::now_ms(),
        max_bytes,
        entries: Vec::new(),
    };
    let path = scratch.path().join("logs.tar.gz");
    let logs: Vec<(Container, Collected)> = containers
        .into_iter()
        .zip(collected)
        .filter_map(|(c, got)| Some((c, got?)))
        .collect();
    let out = path.clone();
    // Compressing is CPU work of seconds for large logs: off the async workers.
    let index = tokio::task::spawn_blocking(move || write_tar_gz(&out, head, &logs))
        .await
        .map_err(|e| local(std::io::Error::other(e)))?
        .map_err(local)?;
    // Each attempt's workload has its own archive.
    let key = attempt_logs_key(job_id, workload);
    blobs.put_file(&key, &path).await?;
    let cut = index
        .entries
        .iter()
        .filter(|e| e.truncated_bytes > 0)
        .count();
    tracing::info!(job_id = %job_id, key = %key, pods = pods.len(), logs_cut = cut, "logs archived");
    Ok(key)
}

/// The pods of `workload`: found by the job's label and the submitter's, kept when they belong
/// to it ([`crate::cluster::belongs_to`]), by name.
async fn workload_pods(
    kube: &Kube,
    api: &Api<Pod>,
    job_id: &JobId,
    workload: &str,
) -> Result<BTreeMap<String, Pod>> {
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    let own = format!("{JOB_ID_LABEL}={}", label_value(job_id));
    let submitter = format!("{SUBMITTER_LABEL}={workload}");
    for selector in [own, submitter] {
        // A CPU job's workload is its one Pod, named like it: no submitter to look for.
        if selector.starts_with(SUBMITTER_LABEL) && pods.contains_key(workload) {
            break;
        }
        // Labels find candidates; who made each pod decides (`belongs_to`).
        for p in list(kube, api, &selector).await? {
            if crate::cluster::belongs_to(&p.metadata, job_id, workload) {
                pods.insert(p.name_any(), p);
            }
        }
    }
    Ok(pods)
}

/// Every container of `pods`, init containers marked, in pod-name then spec order.
fn containers_of(pods: &BTreeMap<String, Pod>) -> Vec<Container> {
    let mut containers = Vec::new();
    for (name, pod) in pods {
        let spec = pod.spec.clone().unwrap_or_default();
        let init = spec.init_containers.unwrap_or_default().into_iter();
        containers.extend(init.map(|c| Container {
            pod: name.clone(),
            name: c.name,
            init: true,
        }));
        containers.extend(spec.containers.into_iter().map(|c| Container {
            pod: name.clone(),
            name: c.name,
            init: false,
        }));
    }
    containers
}

/// Why a log could not be read, for the archive's index: the API server's own words and code
/// where it answered, not the client's debug dump.
fn unread_because(e: &Error) -> String {
    match e {
        Error::Kube {
            source: kube::Error::Api(status),
            ..
        } => format!(
            "the API server answered {} {}: {}",
            status.code,
            status.reason,
            status.message.trim_end()
        ),
        Error::Kube { source, .. } => format!("{e}: {source}"),
        other => other.to_string(),
    }
}

fn append(
    builder: &mut tar::Builder<impl Write>,
    path: &str,
    size: u64,
    data: impl Read,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    builder.append_data(&mut header, path, data)
}

/// Writes the `.tar.gz` to `path`: `index.json` first (`head` with an entry per log), then one
/// file per log that was read, a cut one starting with its marker line. Returns the index.
pub fn write_tar_gz(
    path: &Path,
    mut head: Index,
    logs: &[(Container, Collected)],
) -> std::io::Result<Index> {
    let mut stored = Vec::new();
    let mut shipped: Vec<(String, &Vec<u8>)> = Vec::new();
    for (c, got) in logs {
        let mut entry = IndexEntry {
            pod: c.pod.clone(),
            container: c.name.clone(),
            init: c.init,
            path: None,
            bytes: 0,
            original_bytes: 0,
            truncated_bytes: 0,
            error: None,
        };
        match got {
            Collected::Read(kept) => {
                let (from, marker) = kept.cut(head.max_bytes)?;
                let marker = marker.unwrap_or_default();
                entry.path = Some(format!("{}/{}.log", c.pod, c.name));
                entry.original_bytes = kept.written();
                entry.truncated_bytes = from;
                entry.bytes = marker.len() as u64 + kept.written() - from;
                stored.push((entry.path.clone().unwrap_or_default(), kept, from, marker));
            }
            Collected::Failed(why) => entry.error = Some(why.clone()),
            Collected::Shipped { why, text } => {
                entry.path = Some(format!("{}/{}.log", c.pod, c.name));
                entry.original_bytes = text.len() as u64;
                entry.bytes = text.len() as u64;
                entry.error = Some(format!(
                    "{why}; kept the {} bytes shipped live before",
                    text.len()
                ));
                shipped.push((entry.path.clone().unwrap_or_default(), text));
            }
        }
        head.entries.push(entry);
    }
    let file = File::create(path)?;
    let gz = GzEncoder::new(BufWriter::new(file), Compression::default());
    let mut builder = tar::Builder::new(gz);
    let json = serde_json::to_vec_pretty(&head).map_err(std::io::Error::other)?;
    append(
        &mut builder,
        "index.json",
        json.len() as u64,
        json.as_slice(),
    )?;
    for (name, kept, from, marker) in stored {
        let size = marker.len() as u64 + kept.written() - from;
        append(
            &mut builder,
            &name,
            size,
            marker.as_bytes().chain(kept.reader(from)),
        )?;
    }
    for (name, text) in shipped {
        append(&mut builder, &name, text.len() as u64, text.as_slice())?;
    }
    let gz = builder.into_inner()?;
    let mut out = gz.finish()?;
    out.flush()?;
    Ok(head)
}

/// Removes the temporary directories of archives an earlier process left (a crash between
/// writing and uploading) in the system's temporary directory; returns how many.
pub fn remove_leftover_scratch() -> usize {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(SCRATCH_PREFIX))
        .filter(|e| std::fs::remove_dir_all(e.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests;
