//! Live logs: while a job runs, the reconciler copies its pods' new output to the blob store in
//! segments, and the API serves them (docs/design.md §8, "Live logs").
//!
//! Each container's output is shipped as consecutive byte ranges of its log: segment `k` of a
//! container starts where segment `k-1` ended, so a reader that printed `n` bytes of a container
//! continues exactly at byte `n`, of the next segment or, once the job ended, of the archive
//! (`logs.tar.gz` holds the same log from byte 0). Nothing is lost or printed twice.
//!
//! Reads toward the API server are incremental: `sinceTime` (whole seconds) with `timestamps`,
//! and the lines already shipped within that second skipped ([`take_new`]). A server that sends
//! no timestamps is read from the start and cut at the byte offset instead.
//!
//! How often a job is read: at the next pass when a one-off reader waits for it
//! (`logs_wanted_at_ms`, [`readers`]), every [`LiveSettings::followed_interval_ms`] while someone
//! follows it (`logs_followed_until_ms`), every [`LiveSettings::background_interval_ms`]
//! otherwise, and never more than [`LiveSettings::reads_per_second`] log reads per second in all
//! ([`plan_reads`]).

use serde::{Deserialize, Serialize};

pub mod readers;

/// How live logs are shipped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveSettings {
    /// A followed job is read at most this often (ms).
    pub followed_interval_ms: i64,
    /// Any other running job is read this often (ms), budget permitting.
    pub background_interval_ms: i64,
    /// Most container log reads per second toward the API server, all jobs together.
    pub reads_per_second: f64,
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            followed_interval_ms: 5_000,
            background_interval_ms: 300_000,
            reads_per_second: 50.0,
        }
    }
}

/// How long a mark of interest lasts (ms); followers mark again well before it passes.
pub const FOLLOW_TTL_MS: i64 = 60_000;

/// Most bytes read per container per read (a longer backlog is shipped over several reads).
pub const READ_LIMIT_BYTES: i64 = 4 * 1024 * 1024;

/// The blob key of a job's segment list.
pub fn manifest_key(job_id: &str) -> String {
    format!("logs/{job_id}/live/index.json")
}

/// The blob key of the segment of `pod`/`container` starting at byte `offset`.
pub fn segment_key(job_id: &str, pod: &str, container: &str, offset: u64) -> String {
    format!("logs/{job_id}/live/{pod}/{container}/{offset:012}.log")
}

/// One shipped byte range of one container's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Order of shipping within the job (1, 2, ...): readers ask for segments after the last
    /// one they saw.
    pub seq: u64,
    /// The pod whose container wrote the text.
    pub pod: String,
    /// The container (of `pod`) whose log the range is from.
    pub container: String,
    /// First byte of the range in the container's log.
    pub offset: u64,
    /// Bytes in the range.
    pub bytes: u64,
    /// Blob key of the bytes.
    pub key: String,
    /// The job's main output: the CPU pod's container, or a RayJob submitter's (what `submit
    /// --wait` streams), not an init container or a Ray head or worker.
    #[serde(default)]
    pub main: bool,
    /// When it was shipped (Unix ms).
    pub at_ms: i64,
}

/// Every segment of a job, in shipping order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The job whose output the segments hold (the manifest is at [`manifest_key`] of it).
    pub job_id: crate::ids::JobId,
    /// Segments in shipping order.
    pub segments: Vec<Segment>,
    /// The latest one-off reader's want (`logs_wanted_at_ms`, the API's clock) a read answered:
    /// the segments hold the output the job wrote before it ([`readers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_ms: Option<i64>,
}

impl Manifest {
    /// An empty list of `job_id`'s segments (nothing shipped yet).
    pub fn empty(job_id: crate::ids::JobId) -> Manifest {
        Manifest {
            job_id,
            segments: Vec::new(),
            answered_ms: None,
        }
    }

    /// `job_id`'s list as stored in `bytes`, or an empty one when they do not parse (the list is
    /// written whole each time, so one that cannot be read is started again).
    pub fn read_or_empty(job_id: &crate::ids::JobId, bytes: &[u8]) -> Manifest {
        serde_json::from_slice(bytes).unwrap_or_else(|_| Manifest::empty(job_id.clone()))
    }

    /// Bytes shipped of `pod`/`container` so far.
    pub fn shipped(&self, pod: &str, container: &str) -> u64 {
        self.segments
            .iter()
            .filter(|s| s.pod == pod && s.container == container)
            .map(|s| s.offset + s.bytes)
            .max()
            .unwrap_or(0)
    }

    /// The last sequence number used (0 when none).
    pub fn last_seq(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.seq)
    }
}

/// A container's segment count above which its oldest [`MERGE_BATCH`] are merged into one.
pub const MERGE_ABOVE: usize = 64;
/// How many of a container's oldest segments one merge joins (at most).
pub const MERGE_BATCH: usize = 32;
/// Most bytes one merged segment holds.
pub const MERGE_MAX_BYTES: u64 = 4 * 1024 * 1024;

impl Manifest {
    /// The oldest [`MERGE_BATCH`] segments of a container that has more than [`MERGE_ABOVE`],
    /// consecutive byte ranges in shipping order, or `None`. Their merge is one segment at the
    /// first one's key (a key always holds the log from its offset on, so a reader holding an
    /// older list still reads the right bytes) with the last one's `seq` (readers past it do not
    /// get it again; readers before it get all of it).
    pub fn merge_candidates(&self) -> Option<Vec<Segment>> {
        let mut counts: Vec<((&str, &str), usize)> = Vec::new();
        for s in &self.segments {
            let key = (s.pod.as_str(), s.container.as_str());
            match counts.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => counts.push((key, 1)),
            }
        }
        let ((pod, container), _) = counts.into_iter().find(|(_, n)| *n > MERGE_ABOVE)?;
        let mut size = 0;
        let batch: Vec<Segment> = self
            .segments
            .iter()
            .filter(|s| s.pod == pod && s.container == container)
            .take(MERGE_BATCH)
            .take_while(|s| {
                size += s.bytes;
                size <= MERGE_MAX_BYTES
            })
            .cloned()
            .collect();
        let contiguous = batch
            .windows(2)
            .all(|w| w[0].offset + w[0].bytes == w[1].offset);
        (contiguous && batch.len() >= 2).then_some(batch)
    }

    /// Replaces `batch` (from [`Manifest::merge_candidates`]) by their merge.
    pub fn apply_merge(&mut self, batch: &[Segment]) {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return;
        };
        let merged = Segment {
            seq: last.seq,
            offset: first.offset,
            bytes: last.offset + last.bytes - first.offset,
            key: first.key.clone(),
            at_ms: last.at_ms,
            ..first.clone()
        };
        let gone: Vec<u64> = batch.iter().map(|s| s.seq).collect();
        self.segments.retain(|s| !gone.contains(&s.seq));
        let at = self
            .segments
            .iter()
            .position(|s| s.seq > merged.seq)
            .unwrap_or(self.segments.len());
        self.segments.insert(at, merged);
    }
}

/// Where the reading of one container stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Bytes of the log shipped so far.
    pub bytes: u64,
    /// The whole second (`2026-01-02T03:04:05Z`) of the last shipped line: the next read asks
    /// for lines since then. `None`: read from the start.
    pub since: Option<String>,
    /// Lines of that second already shipped (the next read returns them again first).
    pub skip: usize,
}

/// The new output in a log read and the cursor after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutput {
    /// Log bytes not shipped before (whole lines only; a line still being written waits).
    pub text: String,
    /// The cursor to keep.
    pub cursor: Cursor,
}

/// The whole second of a kubelet timestamp prefix (`2026-01-02T03:04:05.123456789Z ` gives
/// `2026-01-02T03:04:05Z`), or `None` when the line has none.
fn second_of(line: &str) -> Option<(String, &str)> {
    let (stamp, rest) = line.split_once(' ')?;
    let b = stamp.as_bytes();
    let shaped = b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && stamp.ends_with('Z')
        && b[..19]
            .iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10 | 13 | 16) || c.is_ascii_digit());
    shaped.then(|| (format!("{}Z", &stamp[..19]), rest))
}

/// What is new in `response`, the answer to a read made with `cursor` (`sinceTime` =
/// `cursor.since`, `timestamps=true`). Only complete lines count: a line without its newline
/// yet is read again next time.
pub fn take_new(response: &str, cursor: &Cursor) -> NewOutput {
    let complete = match response.rfind('\n') {
        Some(i) => &response[..=i],
        None => "",
    };
    let lines: Vec<&str> = complete.split_inclusive('\n').collect();
    let stamped: Option<Vec<(String, &str)>> = lines.iter().map(|l| second_of(l)).collect();
    let Some(stamped) = stamped else {
        // No timestamps: the server sent the log from its start; cut at the byte offset.
        let done = usize::try_from(cursor.bytes).unwrap_or(usize::MAX);
        let text = complete.get(done..).unwrap_or_default().to_owned();
        return NewOutput {
            cursor: Cursor {
                bytes: cursor.bytes + text.len() as u64,
                since: None,
                skip: 0,
            },
            text,
        };
    };
    let first_new = if cursor.since.is_some() {
        cursor.skip.min(stamped.len())
    } else {
        // Read from the start: skip whole lines up to the bytes already shipped.
        let mut acc = 0u64;
        stamped
            .iter()
            .take_while(|(_, raw)| {
                acc += raw.len() as u64;
                acc <= cursor.bytes
            })
            .count()
    };
    let text: String = stamped[first_new..].iter().map(|(_, raw)| *raw).collect();
    let Some((last, _)) = stamped.last() else {
        return NewOutput {
            text,
            cursor: cursor.clone(),
        };
    };
    // The next read (since `last`) returns these lines first: every line of that second.
    let skip = stamped.iter().rev().take_while(|(s, _)| s == last).count();
    NewOutput {
        cursor: Cursor {
            bytes: cursor.bytes + text.len() as u64,
            since: Some(last.clone()),
            skip,
        },
        text,
    }
}

/// The log-read budget: [`LiveSettings::reads_per_second`] tokens a second, kept for at most
/// [`BURST_SECONDS`] (or one round of the largest job, so a large job is never starved).
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    tokens: f64,
    last_ms: Option<i64>,
}

/// Seconds of unspent reads the budget keeps.
pub const BURST_SECONDS: f64 = 5.0;

impl Budget {
    /// A budget with no reads: the first [`refill`](Self::refill) grants one second's worth.
    pub fn new() -> Budget {
        Budget {
            tokens: 0.0,
            last_ms: None,
        }
    }

    /// Adds the reads earned since the last call; returns the reads available.
    pub fn refill(&mut self, now_ms: i64, settings: &LiveSettings, largest_round: u32) -> f64 {
        let elapsed = self
            .last_ms
            .map_or(1.0, |l| (now_ms - l).max(0) as f64 / 1000.0);
        self.last_ms = Some(now_ms);
        let cap = (settings.reads_per_second * BURST_SECONDS).max(f64::from(largest_round));
        self.tokens = (self.tokens + elapsed * settings.reads_per_second).min(cap);
        self.tokens
    }

    /// Takes `reads` from the budget (it may go negative: the debt delays the next reads).
    pub fn spend(&mut self, reads: u32) {
        self.tokens -= f64::from(reads);
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new()
    }
}

/// A running job that may be read this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The running job whose logs would be read.
    pub job_id: &'a str,
    /// Someone follows it now.
    pub followed: bool,
    /// A one-off reader waits for its output up to now: it is due whenever it was last read.
    pub waited: bool,
    /// When it was last read (or began running), Unix ms.
    pub last_read_ms: i64,
    /// Log reads one round of it takes (its readable containers).
    pub reads: u32,
}

/// The jobs to read now within `tokens` log reads: jobs a one-off reader waits for first, then
/// followed jobs whose interval passed, then the others whose interval passed, each group
/// longest-waiting first. Returns the chosen jobs and the reads they take.
pub fn plan_reads<'a>(
    candidates: &[Candidate<'a>],
    now_ms: i64,
    settings: &LiveSettings,
    tokens: f64,
) -> (Vec<&'a str>, u32) {
    let mut due: Vec<&Candidate<'a>> = candidates
        .iter()
        .filter(|c| {
            let every = if c.followed {
                settings.followed_interval_ms
            } else {
                settings.background_interval_ms
            };
            c.reads > 0 && (c.waited || now_ms - c.last_read_ms >= every)
        })
        .collect();
    due.sort_by_key(|c| (!c.waited, !c.followed, c.last_read_ms));
    let mut left = tokens;
    let mut used = 0;
    let mut chosen = Vec::new();
    for c in due {
        if f64::from(c.reads) > left {
            // Waited-for and followed jobs keep their place: nothing behind them jumps the queue.
            break;
        }
        left -= f64::from(c.reads);
        used += c.reads;
        chosen.push(c.job_id);
    }
    (chosen, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(sec: u32, nanos: u32, line: &str) -> String {
        format!("2026-01-02T03:04:{sec:02}.{nanos:09}Z {line}\n")
    }

    #[test]
    fn only_new_whole_lines_are_taken_each_once() {
        let start = Cursor::default();
        // First read: two lines of second 1, a line of second 2 still being written.
        let r1 = format!(
            "{}{}2026-01-02T03:04:02.1Z par",
            stamp(1, 1, "a"),
            stamp(1, 2, "b")
        );
        let n1 = take_new(&r1, &start);
        assert_eq!(n1.text, "a\nb\n");
        assert_eq!(
            n1.cursor,
            Cursor {
                bytes: 4,
                since: Some("2026-01-02T03:04:01Z".into()),
                skip: 2
            }
        );
        // Next read since second 1: a and b again, then the finished line and one more.
        let r2 = format!(
            "{}{}{}{}",
            stamp(1, 1, "a"),
            stamp(1, 2, "b"),
            stamp(2, 1, "partial"),
            stamp(2, 5, "c")
        );
        let n2 = take_new(&r2, &n1.cursor);
        assert_eq!(n2.text, "partial\nc\n");
        assert_eq!(n2.cursor.bytes, 14);
        assert_eq!(n2.cursor.skip, 2);
        // Nothing new: the same lines again.
        let n3 = take_new(
            &format!("{}{}", stamp(2, 1, "partial"), stamp(2, 5, "c")),
            &n2.cursor,
        );
        assert_eq!(n3.text, "");
        assert_eq!(n3.cursor, n2.cursor);
    }

    #[test]
    fn a_reader_that_restarted_skips_the_bytes_already_shipped() {
        let cursor = Cursor {
            bytes: 4,
            since: None,
            skip: 0,
        };
        let r = format!(
            "{}{}{}",
            stamp(1, 1, "a"),
            stamp(1, 2, "b"),
            stamp(3, 0, "c")
        );
        let n = take_new(&r, &cursor);
        assert_eq!(n.text, "c\n");
        assert_eq!(n.cursor.bytes, 6);
        assert_eq!(n.cursor.skip, 1);
    }

    #[test]
    fn logs_without_timestamps_are_cut_at_the_byte_offset() {
        let cursor = Cursor {
            bytes: 2,
            since: None,
            skip: 0,
        };
        let n = take_new("a\nb\nc", &cursor);
        assert_eq!(n.text, "b\n");
        assert_eq!(n.cursor.bytes, 4);
        assert_eq!(n.cursor.since, None);
        // A line that merely starts like a date is not a timestamp.
        assert_eq!(second_of("2026-01-02 hello"), None);
    }

    #[test]
    fn followed_jobs_come_first_and_the_budget_holds() {
        let s = LiveSettings::default();
        let c = |id: &'static str, followed: bool, last: i64, reads: u32| Candidate {
            job_id: id,
            followed,
            waited: false,
            last_read_ms: last,
            reads,
        };
        let now = 1_000_000;
        let list = [
            c("bg-old", false, now - 400_000, 1),
            c("bg-recent", false, now - 10_000, 1),
            c("f-due", true, now - 6_000, 2),
            c("f-recent", true, now - 1_000, 1),
            c("bg-due", false, now - 300_000, 1),
        ];
        let (chosen, used) = plan_reads(&list, now, &s, 10.0);
        assert_eq!(chosen, vec!["f-due", "bg-old", "bg-due"]);
        assert_eq!(used, 4);
        let (chosen, used) = plan_reads(&list, now, &s, 2.5);
        assert_eq!((chosen, used), (vec!["f-due"], 2));
        let (chosen, _) = plan_reads(&list, now, &s, 1.0);
        assert!(chosen.is_empty(), "a followed job is not passed over");
    }

    #[test]
    fn a_job_a_reader_waits_for_is_read_first_however_recently_it_was_read() {
        let s = LiveSettings::default();
        let now = 1_000_000;
        let c = |id: &'static str, followed: bool, waited: bool, last: i64| Candidate {
            job_id: id,
            followed,
            waited,
            last_read_ms: last,
            reads: 1,
        };
        let list = [
            c("f-due", true, false, now - 9_000),
            c("bg-due", false, false, now - 400_000),
            c("waited-just-read", false, true, now - 500),
            c("waited-followed", true, true, now - 1_000),
        ];
        let (chosen, used) = plan_reads(&list, now, &s, 10.0);
        assert_eq!(
            chosen,
            vec!["waited-followed", "waited-just-read", "f-due", "bg-due"]
        );
        assert_eq!(used, 4);
        // Within a tight budget, the waited-for jobs go first.
        let (chosen, _) = plan_reads(&list, now, &s, 2.0);
        assert_eq!(chosen, vec!["waited-followed", "waited-just-read"]);
        // A job with nothing readable is never chosen, waited for or not.
        let none = [Candidate {
            reads: 0,
            ..c("empty", false, true, now)
        }];
        assert!(plan_reads(&none, now, &s, 10.0).0.is_empty());
    }

    #[test]
    fn a_segment_list_without_an_answer_reads_as_none_and_round_trips_one() {
        let j = crate::ids::JobId::parse("j").unwrap();
        let old = Manifest::read_or_empty(&j, br#"{"job_id":"j","segments":[]}"#);
        assert_eq!(old.answered_ms, None);
        let with = Manifest {
            answered_ms: Some(42),
            ..old
        };
        let json = serde_json::to_string(&with).unwrap_or_default();
        assert!(json.contains(r#""answered_ms":42"#), "{json}");
        // The id is the same JSON string it was when it was a `String`.
        assert!(json.starts_with(r#"{"job_id":"j","#), "{json}");
        let back: Manifest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, with);
    }

    #[test]
    fn old_segments_merge_into_one_at_the_first_key_with_the_last_seq() {
        let mut m = Manifest::empty(crate::ids::JobId::parse("j").unwrap());
        let mut seq = 0;
        for i in 0..(MERGE_ABOVE as u64 + 1) {
            for c in ["job", "side"] {
                seq += 1;
                if c == "side" && i > 2 {
                    continue;
                }
                m.segments.push(Segment {
                    seq,
                    pod: "p".into(),
                    container: c.into(),
                    offset: i * 10,
                    bytes: 10,
                    key: segment_key("j", "p", c, i * 10),
                    main: c == "job",
                    at_ms: i as i64,
                });
            }
        }
        let shipped = m.shipped("p", "job");
        let batch = m.merge_candidates().unwrap_or_default();
        assert_eq!(batch.len(), MERGE_BATCH);
        assert!(batch.iter().all(|s| s.container == "job"));
        let last_seq = batch[MERGE_BATCH - 1].seq;
        m.apply_merge(&batch);
        assert_eq!(m.shipped("p", "job"), shipped);
        let merged = m
            .segments
            .iter()
            .find(|s| s.container == "job")
            .expect("no job segment");
        assert_eq!(
            (merged.offset, merged.bytes, merged.seq, merged.key.as_str()),
            (
                0,
                10 * MERGE_BATCH as u64,
                last_seq,
                "logs/j/live/p/job/000000000000.log"
            )
        );
        assert!(
            m.segments.windows(2).all(|w| w[0].seq < w[1].seq),
            "still in seq order"
        );
        assert!(m.merge_candidates().is_none());
    }

    #[test]
    fn manifest_tells_the_bytes_shipped_per_container() {
        let seg = |seq, c: &str, offset, bytes| Segment {
            seq,
            pod: "p".into(),
            container: c.into(),
            offset,
            bytes,
            key: segment_key("j", "p", c, offset),
            main: c == "job",
            at_ms: 0,
        };
        let m = Manifest {
            job_id: crate::ids::JobId::parse("j").unwrap(),
            segments: vec![
                seg(1, "job", 0, 10),
                seg(2, "init", 0, 3),
                seg(3, "job", 10, 5),
            ],
            answered_ms: None,
        };
        assert_eq!(m.shipped("p", "job"), 15);
        assert_eq!(m.shipped("p", "init"), 3);
        assert_eq!(m.shipped("q", "job"), 0);
        assert_eq!(m.last_seq(), 3);
        assert_eq!(m.segments[2].key, "logs/j/live/p/job/000000000010.log");
    }
}
