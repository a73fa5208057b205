//! Array jobs (docs/design.md §6, "Arrays"): one submission and one capsule, a parent record that
//! summarises, and `size` children `<parent>-<index>` that are each queued, admitted, retried,
//! archived and counted as a job of their own.
//!
//! The API stores only the parent (one write, whatever the size). The reconciler creates the
//! children a chunk per pass (creates are idempotent: a child that exists is left alone, so a pass
//! that stopped half-way is finished by the next), holds back the children beyond
//! `array.parallelism`, passes a stop of the parent on to every child that has not ended, and
//! keeps the parent's counts by state. Everything here is pure; the reconciler's `arrays` module
//! does the writes.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::job::{Failure, FailureReason, JobEvent, JobRecord, JobState};

pub use crate::job::{ArrayChild, ArrayCounts, ArrayParent, ArrayRole};

/// The id of child `index` of `parent`.
pub fn child_id(parent: &str, index: u32) -> String {
    format!("{parent}-{index}")
}

impl JobRecord {
    /// The parent's book, for an array parent.
    pub fn array_parent(&self) -> Option<&ArrayParent> {
        match &self.array {
            Some(ArrayRole::Parent(p)) => Some(p),
            _ => None,
        }
    }

    /// Its place in its array, for an array child.
    pub fn array_child(&self) -> Option<&ArrayChild> {
        match &self.array {
            Some(ArrayRole::Child(c)) => Some(c),
            _ => None,
        }
    }

    /// True for an array parent (a record that is never admitted itself).
    pub fn is_array_parent(&self) -> bool {
        self.array_parent().is_some()
    }

    /// The array's size, for a parent or a child.
    pub fn array_size(&self) -> Option<u32> {
        self.spec.array.map(|a| a.size)
    }
}

/// Child `index` of `parent`: a `QUEUED` record with the parent's tenant, spec and capsule and
/// its submission time (children wait in the queue from when the array was submitted), and its
/// first event. Fails only when the child's id would break the id rule (a parent id longer than
/// [`crate::ids::ID_MAX`] `-` [`crate::ids::CHILD_SUFFIX_MAX`]: see [`crate::ids::Id::child`]).
pub fn child_record(
    parent: &JobRecord,
    index: u32,
    now_ms: i64,
) -> Result<(JobRecord, JobEvent), crate::ids::IdError> {
    let mut child = JobRecord::new_queued(
        parent.id.child(index)?,
        parent.tenant.clone(),
        parent.spec.clone(),
        parent.capsule_sha256.clone(),
        parent.submitted_at_ms,
    );
    child.array = Some(ArrayRole::Child(ArrayChild {
        parent: parent.id.clone(),
        index,
    }));
    let size = parent.array_size().unwrap_or(0);
    let event = JobEvent::platform(
        now_ms,
        "submitted".into(),
        "Normal",
        "Submitted",
        format!("child {index} of array {} ({size} children)", parent.id),
    );
    Ok((child, event))
}

/// The children to create at this pass: the next `at_most` indices after those created, none
/// once the array is being stopped.
pub fn to_create(parent: &JobRecord, at_most: u32) -> std::ops::Range<u32> {
    let (Some(book), Some(size)) = (parent.array_parent(), parent.array_size()) else {
        return 0..0;
    };
    if parent.stop_requested {
        return book.created..book.created;
    }
    book.created..size.min(book.created.saturating_add(at_most))
}

/// Children in the queue held back by their array's `parallelism`, with the message each
/// waits with: per array, the children admitted or running count against the limit, and the
/// rest of the room goes to its queued children in index order.
pub fn held_back<'a>(active: impl IntoIterator<Item = &'a JobRecord>) -> HashMap<&'a str, String> {
    let mut holding: HashMap<&str, u32> = HashMap::new();
    let mut queued: BTreeMap<&str, Vec<(u32, &JobRecord)>> = BTreeMap::new();
    for job in active {
        let (Some(child), Some(array)) = (job.array_child(), job.spec.array) else {
            continue;
        };
        if array.parallelism.is_none() {
            continue;
        }
        match job.state {
            JobState::Admitted | JobState::Running => {
                *holding.entry(child.parent.as_str()).or_default() += 1;
            }
            // In the queue (as `admission::order::in_queue` says; not imported: the job types
            // use this module's).
            JobState::Queued if !job.stop_requested => queued
                .entry(child.parent.as_str())
                .or_default()
                .push((child.index, job)),
            _ => {}
        }
    }
    let mut held = HashMap::new();
    for (parent, mut children) in queued {
        let limit = children[0]
            .1
            .spec
            .array
            .and_then(|a| a.parallelism)
            .unwrap_or(u32::MAX);
        let running = holding.get(parent).copied().unwrap_or(0);
        let room = limit.saturating_sub(running) as usize;
        children.sort_unstable_by_key(|(index, _)| *index);
        for (_, job) in children.into_iter().skip(room) {
            held.insert(
                job.id.as_str(),
                // The same text while the array runs: a child's reason is not written again
                // each time another child starts or ends.
                format!(
                    "array {parent} runs at most {limit} of its children at once (array.parallelism); this child starts when one of them ends"
                ),
            );
        }
    }
    held
}

/// The parent's state once its counts are `counts`: `QUEUED` until a child leaves the queue,
/// `RUNNING` while children are admitted, run or ended, and once every child ended
/// `SUCCEEDED` if all succeeded, `STOPPED` if the array was stopped (and none failed), `FAILED`
/// otherwise (with how many failed).
pub fn parent_state(
    counts: &ArrayCounts,
    size: u32,
    stop_requested: bool,
) -> (JobState, Option<Failure>) {
    if counts.ended() < size {
        let started = counts.holding() + counts.ended() > 0;
        let state = if started {
            JobState::Running
        } else {
            JobState::Queued
        };
        return (state, None);
    }
    if counts.succeeded == size {
        return (JobState::Succeeded, None);
    }
    if counts.failed == 0 && (stop_requested || counts.stopped > 0) {
        let message = format!("the array was stopped: {}", counts.summary(size));
        return (
            JobState::Stopped,
            Some(Failure::new(FailureReason::StopRequested, message)),
        );
    }
    let message = format!(
        "{} of its {size} children failed ({}); see tuneplane jobs --children",
        counts.failed,
        counts.summary(size)
    );
    (
        JobState::Failed,
        Some(Failure::new(FailureReason::ArrayChildFailed, message)),
    )
}

/// The live counts (children that have not ended) of each parent among `active`.
pub fn live_counts(active: &[JobRecord]) -> HashMap<&str, (ArrayCounts, HashSet<&str>)> {
    let mut out: HashMap<&str, (ArrayCounts, HashSet<&str>)> = HashMap::new();
    for job in active {
        if let Some(child) = job.array_child() {
            let entry = out.entry(child.parent.as_str()).or_default();
            entry.0.add(job.state);
            entry.1.insert(job.id.as_str());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ArraySpec;

    fn parent(size: u32, parallelism: Option<u32>) -> JobRecord {
        let spec = serde_json::json!({
            "name": "sweep", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": [{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
            "cpus": 1.0, "memory_gb": 1.0}], "deadlines": {"pre_running_seconds": 60,
            "run_seconds": 600}, "priority": 0, "labels": {}, "namespace": "ns",
            "platform_version": "0", "array": {"size": size, "parallelism": parallelism}
        });
        let spec = serde_json::from_value(spec).expect("spec");
        let mut p = JobRecord::new_queued(
            "j-p".parse().unwrap(),
            "t".parse().expect("tenant"),
            spec,
            "ab",
            5,
        );
        p.array = Some(ArrayRole::Parent(ArrayParent::default()));
        p
    }

    #[test]
    fn array_specs_are_validated_with_the_field_and_what_to_do() {
        let base = "name: sweep\nimage: python:3.11\nentrypoint: python train.py\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n";
        let check = |array: &str| {
            let text = format!("{base}array: {array}\n");
            crate::spec::validate(&text, None, &crate::spec::Defaults::default())
                .map(|v| v.spec.array)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            check("{size: 6, parallelism: 2}"),
            Ok(Some(ArraySpec {
                size: 6,
                parallelism: Some(2)
            }))
        );
        assert_eq!(
            check("{size: 3}"),
            Ok(Some(ArraySpec {
                size: 3,
                parallelism: None
            }))
        );
        for (array, field) in [
            ("{size: 1}", "array.size"),
            ("{size: 10001}", "array.size"),
            ("{parallelism: 2}", "array.size"),
            ("{size: 4, parallelism: 0}", "array.parallelism"),
            ("{size: 4, parallelism: 5}", "array.parallelism"),
            ("{size: 4, paralelism: 2}", "array.paralelism"),
            ("7", "array"),
        ] {
            let err = check(array).expect_err(array);
            assert!(err.contains(field), "{array}: {err}");
        }
    }

    #[test]
    fn children_carry_the_parents_spec_capsule_and_submission_time_and_their_index() {
        let p = parent(3, None);
        let (child, event) = child_record(&p, 2, 99).unwrap();
        assert_eq!(child.id, "j-p-2");
        assert_eq!(child.submitted_at_ms, 5);
        assert_eq!(child.capsule_sha256, "ab");
        assert_eq!(child.spec, p.spec);
        assert_eq!(child.array_child().map(|c| c.index), Some(2));
        assert!(!child.is_array_parent() && p.is_array_parent());
        assert!(
            event.message.contains("child 2 of array j-p"),
            "{}",
            event.message
        );
        assert_eq!(child.array_size(), Some(3));
    }

    #[test]
    fn children_are_created_a_chunk_at_a_time_and_not_once_the_array_is_stopped() {
        let mut p = parent(10, None);
        assert_eq!(to_create(&p, 4), 0..4);
        if let Some(ArrayRole::Parent(book)) = &mut p.array {
            book.created = 8;
        }
        assert_eq!(to_create(&p, 4), 8..10);
        p.stop_requested = true;
        assert!(to_create(&p, 4).is_empty());
    }

    #[test]
    fn parallelism_holds_back_queued_children_beyond_the_room_left_in_index_order() {
        let p = parent(5, Some(2));
        let mut kids: Vec<JobRecord> = (0..5).map(|i| child_record(&p, i, 0).unwrap().0).collect();
        // Child 3 runs: one place left, for the lowest queued index.
        kids[3].state = JobState::Running;
        let held = held_back(&kids);
        let mut ids: Vec<&str> = held.keys().copied().collect();
        ids.sort_unstable();
        assert_eq!(ids, ["j-p-1", "j-p-2", "j-p-4"]);
        assert!(held["j-p-1"].contains("at most 2"), "{}", held["j-p-1"]);
        // Without parallelism nothing is held.
        let free = parent(5, None);
        let kids: Vec<JobRecord> = (0..5)
            .map(|i| child_record(&free, i, 0).unwrap().0)
            .collect();
        assert!(held_back(&kids).is_empty());
        // A child being stopped neither counts nor is held.
        let mut kids: Vec<JobRecord> = (0..3).map(|i| child_record(&p, i, 0).unwrap().0).collect();
        kids[0].stop_requested = true;
        assert!(held_back(&kids).is_empty());
    }

    #[test]
    fn the_parent_summarises_its_children() {
        let size = 4;
        let mut c = ArrayCounts::default();
        assert_eq!(parent_state(&c, size, false).0, JobState::Queued);
        c.running = 1;
        assert_eq!(parent_state(&c, size, false).0, JobState::Running);
        c = ArrayCounts {
            succeeded: 4,
            ..ArrayCounts::default()
        };
        assert_eq!(parent_state(&c, size, false), (JobState::Succeeded, None));
        assert_eq!(c.summary(size), "4/4 succeeded");
        c = ArrayCounts {
            succeeded: 2,
            stopped: 2,
            ..ArrayCounts::default()
        };
        let (state, failure) = parent_state(&c, size, true);
        assert_eq!(state, JobState::Stopped);
        assert_eq!(
            failure.map(|f| f.reason),
            Some(FailureReason::StopRequested)
        );
        c = ArrayCounts {
            succeeded: 3,
            failed: 1,
            ..ArrayCounts::default()
        };
        let (state, failure) = parent_state(&c, size, false);
        assert_eq!(state, JobState::Failed);
        let failure = failure.expect("failure");
        assert_eq!(failure.reason, FailureReason::ArrayChildFailed);
        assert!(
            failure.message.starts_with("1 of its 4 children failed"),
            "{}",
            failure.message
        );
        let live = ArrayCounts {
            running: 1,
            ..ArrayCounts::default()
        };
        let ended = ArrayCounts {
            succeeded: 1,
            ..ArrayCounts::default()
        };
        let all = ended.with_live(&live, 6);
        assert_eq!(all.summary(6), "1/6 succeeded, 1 running, 4 queued");
        let _ = ArraySpec {
            size: 2,
            parallelism: None,
        };
    }
}
