//! Bounded log archives (issue 27): an 8-pod RayJob whose containers each print 40 MB archives
//! with the reconciler's RSS growing less than 100 MiB, and admissions continue meanwhile.
//!
//! Everything goes through real HTTP: kubesim serves each container's 40 MiB log as it generates
//! it (`KubeSim::generate_logs`, never held whole), the reconciler reads it through the API like
//! any log. The process's RSS (reconciler, kubesim and test together) is sampled from
//! `/proc/self/status` every few milliseconds while the archive is written, and its high-water
//! mark (`VmHWM`, reset through `/proc/self/clear_refs` when the kernel allows) is read at the
//! end; the growth is the larger of the two peaks minus the RSS just before.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use tuneplane_core::job::JobState;
use tuneplane_core::render::workload_name;
use tuneplane_kubesim::FaultPlan;
use tuneplane_kubesim::logs::{GENERATED_LINE_BYTES, Generated};

/// What each container prints: 40 MiB.
const LOG_BYTES: u64 = 40 * 1024 * 1024;
/// The bound the archive's memory must stay under.
const MAX_GROWTH: u64 = 100 * 1024 * 1024;

/// Nine h200 nodes: eight for the big job, one for the job admitted while it is archived.
const NINE_H200: &str = "\
node_groups:
  - {name: h200, series: h200, count: 9, gpus: 8, cpus: 96, memory_gb: 1024, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The process's RSS from a starting point: sampled on a thread of its own, and its high-water
/// mark when the kernel lets it be reset.
struct Rss {
    baseline: u64,
    hwm_reset: bool,
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl Rss {
    fn start() -> Rss {
        // "5" resets VmHWM to the current RSS (Linux 4.0+).
        let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let baseline = status_bytes("VmRSS:").expect("VmRSS in /proc/self/status");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(status_bytes("VmRSS:").unwrap_or(0));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        });
        Rss {
            baseline,
            hwm_reset,
            stop,
            sampler,
        }
    }

    /// The baseline, the sampled peak and the high-water mark (when it was reset).
    fn stop(self) -> (u64, u64, Option<u64>) {
        self.stop.store(true, Ordering::Relaxed);
        let sampled = self.sampler.join().unwrap();
        let hwm = self.hwm_reset.then(|| status_bytes("VmHWM:")).flatten();
        (self.baseline, sampled, hwm)
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The bytes `from..from + len` of the generated log of `pod`/`container`.
fn generated_bytes(pod: &str, container: &str, from: u64, len: u64) -> Vec<u8> {
    let g = Generated {
        pod: pod.into(),
        container: container.into(),
        bytes: LOG_BYTES,
        at: jiff::Timestamp::UNIX_EPOCH,
    };
    let mut out = Vec::new();
    let mut line = from / GENERATED_LINE_BYTES;
    let mut skip = usize::try_from(from % GENERATED_LINE_BYTES).unwrap();
    while (out.len() as u64) < len && line < g.lines() {
        out.extend_from_slice(&g.line(line).as_bytes()[skip..]);
        skip = 0;
        line += 1;
    }
    out.truncate(usize::try_from(len).unwrap());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_8_pod_rayjob_printing_40_mb_per_container_archives_in_bounded_memory_while_admissions_go_on()
 {
    kubesim_only!("kubesim generates the 40 MB logs");
    let h = start(sim_config(NINE_H200, Duration::from_secs(4), None)).await;
    let sim = h.sim();
    // Every container of the big job's pods (head, workers, init containers, the submitter)
    // prints 40 MiB before what it writes itself.
    sim.generate_logs(&workload_name("big"), LOG_BYTES);
    // Each log read is answered after 300 ms (a kubelet's latency), so the archive lasts a few
    // seconds whatever this machine's speed.
    sim.set_fault_plan(Some(FaultPlan {
        path_contains: Some("/log".into()),
        slow_rate: 1.0,
        slow_min: Duration::from_millis(300),
        slow_max: Duration::from_millis(300),
        ..FaultPlan::default()
    }));
    let config = test_config("archive-memory");
    let max_bytes = config.log_archive_max_bytes;
    let (_task, ctx) = h.reconciler(config).await;
    h.submit(&gpu_job("big", "h200", 8, 8)).await;
    h.wait_state(60, "big", JobState::Running).await;
    let pods = h.job_pods("big").await;
    assert_eq!(pods.len(), 8, "the big job runs on 8 pods");

    let rss = Rss::start();
    wait_for(60, "the big job's archive to start", || async {
        ctx.archives.is_running("big").then_some(())
    })
    .await;
    // A job submitted while the archive is written is admitted while it still is.
    h.submit(&gpu_job("next", "h200", 1, 8)).await;
    let next = h
        .wait_job(30, "next", "admitted", |j| j.admitted_at_ms.is_some())
        .await;
    assert!(
        ctx.archives.is_running("big"),
        "the archive ended before the next job was admitted: nothing shows admissions went on"
    );
    let big = h.wait_state(240, "big", JobState::Succeeded).await;
    let (baseline, sampled, hwm) = rss.stop();
    let peak = sampled.max(hwm.unwrap_or(0));
    let growth = peak.saturating_sub(baseline);
    eprintln!(
        "RSS before the archive {:.1} MiB; peak while archiving {:.1} MiB sampled, {} high-water mark; growth {:.1} MiB",
        mib(baseline),
        mib(sampled),
        hwm.map_or("no".to_owned(), |h| format!("{:.1} MiB", mib(h))),
        mib(growth),
    );
    assert!(
        growth < MAX_GROWTH,
        "RSS grew {:.1} MiB while archiving (bound {:.0} MiB)",
        mib(growth),
        mib(MAX_GROWTH)
    );
    assert!(
        next.admitted_at_ms.unwrap() < big.finished_at_ms.unwrap(),
        "next admitted at {:?}, big ended at {:?}",
        next.admitted_at_ms,
        big.finished_at_ms
    );

    // The archive: the index first, every container's log cut to its share with its end kept.
    let key = big.logs_key.clone().expect("logs key");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("logs.tar.gz");
    h.blobs.get_to_file(&key, &path).await.unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut entries = archive.entries().unwrap();
    let mut first = entries.next().unwrap().unwrap();
    assert_eq!(first.path().unwrap().to_str(), Some("index.json"));
    let mut json = String::new();
    first.read_to_string(&mut json).unwrap();
    drop(first);
    let index: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(index["max_bytes"], max_bytes);
    let listed = index["entries"].as_array().unwrap().clone();
    let mut stored_total = 0;
    let mut logs = 0;
    for entry in entries {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let meta = listed
            .iter()
            .find(|e| e["path"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} is not in the index"));
        let (pod, container) = (
            meta["pod"].as_str().unwrap(),
            meta["container"].as_str().unwrap(),
        );
        let original = meta["original_bytes"].as_u64().unwrap();
        let cut = meta["truncated_bytes"].as_u64().unwrap();
        assert!(original >= LOG_BYTES, "{name}: {original} bytes served");
        assert!(cut > 0, "{name}: a 40 MiB log is longer than its share");
        // The marker line, then the log from byte `cut` to its end.
        let mut marker = Vec::new();
        let mut byte = [0u8; 1];
        while entry.read(&mut byte).unwrap() == 1 {
            marker.push(byte[0]);
            if byte[0] == b'\n' {
                break;
            }
        }
        let marker = String::from_utf8(marker).unwrap();
        assert!(
            marker.starts_with(&format!(
                "[tuneplane: the first {cut} of this log's {original} bytes were left out"
            )),
            "{name}: {marker}"
        );
        let mut head = vec![0u8; 4096];
        entry.read_exact(&mut head).unwrap();
        assert_eq!(
            head,
            generated_bytes(pod, container, cut, 4096),
            "{name}: the kept part does not start at byte {cut} of the log"
        );
        let mut rest = Vec::new();
        let mut tail = Vec::new();
        let mut kept = 4096u64;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = entry.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            kept += n as u64;
            rest.extend_from_slice(&buf[..n]);
            if rest.len() > 8192 {
                tail = rest.split_off(rest.len() - 8192);
                rest.clear();
            }
        }
        tail.extend_from_slice(&rest);
        assert_eq!(
            kept,
            original - cut,
            "{name}: the kept part is the log's end"
        );
        assert_eq!(
            meta["bytes"].as_u64(),
            Some(marker.len() as u64 + kept),
            "{name}"
        );
        // What the container printed last is the archive's last bytes (its own words after
        // the 40 MiB, if any).
        let own = original - LOG_BYTES;
        let generated_end = &tail[..tail.len() - usize::try_from(own).unwrap()];
        let expected = generated_bytes(
            pod,
            container,
            LOG_BYTES - generated_end.len() as u64,
            generated_end.len() as u64,
        );
        assert_eq!(
            generated_end,
            expected.as_slice(),
            "{name}: the end is not the log's end"
        );
        stored_total += marker.len() as u64 + kept;
        logs += 1;
    }
    assert_eq!(
        logs,
        listed.len(),
        "every container's log is in the archive"
    );
    assert!(
        logs > 8,
        "{logs} logs: 8 pods and the submitter, with init containers"
    );
    assert!(
        stored_total <= max_bytes,
        "{stored_total} bytes stored, cap {max_bytes}"
    );
    assert!(
        stored_total > max_bytes - max_bytes / 100,
        "{stored_total} bytes stored: the cap should be used, not wasted (cap {max_bytes})"
    );
    eprintln!(
        "{logs} logs of {:.0} MiB each archived in {:.1} MiB of logs ({} bytes compressed)",
        mib(LOG_BYTES),
        mib(stored_total),
        h.blobs.head(&key).await.unwrap().map_or(0, |m| m.size)
    );
}
