//! Dependencies between jobs (`depends_on`, docs/design.md §6, "Dependencies"): a job waits in the
//! queue, holding nothing, until each job it names has ended as asked; once one cannot (it ended
//! otherwise, or is gone) the job fails `DependencyFailed` at once. An array parent stands for all
//! of its children (it succeeds only when every child did); with `n_to_n` child i of one array
//! waits for child i of the other. Pure: the reconciler looks the states up and writes.

use crate::array::child_id;
use crate::job::{JobRecord, JobState};
use crate::spec::{Dependency, DependencyWhen};

/// Where a job stands with its dependencies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every dependency ended as asked (or it has none): it may be admitted.
    Met,
    /// It waits; the message names what for.
    Waiting(String),
    /// A dependency can no longer be met; the message says which and why.
    Failed(String),
}

/// The job ids `job` waits for, each with its entry (for an array child, `n_to_n` entries name
/// the other array's child of the same index).
pub fn targets(job: &JobRecord) -> Vec<(String, &Dependency)> {
    let index = job.array_child().map(|c| c.index);
    job.spec
        .depends_on
        .iter()
        .map(|d| match (d.n_to_n, index) {
            (true, Some(i)) => (child_id(&d.job, i), d),
            _ => (d.job.clone(), d),
        })
        .collect()
}

/// Whether `job`'s dependencies are met, given each dependency's state (`None`: no such job).
pub fn verdict(job: &JobRecord, state_of: impl Fn(&str) -> Option<JobState>) -> Verdict {
    let mut waits = Vec::new();
    for (id, d) in targets(job) {
        match (state_of(&id), d.when) {
            (None, _) => {
                return Verdict::Failed(format!("dependency {id} does not exist (any more)"));
            }
            (Some(JobState::Succeeded), _) => {}
            (Some(s), DependencyWhen::Ended) if s.is_terminal() => {}
            (Some(s), DependencyWhen::Succeeded) if s.is_terminal() => {
                return Verdict::Failed(format!(
                    "dependency {id} ended {s}; this job waited for it to succeed"
                ));
            }
            (Some(s), when) => waits.push(format!("{id} ({s}) to {}", verb(when))),
        }
    }
    if waits.is_empty() {
        Verdict::Met
    } else {
        Verdict::Waiting(format!("waits for {}", waits.join(", ")))
    }
}

fn verb(when: DependencyWhen) -> &'static str {
    match when {
        DependencyWhen::Succeeded => "succeed",
        DependencyWhen::Ended => "end",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job(depends_on: serde_json::Value, array: Option<u32>) -> JobRecord {
        let mut spec = serde_json::json!({
            "name": "train", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": [{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
            "cpus": 1.0, "memory_gb": 1.0}], "deadlines": {"pre_running_seconds": 60,
            "run_seconds": 600}, "priority": 0, "labels": {}, "namespace": "ns",
            "platform_version": "0", "depends_on": depends_on
        });
        if let Some(size) = array {
            spec["array"] = serde_json::json!({"size": size});
        }
        let spec = serde_json::from_value(spec).expect("spec");
        JobRecord::new_queued(
            "j-t".parse().unwrap(),
            "t".parse().expect("tenant"),
            spec,
            "ab",
            0,
        )
    }

    fn states(list: &[(&str, JobState)]) -> HashMap<String, JobState> {
        list.iter().map(|(id, s)| ((*id).to_owned(), *s)).collect()
    }

    #[test]
    fn a_job_waits_until_each_dependency_ended_as_asked_and_fails_once_one_cannot() {
        let j = job(
            serde_json::json!([{"job": "j-a"}, {"job": "j-b", "when": "ended"}]),
            None,
        );
        let check = |list: &[(&str, JobState)]| {
            let map = states(list);
            verdict(&j, |id| map.get(id).copied())
        };
        assert_eq!(
            check(&[("j-a", JobState::Running), ("j-b", JobState::Queued)]),
            Verdict::Waiting("waits for j-a (RUNNING) to succeed, j-b (QUEUED) to end".into())
        );
        assert_eq!(
            check(&[("j-a", JobState::Succeeded), ("j-b", JobState::Failed)]),
            Verdict::Met
        );
        let failed = check(&[("j-a", JobState::Stopped), ("j-b", JobState::Running)]);
        assert_eq!(
            failed,
            Verdict::Failed(
                "dependency j-a ended STOPPED; this job waited for it to succeed".into()
            )
        );
        assert!(
            matches!(check(&[("j-b", JobState::Succeeded)]), Verdict::Failed(m) if m.contains("j-a does not exist"))
        );
        let free = job(serde_json::json!([]), None);
        assert_eq!(verdict(&free, |_| None), Verdict::Met);
    }

    #[test]
    fn n_to_n_pairs_a_child_with_the_child_of_the_same_index() {
        let mut child = job(serde_json::json!([{"job": "j-a", "n_to_n": true}]), Some(3));
        child.array = Some(crate::array::ArrayRole::Child(crate::array::ArrayChild {
            parent: "j-t".parse().unwrap(),
            index: 2,
        }));
        let ids: Vec<String> = targets(&child).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["j-a-2"]);
        let map = states(&[("j-a", JobState::Running), ("j-a-2", JobState::Succeeded)]);
        assert_eq!(verdict(&child, |id| map.get(id).copied()), Verdict::Met);
        // Without n_to_n a child waits for the whole array.
        let mut all = job(serde_json::json!([{"job": "j-a"}]), Some(3));
        all.array = child.array.clone();
        assert!(matches!(
            verdict(&all, |id| map.get(id).copied()),
            Verdict::Waiting(_)
        ));
    }
}
