//! Log archives: every container (init containers included) of every pod of a job — Ray head and
//! workers, the submitter, or the CPU Pod — in `logs/<job id>/logs.tar.gz` with an `index.json`.
//!
//! The archive is written before the terminal record, and the workload deleted only after that, so
//! logs survive the pods. Writing is a replace (`put`): a pass that crashed after archiving simply
//! archives again.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use serde::Serialize;
use tuneplane_core::constants::JOB_ID_LABEL;
use tuneplane_core::render::label_value;
use tuneplane_core::store::BlobStore;

use crate::cluster::SUBMITTER_LABEL;
use crate::error::{Error, Result};
use crate::kube_io::Kube;

/// Most bytes kept per container log: the API server stops there (`limitBytes`), so an index entry
/// of exactly this length marks a log that may have been cut.
pub const MAX_LOG_BYTES: i64 = 32 * 1024 * 1024;

/// Longest a log read may take per attempt (other calls get `kube_io::ATTEMPT_TIMEOUT`): a log of
/// up to [`MAX_LOG_BYTES`] streamed through the API server from the kubelet can be slow.
pub const LOG_READ_TIMEOUT: Duration = Duration::from_secs(180);

/// The blob key of a job's log archive.
pub fn logs_key(job_id: &str) -> String {
    format!("logs/{job_id}/logs.tar.gz")
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
    /// Length of the stored log, at most [`MAX_LOG_BYTES`]; 0 when it could not be read.
    pub bytes: usize,
    /// Why the log could not be read (a container that never started).
    pub error: Option<String>,
}

/// The archive's `index.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Index {
    /// The job whose logs these are; the archive is stored under [`logs_key`] of it.
    pub job_id: String,
    /// The job's RayJob or Pod; KubeRay's submitter pod is found by its name.
    pub workload: String,
    /// When archived, Unix milliseconds.
    pub archived_at_ms: i64,
    /// One entry per container.
    pub entries: Vec<IndexEntry>,
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

/// Reads the logs of the job's pods in `namespace` and stores the archive; returns its key.
///
/// `strict`: a log read that still fails on an API server error (5xx, 429, transport) after
/// [`Kube::call`]'s retries fails the archive, so a later pass tries again; otherwise the error is
/// written in the index. Errors that are the answer (a container that never started, a pod already
/// gone) are written in the index either way.
pub async fn archive(
    kube: &Kube,
    blobs: &dyn BlobStore,
    job_id: &str,
    namespace: &str,
    workload: &str,
    strict: bool,
) -> Result<String> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    let own = format!("{JOB_ID_LABEL}={}", label_value(job_id));
    let submitter = format!("{SUBMITTER_LABEL}={workload}");
    for selector in [own, submitter] {
        // Labels find candidates; who made each pod decides (`belongs_to`).
        for p in list(kube, &api, &selector).await? {
            if crate::cluster::belongs_to(&p, job_id, workload) {
                pods.insert(p.name_any(), p);
            }
        }
    }
    let reader = kube.clone().with_attempt_timeout(LOG_READ_TIMEOUT);
    let mut entries = Vec::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, pod) in &pods {
        let spec = pod.spec.clone().unwrap_or_default();
        let containers = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, true))
            .chain(spec.containers.into_iter().map(|c| (c.name, false)));
        for (container, init) in containers {
            let params = LogParams {
                container: Some(container.clone()),
                limit_bytes: Some(MAX_LOG_BYTES),
                ..LogParams::default()
            };
            let object = format!("pod {namespace}/{name} container {container}");
            let mut entry = IndexEntry {
                pod: name.clone(),
                container: container.clone(),
                init,
                path: None,
                bytes: 0,
                error: None,
            };
            match reader
                .call("logs", &object, || api.logs(name, &params))
                .await
            {
                Ok(text) => {
                    let path = format!("{name}/{container}.log");
                    entry.bytes = text.len();
                    entry.path = Some(path.clone());
                    files.push((path, text.into_bytes()));
                }
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
                    entry.error = Some(match &e {
                        // The API server's own words and code, not the client's debug dump.
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
                    });
                }
            }
            entries.push(entry);
        }
    }
    let index = Index {
        job_id: job_id.to_owned(),
        workload: workload.to_owned(),
        archived_at_ms: crate::now_ms(),
        entries,
    };
    let bytes = build_tar_gz(&index, &files).map_err(|source| Error::Archive {
        job_id: job_id.to_owned(),
        source,
    })?;
    let key = logs_key(job_id);
    blobs.put(&key, bytes).await?;
    tracing::info!(job_id, key = %key, pods = pods.len(), "logs archived");
    Ok(key)
}

fn append(
    builder: &mut tar::Builder<GzEncoder<Vec<u8>>>,
    path: &str,
    data: &[u8],
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    builder.append_data(&mut header, path, data)
}

/// Builds the `.tar.gz`: `index.json` first, then one file per container log.
pub fn build_tar_gz(index: &Index, files: &[(String, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    let json = serde_json::to_vec_pretty(index).map_err(std::io::Error::other)?;
    append(&mut builder, "index.json", &json)?;
    for (path, data) in files {
        append(&mut builder, path, data)?;
    }
    let mut gz = builder.into_inner()?;
    gz.flush()?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn archive_holds_the_index_first_then_every_log() {
        let index = Index {
            job_id: "j".into(),
            workload: "tp-j".into(),
            archived_at_ms: 1,
            entries: vec![],
        };
        let bytes = build_tar_gz(&index, &[("p/c.log".into(), b"hello".to_vec())]).unwrap();
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut text = String::new();
            entry.read_to_string(&mut text).unwrap();
            names.push((
                entry
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                text,
            ));
        }
        assert_eq!(names[0].0, "index.json");
        assert_eq!(names[1], ("p/c.log".to_string(), "hello".to_string()));
        assert_eq!(logs_key("j-1"), "logs/j-1/logs.tar.gz");
    }
}
