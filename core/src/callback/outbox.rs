//! The outbox: one entry per reported state change, written by the store in the same write as
//! the change, then fanned out to its targets and delivered by the sender. Everything here is a
//! pure decision over entries; the store keeps them and the sender does the I/O.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{EventKind, Format, Notify, Subscription};
use crate::job::{ArrayCounts, ArrayRole, EventSource, JobEvent, JobRecord, JobState};

/// A delivery that has not succeeded this long after its event is given up.
pub const GIVE_UP_AFTER_MS: i64 = 24 * 3_600 * 1_000;
/// The first retry's delay; each further one doubles it, up to [`MAX_RETRY_DELAY_MS`].
pub const FIRST_RETRY_DELAY_MS: i64 = 1_000;
/// The longest wait between two attempts of a delivery: a receiver that comes back hears from
/// the platform within this (plus one delivery's timeout).
pub const MAX_RETRY_DELAY_MS: i64 = 20_000;

/// What a callback reports: the job as the write that made the change left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackEvent {
    /// Which change.
    pub kind: EventKind,
    /// The job's id.
    pub job_id: crate::ids::JobId,
    /// The job's name (its spec's).
    pub job_name: String,
    /// Its tenant.
    pub tenant: crate::ids::TenantId,
    /// The job's state after the change (`QUEUED` for a requeued job).
    pub state: JobState,
    /// The attempt the change belongs to (a requeue reports the attempt that ended).
    pub attempt: u32,
    /// Machine-readable reason: the failure's (`NodeLost`, `OutOfMemory`, ...) for a failed,
    /// stopped or requeued job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For people: the platform event's message.
    pub message: String,
    /// When the change happened, Unix ms.
    pub at_ms: i64,
    /// The job's clocks, Unix ms.
    pub submitted_at_ms: i64,
    /// Admission of the current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at_ms: Option<i64>,
    /// When every pod of the current attempt ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at_ms: Option<i64>,
    /// When the job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// The job's place in an array: a child's parent and index, a parent's counts (none for a
    /// job outside arrays, and in entries written by older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<CallbackArray>,
}

/// What a callback says of an array: a child names its parent and index, the parent (whose one
/// callback after its submission is its end) its children's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackArray {
    /// The array's size.
    pub size: u32,
    /// A child's parent job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::ids::JobId>,
    /// A child's index (`TUNEPLANE_ARRAY_INDEX`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The parent's children by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<ArrayCounts>,
}

impl CallbackArray {
    /// The array part of `job`'s callbacks, if it is an array's parent or child.
    pub fn of(job: &JobRecord) -> Option<CallbackArray> {
        let size = job.array_size()?;
        match job.array.as_ref()? {
            ArrayRole::Child(c) => Some(CallbackArray {
                size,
                parent: Some(c.parent.clone()),
                index: Some(c.index),
                counts: None,
            }),
            ArrayRole::Parent(p) => Some(CallbackArray {
                size,
                parent: None,
                index: None,
                counts: Some(p.counts),
            }),
        }
    }
}

/// Where one delivery goes: a job's own callback or one of its tenant's subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TargetRef {
    /// The URL.
    pub url: String,
    /// The body's shape.
    pub format: Format,
    /// `job` for the job's `notify`, else the subscription's id.
    pub source: String,
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeliveryEnd {
    /// The receiver answered 2xx.
    Delivered {
        /// When, Unix ms.
        at_ms: i64,
        /// The status it answered.
        status: u16,
    },
    /// No more attempts: the reason says why.
    GaveUp {
        /// When, Unix ms.
        at_ms: i64,
        /// Why (the last error, a refused address, the day passed, the tenant's cap).
        reason: String,
    },
}

/// One event's delivery to one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// Where it goes.
    pub target: TargetRef,
    /// Attempts made so far.
    pub attempts: u32,
    /// Not before this (Unix ms).
    pub next_at_ms: i64,
    /// The last failed attempt's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Set once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<DeliveryEnd>,
}

impl Delivery {
    /// True once it ended, delivered or given up.
    pub fn ended(&self) -> bool {
        self.end.is_some()
    }
}

/// One reported state change in the outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// The event id: the same for every delivery and retry of this change (receivers deduplicate
    /// by it), a digest of the job id and the platform event's key.
    pub id: String,
    /// Order among the job's entries: the job's version after the write, times 16, plus the
    /// event's place in the write.
    pub order: u64,
    /// What happened.
    pub event: CallbackEvent,
    /// The job's own callbacks, as its spec named them at the write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<Notify>,
    /// The deliveries, once the sender fanned the entry out (`None` before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Vec<Delivery>>,
    /// When the entry was written, Unix ms.
    pub created_ms: i64,
    /// The store's revision of the entry (conditional writes); 0 before its first write.
    #[serde(default)]
    pub rev: u64,
}

impl OutboxEntry {
    /// The store key: the job id then the order, so that one job's entries list in order.
    pub fn key(&self) -> String {
        entry_key(&self.event.job_id, self.order)
    }

    /// True once fanned out and every delivery ended (nothing left to do).
    pub fn finished(&self) -> bool {
        self.deliveries
            .as_ref()
            .is_some_and(|d| d.iter().all(Delivery::ended))
    }

    /// Deliveries fanned out and not ended yet.
    pub fn outstanding(&self) -> usize {
        self.deliveries
            .as_ref()
            .map_or(0, |d| d.iter().filter(|d| !d.ended()).count())
    }
}

/// The store key of the entry of `job_id` with `order`.
pub fn entry_key(job_id: &str, order: u64) -> String {
    format!("{job_id}#{order:020}")
}

/// The change a platform event of a job write reports, if it reports one: `submitted`, the
/// state events (`state-RUNNING`, `a2-state-ADMITTED`, ...), requeues (`attempt-1-requeued`), a
/// job failed by its dependencies (`dependency-failed`) and an array parent's end
/// (`array-succeeded`, `array-failed`, `array-stopped`). An array parent's other changes
/// (`array-running`) report nothing: its children report their own, so the parent's callbacks
/// are its submission and exactly one end, written once, when its last child ended.
pub fn kind_of(event: &JobEvent) -> Option<EventKind> {
    if event.source != EventSource::Platform {
        return None;
    }
    match event.key.as_str() {
        "submitted" => return Some(EventKind::Queued),
        "dependency-failed" | "array-failed" => return Some(EventKind::Failed),
        "array-succeeded" => return Some(EventKind::Succeeded),
        "array-stopped" => return Some(EventKind::Stopped),
        _ => {}
    }
    if let Some(n) = event
        .key
        .strip_prefix("attempt-")
        .and_then(|rest| rest.strip_suffix("-requeued"))
    {
        return n.parse::<u32>().ok().map(|_| EventKind::Requeued);
    }
    // `state-X` for the first attempt, `a<N>-state-X` for later ones.
    let state = match event.key.split_once("-state-") {
        Some((prefix, state)) => {
            let n = prefix.strip_prefix('a')?;
            n.parse::<u32>().ok()?;
            state
        }
        None => event.key.strip_prefix("state-")?,
    };
    match JobState::parse(state)? {
        JobState::Queued => Some(EventKind::Queued),
        JobState::Admitted => Some(EventKind::Admitted),
        JobState::Running => Some(EventKind::Running),
        JobState::Succeeded => Some(EventKind::Succeeded),
        JobState::Failed => Some(EventKind::Failed),
        JobState::Stopped => Some(EventKind::Stopped),
    }
}

/// The event id of `job_id`'s platform event `key`: stable across retries and rewrites.
pub fn event_id(job_id: &str, key: &str) -> String {
    let digest = Sha256::new()
        .chain_update(job_id.as_bytes())
        .chain_update([0])
        .chain_update(key.as_bytes())
        .finalize();
    format!("ev_{}", &hex::encode(digest)[..32])
}

/// The outbox entries of a job write: one per event of `events` that reports a change, for the
/// record `job` as stored with `version`, at `now_ms`.
pub fn entries_for(
    job: &JobRecord,
    events: &[JobEvent],
    version: u64,
    now_ms: i64,
) -> Vec<OutboxEntry> {
    events
        .iter()
        .filter_map(|e| kind_of(e).map(|kind| (e, kind)))
        .enumerate()
        .map(|(i, (e, kind))| {
            let (attempt, reason) = match kind {
                EventKind::Requeued => {
                    let ended = job.attempts.last();
                    (
                        ended.map_or(job.attempt.saturating_sub(1), |a| a.number),
                        ended.map(|a| format!("{:?}", a.failure.reason)),
                    )
                }
                _ => (
                    job.attempt,
                    job.failure
                        .as_ref()
                        .filter(|_| kind == EventKind::Failed || kind == EventKind::Stopped)
                        .map(|f| format!("{:?}", f.reason)),
                ),
            };
            OutboxEntry {
                id: event_id(&job.id, &e.key),
                order: version.saturating_mul(16).saturating_add(i as u64),
                event: CallbackEvent {
                    kind,
                    job_id: job.id.clone(),
                    job_name: job.spec.name.clone(),
                    tenant: job.tenant.clone(),
                    state: job.state,
                    attempt,
                    reason,
                    message: e.message.clone(),
                    at_ms: e.at_ms,
                    submitted_at_ms: job.submitted_at_ms,
                    admitted_at_ms: job.admitted_at_ms,
                    running_at_ms: job.running_at_ms,
                    finished_at_ms: job.finished_at_ms,
                    array: CallbackArray::of(job),
                },
                notify: job.spec.notify.clone(),
                deliveries: None,
                created_ms: now_ms,
                rev: 0,
            }
        })
        .collect()
}

/// Fans `entry` out: one delivery per target that wants its event (the job's callbacks, then the
/// tenant's `subscriptions`), once per URL and format. A tenant with `outstanding` undelivered
/// deliveries already gets no more than `cap` in all: the rest are given up at once, saying so.
pub fn fan_out(
    entry: &mut OutboxEntry,
    subscriptions: &[Subscription],
    outstanding: usize,
    cap: usize,
    now_ms: i64,
) {
    let kind = entry.event.kind;
    let mut seen = HashSet::new();
    let mut targets = Vec::new();
    let own = entry
        .notify
        .iter()
        .filter(|n| n.wants(kind))
        .map(|n| TargetRef {
            url: n.url.clone(),
            format: n.format,
            source: "job".into(),
        });
    let subscribed = subscriptions
        .iter()
        .filter(|s| s.tenant == entry.event.tenant && s.events.contains(&kind))
        .map(|s| TargetRef {
            url: s.url.clone(),
            format: s.format,
            source: s.id.clone(),
        });
    for target in own.chain(subscribed) {
        if seen.insert((target.url.clone(), target.format)) {
            targets.push(target);
        }
    }
    let mut room = cap.saturating_sub(outstanding);
    let deliveries = targets
        .into_iter()
        .map(|target| {
            let end = if room == 0 {
                Some(DeliveryEnd::GaveUp {
                    at_ms: now_ms,
                    reason: format!(
                        "tenant {} has {outstanding} deliveries outstanding, the most allowed ({cap}); fix or remove failing receivers",
                        entry.event.tenant
                    ),
                })
            } else {
                room -= 1;
                None
            };
            Delivery {
                target,
                attempts: 0,
                next_at_ms: now_ms,
                last_error: None,
                end,
            }
        })
        .collect();
    entry.deliveries = Some(deliveries);
}

/// The deliveries to attempt at `now_ms`, as (entry, delivery) indices into `entries`, which
/// must be in store-key order (each job's entries in order). Per job and target, only the
/// oldest delivery that has not ended may go: a later event never overtakes an earlier one. An
/// entry not fanned out yet holds back its job's later entries.
pub fn due(entries: &[OutboxEntry], now_ms: i64) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut blocked: BTreeMap<&str, (bool, HashSet<&TargetRef>)> = BTreeMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let (held, targets) = blocked.entry(entry.event.job_id.as_str()).or_default();
        if *held {
            continue;
        }
        let Some(deliveries) = &entry.deliveries else {
            *held = true;
            continue;
        };
        for (j, d) in deliveries.iter().enumerate() {
            if d.ended() || !targets.insert(&d.target) {
                continue;
            }
            if d.next_at_ms <= now_ms {
                out.push((i, j));
            }
        }
    }
    out
}

/// How long after its `attempts`-th failed attempt a delivery is tried again.
pub fn retry_delay_ms(attempts: u32) -> i64 {
    let doublings = attempts.saturating_sub(1).min(20);
    FIRST_RETRY_DELAY_MS
        .saturating_mul(1_i64 << doublings)
        .min(MAX_RETRY_DELAY_MS)
}

/// Records a 2xx answer.
pub fn delivered(d: &mut Delivery, status: u16, now_ms: i64) {
    d.attempts += 1;
    d.end = Some(DeliveryEnd::Delivered {
        at_ms: now_ms,
        status,
    });
}

/// Records a failed attempt of the delivery of an event written at `created_ms`: retried later,
/// or given up when `permanent` (a refused address, 410 Gone) or the day has passed.
pub fn failed(d: &mut Delivery, error: String, permanent: bool, created_ms: i64, now_ms: i64) {
    d.attempts += 1;
    if permanent || now_ms.saturating_sub(created_ms) >= GIVE_UP_AFTER_MS {
        let reason = if permanent {
            error.clone()
        } else {
            format!(
                "no answer 2xx within 24 h ({} attempts); last: {error}",
                d.attempts
            )
        };
        d.end = Some(DeliveryEnd::GaveUp {
            at_ms: now_ms,
            reason,
        });
    } else {
        d.next_at_ms = now_ms.saturating_add(retry_delay_ms(d.attempts));
    }
    d.last_error = Some(error);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform(key: &str) -> JobEvent {
        JobEvent {
            at_ms: 1,
            key: key.into(),
            source: EventSource::Platform,
            kind: "Normal".into(),
            reason: "x".into(),
            message: "m".into(),
            object: None,
        }
    }

    #[test]
    fn platform_state_events_submissions_and_requeues_report_changes() {
        let kinds: Vec<Option<EventKind>> = [
            "submitted",
            "state-ADMITTED",
            "a2-state-RUNNING",
            "state-SUCCEEDED",
            "a3-state-FAILED",
            "state-STOPPED",
            "attempt-1-requeued",
            "pending-ImagePull",
            "a-state-RUNNING",
            "attempt-x-requeued",
            "dependency-failed",
            "array-running",
            "array-succeeded",
            "array-failed",
            "array-stopped",
            "array-stop",
        ]
        .iter()
        .map(|k| kind_of(&platform(k)))
        .collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            vec![
                Some(Queued),
                Some(Admitted),
                Some(Running),
                Some(Succeeded),
                Some(Failed),
                Some(Stopped),
                Some(Requeued),
                None,
                None,
                None,
                Some(Failed),
                None,
                Some(Succeeded),
                Some(Failed),
                Some(Stopped),
                None,
            ]
        );
        let mut k8s = platform("state-RUNNING");
        k8s.source = EventSource::Kubernetes;
        assert_eq!(kind_of(&k8s), None, "only the platform's own events count");
    }

    #[test]
    fn an_array_reports_each_child_with_its_place_and_its_parents_end_once_with_the_counts() {
        let spec = crate::spec::validate(
            "name: sweep\nimage: i\nentrypoint: 'true'\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\narray: {size: 3}\n",
            None,
            &Default::default(),
        )
        .unwrap()
        .spec;
        let mut parent =
            JobRecord::new_queued("j-p".parse().unwrap(), "t".parse().unwrap(), spec, "ab", 1);
        parent.array = Some(ArrayRole::Parent(Default::default()));
        let (child, submitted) = crate::array::child_record(&parent, 2, 5).unwrap();
        let queued = entries_for(&child, &[submitted], 1, 5);
        let place = queued.first().and_then(|e| e.event.array.clone()).unwrap();
        assert_eq!(
            (place.parent.as_deref(), place.index, place.size),
            (Some("j-p"), Some(2), 3)
        );
        // The parent's writes as the array step makes them: running, then its end.
        let mut reported = Vec::new();
        for (version, key, state, succeeded) in [
            (2, "array-running", JobState::Running, 1),
            (3, "array-succeeded", JobState::Succeeded, 3),
        ] {
            parent.state = state;
            parent.array = Some(ArrayRole::Parent(crate::job::ArrayParent {
                created: 3,
                skipped: 0,
                counts: ArrayCounts {
                    succeeded,
                    running: 3 - succeeded,
                    ..ArrayCounts::default()
                },
            }));
            reported.extend(entries_for(&parent, &[platform(key)], version, 9));
        }
        assert_eq!(reported.len(), 1, "{reported:?}");
        let end = &reported[0].event;
        assert_eq!(end.kind, EventKind::Succeeded);
        let counts = end.array.as_ref().and_then(|a| a.counts).unwrap();
        assert_eq!((counts.succeeded, counts.running), (3, 0));
        // A job outside arrays says nothing of them.
        let mut plain = child.clone();
        plain.array = None;
        plain.spec.array = None;
        assert!(CallbackArray::of(&plain).is_none());
    }

    #[test]
    fn event_ids_are_stable_and_distinct_per_job_and_key() {
        assert_eq!(
            event_id("j1", "state-RUNNING"),
            event_id("j1", "state-RUNNING")
        );
        assert_ne!(
            event_id("j1", "state-RUNNING"),
            event_id("j2", "state-RUNNING")
        );
        assert_ne!(
            event_id("j1", "state-RUNNING"),
            event_id("j1", "a2-state-RUNNING")
        );
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        let delays: Vec<i64> = (1..=7).map(retry_delay_ms).collect();
        assert_eq!(
            delays,
            vec![1_000, 2_000, 4_000, 8_000, 16_000, 20_000, 20_000]
        );
        assert_eq!(retry_delay_ms(u32::MAX), MAX_RETRY_DELAY_MS);
    }

    fn entry(job: &str, order: u64, targets: &[&str]) -> OutboxEntry {
        OutboxEntry {
            id: event_id(job, &order.to_string()),
            order,
            event: CallbackEvent {
                kind: EventKind::Running,
                job_id: job.parse().unwrap(),
                job_name: "n".into(),
                tenant: "t".parse().unwrap(),
                state: JobState::Running,
                attempt: 1,
                reason: None,
                message: String::new(),
                at_ms: 0,
                submitted_at_ms: 0,
                admitted_at_ms: None,
                running_at_ms: None,
                finished_at_ms: None,
                array: None,
            },
            notify: Vec::new(),
            deliveries: Some(
                targets
                    .iter()
                    .map(|u| Delivery {
                        target: TargetRef {
                            url: (*u).into(),
                            format: Format::Json,
                            source: "job".into(),
                        },
                        attempts: 0,
                        next_at_ms: 0,
                        last_error: None,
                        end: None,
                    })
                    .collect(),
            ),
            created_ms: 0,
            rev: 1,
        }
    }

    #[test]
    fn a_later_event_waits_for_the_earlier_one_to_the_same_target_only() {
        let mut entries = vec![
            entry("a", 16, &["https://x/1", "https://x/2"]),
            entry("a", 32, &["https://x/1", "https://x/2"]),
            entry("b", 16, &["https://x/1"]),
        ];
        assert_eq!(due(&entries, 0), vec![(0, 0), (0, 1), (2, 0)]);
        // The first to /2 delivered, the first to /1 waits for a retry: /2's next may go.
        delivered(
            entries[0].deliveries.as_mut().unwrap().get_mut(1).unwrap(),
            200,
            5,
        );
        failed(
            entries[0].deliveries.as_mut().unwrap().get_mut(0).unwrap(),
            "500".into(),
            false,
            0,
            5,
        );
        assert_eq!(due(&entries, 10), vec![(1, 1), (2, 0)]);
        assert_eq!(due(&entries, 1_005), vec![(0, 0), (1, 1), (2, 0)]);
        // An entry not fanned out holds back its job's later ones.
        entries[0].deliveries = None;
        assert_eq!(due(&entries, 1_005), vec![(2, 0)]);
    }

    #[test]
    fn a_delivery_gives_up_after_a_day_or_at_once_when_permanent() {
        let mut e = entry("a", 16, &["https://x/1"]);
        let d = e.deliveries.as_mut().unwrap().get_mut(0).unwrap();
        failed(d, "HTTP 500".into(), false, 0, 1_000);
        assert!(!d.ended());
        assert_eq!(d.next_at_ms, 2_000);
        failed(d, "HTTP 500".into(), false, 0, GIVE_UP_AFTER_MS);
        match &d.end {
            Some(DeliveryEnd::GaveUp { reason, .. }) => {
                assert!(reason.contains("within 24 h (2 attempts)"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let mut e = entry("a", 16, &["https://x/1"]);
        let d = e.deliveries.as_mut().unwrap().get_mut(0).unwrap();
        failed(d, "10.0.0.1 is private".into(), true, 0, 1);
        assert!(d.ended());
        assert!(e.finished());
    }

    #[test]
    fn fan_out_dedupes_targets_filters_events_and_caps_a_tenant() {
        let mut e = entry("a", 16, &[]);
        e.deliveries = None;
        e.notify = vec![
            Notify {
                url: "https://x/1".into(),
                events: vec![EventKind::Running],
                format: Format::Json,
            },
            Notify {
                url: "https://x/q".into(),
                events: vec![EventKind::Queued],
                format: Format::Json,
            },
        ];
        let sub = |id: &str, url: &str, tenant: &str| Subscription {
            id: id.into(),
            tenant: tenant.parse().unwrap(),
            url: url.into(),
            events: EventKind::ALL.to_vec(),
            format: Format::Json,
            created_ms: 0,
            created_by: "k".into(),
        };
        let subs = vec![
            sub("s1", "https://x/1", "t"),
            sub("s2", "https://x/2", "t"),
            sub("s3", "https://x/3", "other"),
        ];
        fan_out(&mut e, &subs, 0, 100, 7);
        let urls: Vec<(&str, &str)> = e
            .deliveries
            .as_ref()
            .unwrap()
            .iter()
            .map(|d| (d.target.url.as_str(), d.target.source.as_str()))
            .collect();
        assert_eq!(urls, vec![("https://x/1", "job"), ("https://x/2", "s2")]);
        fan_out(&mut e, &subs, 99, 100, 7);
        let ends: Vec<bool> = e
            .deliveries
            .as_ref()
            .unwrap()
            .iter()
            .map(Delivery::ended)
            .collect();
        assert_eq!(ends, vec![false, true], "only one more fits under the cap");
        assert_eq!(e.outstanding(), 1);
    }
}
