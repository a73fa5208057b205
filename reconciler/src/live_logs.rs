//! Live logs (docs/design.md §8): at the end of each pass, the new output of running jobs' pods
//! is read within the log-read budget and written to the blob store as segments, with the job's
//! segment list (`tuneplane_core::live`). Jobs a one-off reader waits for are read at once,
//! followed jobs often, the others rarely.
//!
//! Per job this costs one log read per readable container and, when there is new output, one
//! blob write per container with new output plus one for the segment list (written also when
//! the read answers a waiting reader's want and found nothing new). The reading state
//! lives in this process; after a restart (or a change of leader) the first read of a job starts
//! from its segment list, so nothing is shipped twice.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams};
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::live::readers::owed;
use tuneplane_core::live::{
    Budget, Candidate, Cursor, LiveSettings, Manifest, READ_LIMIT_BYTES, Segment, manifest_key,
    plan_reads, segment_key, take_new,
};

use crate::Ctx;
use crate::cluster::{Cluster, SUBMITTER_LABEL, belongs_to};
use crate::error::Result;
use crate::kube_io::Kube;
use crate::metrics::Metrics;
use crate::watched_pod::WatchedPod;

/// Most bytes of one container's output shipped live; its segments stop there (the archive at the
/// end keeps the log's end, within the job's cap).
pub const MAX_LOG_BYTES: i64 = 32 * 1024 * 1024;

/// Log reads of live shipping run this many at a time.
pub const CONCURRENCY: usize = 8;

/// Longest one live log read may take (a slow read waits for the next round).
pub const READ_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Default)]
struct JobLive {
    /// When the job was last read (or began running), Unix ms.
    last_read_ms: i64,
    /// Reading state per (pod, container).
    cursors: BTreeMap<(String, String), Cursor>,
    /// The segment list as stored (`None` until read back from the store or first written).
    manifest: Option<Manifest>,
}

/// Live log shipping: reading state, the budget and counters.
pub struct LiveLogs {
    /// How often and how much.
    pub settings: LiveSettings,
    /// The API client of log reads, with its own rate limit at the budget: log reads never
    /// take the pass's own calls' share of the reconciler's rate limit.
    kube: Kube,
    jobs: Mutex<HashMap<String, JobLive>>,
    budget: Mutex<Budget>,
    reads: AtomicU64,
    blob_writes: AtomicU64,
}

/// Totals since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveTotals {
    /// Container log reads toward the API server.
    pub reads: u64,
    /// Blob writes (segments and segment lists).
    pub blob_writes: u64,
}

impl LiveLogs {
    /// Shipping with `settings`, reading through `client`.
    pub fn new(settings: LiveSettings, client: kube::Client, metrics: Arc<Metrics>) -> LiveLogs {
        let rate = settings.reads_per_second.ceil().max(1.0) as u32;
        LiveLogs {
            settings,
            kube: Kube::new(client, rate, rate * 5, metrics),
            jobs: Mutex::new(HashMap::new()),
            budget: Mutex::new(Budget::new()),
            reads: AtomicU64::new(0),
            blob_writes: AtomicU64::new(0),
        }
    }

    /// Log reads and blob writes so far.
    pub fn totals(&self) -> LiveTotals {
        LiveTotals {
            reads: self.reads.load(Ordering::Relaxed),
            blob_writes: self.blob_writes.load(Ordering::Relaxed),
        }
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, HashMap<String, JobLive>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Removes a finished job's live segments once its archive holds the whole output: the segment
/// list first (a reader then finds none and turns to the archive, where it continues at the byte
/// it had reached), then every segment it named. Best effort: a failure is logged and leaves
/// unreferenced segment blobs behind, which nothing reads.
pub async fn discard(ctx: &Ctx, job_id: &str) {
    ctx.live.jobs().remove(job_id);
    let key = manifest_key(job_id);
    let segments = match ctx.blobs.get(&key).await {
        Ok(Some(bytes)) => {
            serde_json::from_slice::<Manifest>(&bytes).map_or_else(|_| Vec::new(), |m| m.segments)
        }
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(job_id, error = %e, "live segments of a finished job kept: cannot read their list");
            return;
        }
    };
    let mut keys = vec![key];
    keys.extend(segments.into_iter().map(|s| s.key));
    for key in keys {
        if let Err(e) = ctx.blobs.delete(&key).await {
            tracing::warn!(job_id, key, error = %e, "live segment of a finished job kept");
            return;
        }
    }
}

/// Readable containers of one pod: (name, is main output).
type PodContainers = (String, Vec<(String, bool)>);

/// The pods of a running job whose output can be read: its own pods and, for a RayJob, the
/// submitter's. Each with the containers that have started (init containers first), and whether
/// each is the job's main output (the CPU pod's containers, the submitter's).
fn readable(cluster: &Cluster, job: &JobRecord) -> Vec<PodContainers> {
    let ns = job.spec.namespace.as_str();
    let cpu = job.spec.is_cpu_only();
    let Some(workload) = job.workload_name.as_deref() else {
        return Vec::new();
    };
    // Labels find candidates; who made each pod decides (`belongs_to`).
    let mut pods: BTreeMap<String, (&WatchedPod, bool)> = cluster
        .pods_of(job)
        .into_iter()
        .map(|p| (p.name_any(), (p, cpu)))
        .collect();
    if !cpu {
        for p in cluster.pods.iter().filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns)
                && p.labels().get(SUBMITTER_LABEL).map(String::as_str) == Some(workload)
                && belongs_to(&p.metadata, &job.id, workload)
        }) {
            pods.insert(p.name_any(), (p, true));
        }
    }
    pods.into_iter()
        .filter_map(|(name, (pod, main_pod))| {
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            let spec = pod.spec.as_ref()?;
            // Not bound to a node yet: no kubelet has its output.
            spec.node_name.as_ref()?;
            // Reduced statuses are absent while every container runs (`strip_pod`).
            let waiting = |list: Option<&Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
                           c: &str| {
                list.into_iter().flatten().any(|s| {
                    s.name == c
                        && s.state.as_ref().is_some_and(|st| st.waiting.is_some())
                        && s.last_state.as_ref().is_none_or(|l| l.terminated.is_none())
                })
            };
            let inits = spec.init_containers.iter().flatten().map(|c| (c, true));
            let containers: Vec<(String, bool)> = inits
                .chain(spec.containers.iter().map(|c| (c, false)))
                .filter(|(c, init)| {
                    let list = status.and_then(|s| {
                        if *init {
                            s.init_container_statuses.as_ref()
                        } else {
                            s.container_statuses.as_ref()
                        }
                    });
                    let statuses_known = list.is_some();
                    // A pod still Pending with no statuses has started nothing.
                    (statuses_known || phase != "Pending") && !waiting(list, &c.name)
                })
                .map(|(c, init)| (c.name.clone(), main_pod && !init))
                .collect();
            (!containers.is_empty()).then_some((name, containers))
        })
        .collect()
}

/// One read of one container: its new output and cursor, or `None` when the read failed.
async fn read_one(
    ctx: &Ctx,
    api: &Api<Pod>,
    pod: &str,
    container: &str,
    cursor: Cursor,
) -> Option<(String, Cursor)> {
    if cursor.bytes >= MAX_LOG_BYTES as u64 {
        // Live segments stop here; the archive has the rest's end.
        return None;
    }
    let since_time = cursor
        .since
        .as_deref()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok());
    let params = LogParams {
        container: Some(container.to_owned()),
        timestamps: true,
        since_time,
        limit_bytes: Some(READ_LIMIT_BYTES),
        ..LogParams::default()
    };
    ctx.live.reads.fetch_add(1, Ordering::Relaxed);
    let object = format!("pod {pod} container {container}");
    let text = match tokio::time::timeout(
        READ_TIMEOUT,
        ctx.live
            .kube
            .call("live logs", &object, || api.logs(pod, &params)),
    )
    .await
    {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => {
            tracing::debug!(%object, error = %e, "live log read failed; next round tries again");
            return None;
        }
        Err(_) => return None,
    };
    let mut new = take_new(&text, &cursor);
    let room = usize::try_from(MAX_LOG_BYTES as u64 - cursor.bytes).unwrap_or(usize::MAX);
    if new.text.len() > room {
        let mut cut = room;
        while !new.text.is_char_boundary(cut) {
            cut -= 1;
        }
        new.text.truncate(cut);
        new.cursor.bytes = MAX_LOG_BYTES as u64;
    }
    Some((new.text, new.cursor))
}

/// Reads one job's containers and stores what is new; a read of every container answers
/// `want` (a waiting reader's `logs_wanted_at_ms`) in the segment list.
async fn ship_job(
    ctx: &Ctx,
    job: &JobRecord,
    pods: Vec<PodContainers>,
    want: Option<i64>,
    now: i64,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(ctx.kube.client.clone(), &job.spec.namespace);
    // The segment list: from memory, else from the store (a restarted reconciler), else new.
    let known = ctx
        .live
        .jobs()
        .get(job.id.as_str())
        .and_then(|j| j.manifest.clone());
    let mut manifest = match known {
        Some(m) => m,
        None => match ctx.blobs.get(&manifest_key(&job.id)).await? {
            Some(bytes) => Manifest::read_or_empty(&job.id, &bytes),
            None => Manifest::empty(job.id.clone()),
        },
    };
    manifest.job_id = job.id.clone();
    let mut reads = Vec::new();
    let mut main = HashSet::new();
    for (pod, containers) in &pods {
        for (container, is_main) in containers {
            let key = (pod.clone(), container.clone());
            if *is_main {
                main.insert(key.clone());
            }
            let cursor = ctx
                .live
                .jobs()
                .get(job.id.as_str())
                .and_then(|j| j.cursors.get(&key).cloned())
                .unwrap_or_else(|| Cursor {
                    bytes: manifest.shipped(pod, container),
                    since: None,
                    skip: 0,
                });
            reads.push((key, cursor));
        }
    }
    let results: Vec<_> = futures_util::stream::iter(reads.into_iter().map(|(key, cursor)| {
        let api = &api;
        async move {
            let out = read_one(ctx, api, &key.0, &key.1, cursor.clone()).await;
            (key, cursor, out)
        }
    }))
    .buffered(CONCURRENCY)
    .collect()
    .await;
    let mut cursors = BTreeMap::new();
    let mut wrote = false;
    // Every container read (or already shipped up to the archive's limit): the list holds the
    // output up to this read.
    let mut whole_read = true;
    for (key, before, out) in results {
        let Some((text, after)) = out else {
            whole_read &= before.bytes >= MAX_LOG_BYTES as u64;
            cursors.insert(key, before);
            continue;
        };
        if !text.is_empty() {
            let seg = Segment {
                seq: manifest.last_seq() + 1,
                pod: key.0.clone(),
                container: key.1.clone(),
                offset: before.bytes,
                bytes: text.len() as u64,
                key: segment_key(&job.id, &key.0, &key.1, before.bytes),
                main: main.contains(&key),
                at_ms: now,
            };
            ctx.blobs.put(&seg.key, text.into_bytes()).await?;
            ctx.live.blob_writes.fetch_add(1, Ordering::Relaxed);
            manifest.segments.push(seg);
            wrote = true;
        }
        cursors.insert(key, after);
    }
    // A container with many segments has its oldest merged into one (the list stays short).
    let mut merged_away = Vec::new();
    if wrote && let Some(batch) = manifest.merge_candidates() {
        let mut bytes = Vec::new();
        let mut whole = true;
        for seg in &batch {
            match ctx.blobs.get(&seg.key).await? {
                Some(b) => bytes.extend_from_slice(&b),
                None => whole = false,
            }
        }
        if whole {
            ctx.blobs.put(&batch[0].key, bytes).await?;
            ctx.live.blob_writes.fetch_add(1, Ordering::Relaxed);
            manifest.apply_merge(&batch);
            merged_away = batch[1..].iter().map(|s| s.key.clone()).collect();
        }
    }
    let answered = want.filter(|w| whole_read && manifest.answered_ms.is_none_or(|a| a < *w));
    if let Some(w) = answered {
        manifest.answered_ms = Some(w);
    }
    if wrote || answered.is_some() {
        let json = serde_json::to_vec(&manifest).unwrap_or_default();
        ctx.blobs.put(&manifest_key(&job.id), json).await?;
        ctx.live.blob_writes.fetch_add(1, Ordering::Relaxed);
    }
    // Only once the list no longer names them (a reader with the older list that misses one
    // asks again and gets the merged segment).
    for key in merged_away {
        ctx.blobs.delete(&key).await?;
    }
    let mut jobs = ctx.live.jobs();
    let entry = jobs.entry(String::from(&job.id)).or_default();
    entry.last_read_ms = now;
    entry.cursors.extend(cursors);
    entry.manifest = Some(manifest);
    Ok(())
}

/// Ships new output of running jobs within the budget; returns the jobs whose shipping failed
/// (a blob store error), with the error.
pub async fn ship(
    ctx: &Ctx,
    cluster: &Cluster,
    active: &[JobRecord],
    now: i64,
) -> Vec<(String, crate::Error)> {
    let running: Vec<&JobRecord> = active
        .iter()
        .filter(|j| j.state == JobState::Running && !j.stop_requested)
        .collect();
    // Forget jobs that no longer run (their archive takes over).
    {
        let ids: HashSet<&str> = running.iter().map(|j| j.id.as_str()).collect();
        ctx.live.jobs().retain(|id, _| ids.contains(id.as_str()));
    }
    // When each job was last read, and the latest want a read of it answered.
    let last_read: HashMap<String, (i64, Option<i64>)> = ctx
        .live
        .jobs()
        .iter()
        .map(|(id, j)| {
            let answered = j.manifest.as_ref().and_then(|m| m.answered_ms);
            (id.clone(), (j.last_read_ms, answered))
        })
        .collect();
    // Containers are counted only for jobs that could be due (a cheap test first).
    let settings = ctx.live.settings;
    let mut pods_of: HashMap<&str, Vec<PodContainers>> = HashMap::new();
    let mut wants: HashMap<&str, i64> = HashMap::new();
    let mut candidates = Vec::new();
    for job in &running {
        let followed = job.logs_followed_until_ms.is_some_and(|t| t > now);
        let known = last_read.get(job.id.as_str()).copied();
        // Not read since this process started: the segment list (read by `ship_job`) tells
        // whether the want was answered before; reading once more is the safe side.
        let want = owed(job.logs_wanted_at_ms, known.and_then(|k| k.1), now);
        let last = known.map_or(job.running_at_ms.unwrap_or(now), |k| k.0);
        // A followed job that was never read is read at once.
        let last = if followed && known.is_none() {
            i64::MIN / 2
        } else {
            last
        };
        let every = if followed {
            settings.followed_interval_ms
        } else {
            settings.background_interval_ms
        };
        if want.is_none() && now - last < every {
            continue;
        }
        if let Some(w) = want {
            wants.insert(job.id.as_str(), w);
        }
        let pods = readable(cluster, job);
        let reads = pods.iter().map(|(_, c)| c.len() as u32).sum();
        pods_of.insert(job.id.as_str(), pods);
        candidates.push(Candidate {
            job_id: job.id.as_str(),
            followed,
            waited: want.is_some(),
            last_read_ms: last,
            reads,
        });
    }
    if candidates.is_empty() {
        // Still earn the budget for later passes.
        let mut budget = ctx.live.budget.lock().unwrap_or_else(|p| p.into_inner());
        budget.refill(now, &settings, 0);
        return Vec::new();
    }
    let largest = candidates.iter().map(|c| c.reads).max().unwrap_or(0);
    let chosen = {
        let mut budget = ctx.live.budget.lock().unwrap_or_else(|p| p.into_inner());
        let tokens = budget.refill(now, &settings, largest);
        let (chosen, used) = plan_reads(&candidates, now, &settings, tokens);
        budget.spend(used);
        chosen
    };
    let by_id: HashMap<&str, &JobRecord> = running.iter().map(|j| (j.id.as_str(), *j)).collect();
    let mut failed = Vec::new();
    let work: Vec<_> = chosen
        .into_iter()
        .filter_map(|id| {
            let job = *by_id.get(id)?;
            let pods = pods_of.remove(id).unwrap_or_default();
            let want = wants.get(id).copied();
            Some(async move { (job.id.clone(), ship_job(ctx, job, pods, want, now).await) })
        })
        .collect();
    let outcomes: Vec<_> = futures_util::stream::iter(work)
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    for (id, outcome) in outcomes {
        if let Err(e) = outcome {
            failed.push((id.into_string(), e));
        }
    }
    failed
}
