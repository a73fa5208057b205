//! Pipelines (docs/design.md §7): several jobs submitted as one request, each step a job of its
//! own that waits for the steps it comes `after` (their `depends_on`, when: succeeded) and gets
//! their outputs as its inputs. The graph is checked first (names, unknown steps, cycles, each
//! refused naming them), then every step is checked and its capsule stored like a submission of
//! its own, and all steps are written in one write, or none.
//!
//! With an idempotency key (a webhook's signature, a schedule's id and firing time) each step's
//! job id is derived from the tenant, the key and the step's name, so a redelivery finds the jobs
//! of the first delivery instead of writing new ones ([`step_job_id`]).

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    Code, Origin, Result, SpecInput, SubmitError, SubmitRequest, SubmitService,
    check_idempotency_key,
};
use crate::audit::Actor;
use crate::job::JobRecord;
use crate::spec::{Dependency, DependencyWhen, FieldError, JobSpec, SpecErrors};
use crate::store::{MAX_CREATE_ALL, NewJob, StoreError};

/// The most steps of one pipeline (one store write).
pub const MAX_STEPS: usize = MAX_CREATE_ALL;

/// One step of a pipeline request.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRequest {
    /// DNS-label name, unique in the pipeline (its dependants' inputs folder).
    pub name: String,
    /// Its JobSpec: text (YAML or JSON), whose `depends_on` comes from `after` alone, or an
    /// authoritative spec with [`Code::Capsule`] (a schedule's step), whose `depends_on` entries
    /// are pointed at the jobs of `after`, in order.
    pub spec: SpecInput,
    /// Its code.
    pub code: Code,
    /// The steps it waits for (to succeed).
    pub after: Vec<String>,
}

/// A pipeline request.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineRequest {
    /// Tenant of every step.
    pub tenant: crate::ids::TenantId,
    /// The pipeline's name (a DNS label).
    pub name: String,
    /// The steps, in any order.
    pub steps: Vec<StepRequest>,
    /// Entry point.
    pub origin: Origin,
    /// Who submits.
    pub actor: Actor,
    /// Idempotency key (a webhook's signature, a schedule's id and firing time): a request with
    /// a key used before returns the jobs of the first one and writes nothing.
    pub idempotency_key: Option<String>,
}

/// What a pipeline submission created: each step's job, in the request's order.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmittedPipeline {
    /// The pipeline's name.
    pub name: String,
    /// `(step name, its job)` in the request's order.
    pub steps: Vec<(String, JobRecord)>,
    /// Notes of the steps' checks, each naming its step.
    pub notes: Vec<String>,
    /// True when this request created the jobs (201), false for a repeat of its idempotency key
    /// (200, the first request's jobs).
    pub created: bool,
}

/// The job id of step `step` of a pipeline of `tenant` sent with idempotency key `key`: `j-` and
/// the first 20 hex digits of a SHA-256 over the three (a valid id, like a random one).
pub fn step_job_id(tenant: &str, key: &str, step: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"tuneplane-pipeline-step-v1\n")
        .chain_update(tenant.as_bytes())
        .chain_update([0])
        .chain_update(key.as_bytes())
        .chain_update([0])
        .chain_update(step.as_bytes())
        .finalize();
    format!("j-{}", &hex::encode(digest)[..20])
}

fn problem(path: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        message: message.into(),
    }
}

/// The steps in an order where each comes after the steps it waits for; every problem of the
/// graph named (a bad or repeated name, an unknown step in `after`, a cycle with its steps).
pub fn step_order(
    name: &str,
    steps: &[(&str, &[String])],
) -> std::result::Result<Vec<usize>, SpecErrors> {
    let mut problems = Vec::new();
    if !crate::ids::is_dns_label(name, 40) {
        problems.push(problem("name", format!("{name:?} must be a DNS label of at most 40 characters (lower-case letters, digits, '-')")));
    }
    if steps.is_empty() || steps.len() > MAX_STEPS {
        problems.push(problem(
            "steps",
            format!("{} steps; a pipeline has 1 to {MAX_STEPS}", steps.len()),
        ));
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, (step, _)) in steps.iter().enumerate() {
        if !crate::ids::is_dns_label(step, 40) {
            problems.push(problem(
                format!("steps[{i}].name"),
                format!("{step:?} must be a DNS label of at most 40 characters"),
            ));
        } else if index.insert(step, i).is_some() {
            problems.push(problem(
                format!("steps[{i}].name"),
                format!("{step:?} names two steps; give each step its own name"),
            ));
        }
    }
    let known: Vec<&str> = steps.iter().map(|(s, _)| *s).collect();
    for (i, (step, after)) in steps.iter().enumerate() {
        for (j, a) in after.iter().enumerate() {
            if a == step {
                problems.push(problem(
                    format!("steps[{i}].after[{j}]"),
                    format!("step {step} cannot wait for itself"),
                ));
            } else if !index.contains_key(a.as_str()) {
                problems.push(problem(
                    format!("steps[{i}].after[{j}]"),
                    format!(
                        "no step {a:?} in this pipeline; its steps are {}",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err(SpecErrors(problems));
    }
    // Depth-first, in the request's order: 0 unseen, 1 on the path, 2 done.
    let mut mark = vec![0u8; steps.len()];
    let mut order = Vec::with_capacity(steps.len());
    fn visit(
        i: usize,
        steps: &[(&str, &[String])],
        index: &HashMap<&str, usize>,
        mark: &mut [u8],
        path: &mut Vec<usize>,
        order: &mut Vec<usize>,
    ) -> std::result::Result<(), Vec<usize>> {
        match mark[i] {
            2 => return Ok(()),
            1 => {
                let from = path.iter().position(|&p| p == i).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(i);
                return Err(cycle);
            }
            _ => {}
        }
        mark[i] = 1;
        path.push(i);
        for a in steps[i].1 {
            visit(index[a.as_str()], steps, index, mark, path, order)?;
        }
        path.pop();
        mark[i] = 2;
        order.push(i);
        Ok(())
    }
    for i in 0..steps.len() {
        let mut path = Vec::new();
        if let Err(cycle) = visit(i, steps, &index, &mut mark, &mut path, &mut order) {
            let names: Vec<&str> = cycle.iter().map(|&c| steps[c].0).collect();
            return Err(SpecErrors(vec![problem(
                "steps",
                format!(
                    "the steps wait for each other in a cycle: {} (each after the one before); no step could ever start",
                    names.join(" -> ")
                ),
            )]));
        }
    }
    Ok(order)
}

/// `text` with `depends_on` naming `deps` (job ids, to succeed), as JSON; a step that names its
/// own `depends_on` is refused (a step's dependencies are its `after`).
fn with_dependencies(
    i: usize,
    text: &str,
    deps: &[String],
) -> std::result::Result<String, SpecErrors> {
    let mut doc = crate::spec::parse_document(text)
        .map_err(|m| SpecErrors(vec![problem(format!("steps[{i}].spec"), m)]))?;
    let Some(map) = doc.as_object_mut() else {
        return Err(SpecErrors(vec![problem(
            format!("steps[{i}].spec"),
            "must be a mapping",
        )]));
    };
    if map.contains_key("depends_on") {
        return Err(SpecErrors(vec![problem(
            format!("steps[{i}].spec.depends_on"),
            "a step waits for the steps named in its `after`; remove depends_on from its spec",
        )]));
    }
    if !deps.is_empty() {
        let list: Vec<Value> = deps
            .iter()
            .map(|id| json!({"job": id, "when": "succeeded"}))
            .collect();
        map.insert("depends_on".into(), Value::Array(list));
    }
    Ok(doc.to_string())
}

/// `spec` (authoritative, a schedule's step) with its dependencies pointed at `deps` (the jobs
/// of its `after`, in order): entry i of its `depends_on` names `deps[i]` and keeps its `when`;
/// a spec without `depends_on` waits for each of `deps` to succeed.
fn with_dependency_ids(
    i: usize,
    mut spec: JobSpec,
    deps: &[String],
) -> std::result::Result<JobSpec, SpecErrors> {
    if spec.depends_on.is_empty() {
        spec.depends_on = deps
            .iter()
            .map(|id| Dependency {
                job: id.clone(),
                when: DependencyWhen::Succeeded,
                n_to_n: false,
            })
            .collect();
    } else if spec.depends_on.len() == deps.len() {
        for (d, id) in spec.depends_on.iter_mut().zip(deps) {
            d.job = id.clone();
        }
    } else {
        return Err(SpecErrors(vec![problem(
            format!("steps[{i}].after"),
            format!(
                "names {} steps but the step's spec waits for {} jobs (depends_on); name one step per dependency, in order",
                deps.len(),
                spec.depends_on.len()
            ),
        )]));
    }
    Ok(spec)
}

/// A step's error with the step named: spec problems get `steps[i].` before their paths.
fn in_step(i: usize, step: &str, e: SubmitError) -> SubmitError {
    match e {
        SubmitError::InvalidSpec(SpecErrors(list)) => SubmitError::InvalidSpec(SpecErrors(
            list.into_iter()
                .map(|f| {
                    problem(
                        format!("steps[{i}].spec.{}", f.path)
                            .trim_end_matches('.')
                            .to_owned(),
                        f.message,
                    )
                })
                .collect(),
        )),
        SubmitError::InvalidCode(c) => {
            SubmitError::InvalidRequest(format!("steps[{i}] ({step}): the code was refused: {c}"))
        }
        SubmitError::InvalidRequest(m) => {
            SubmitError::InvalidRequest(format!("steps[{i}] ({step}): {m}"))
        }
        SubmitError::QuotaExceeded(m) => SubmitError::QuotaExceeded(format!("step {step}: {m}")),
        SubmitError::NotFound(m) => SubmitError::NotFound(format!("{m} (step {step})")),
        other => other,
    }
}

impl SubmitService {
    /// Submits every step of `req` as a job of its own, in one write (or nothing). With an
    /// idempotency key, a repeat returns the first request's jobs (`created: false`) and writes
    /// nothing; a key used before for other steps is [`SubmitError::IdempotencyConflict`].
    pub async fn submit_pipeline(
        &self,
        req: PipelineRequest,
        now_ms: i64,
    ) -> Result<SubmittedPipeline> {
        let graph: Vec<(&str, &[String])> = req
            .steps
            .iter()
            .map(|s| (s.name.as_str(), s.after.as_slice()))
            .collect();
        let order = step_order(&req.name, &graph)?;
        if let Some(key) = &req.idempotency_key {
            check_idempotency_key(key)?;
        }
        let ids: Vec<String> = req
            .steps
            .iter()
            .map(|s| match &req.idempotency_key {
                Some(key) => step_job_id(&req.tenant, key, &s.name),
                None => (self.new_id)(),
            })
            .collect();
        // A repeat is answered before any capsule is built again.
        if let Some(done) = self.existing_pipeline(&req, &ids).await? {
            return Ok(done);
        }
        let by_name: BTreeMap<&str, &str> = req
            .steps
            .iter()
            .zip(&ids)
            .map(|(s, id)| (s.name.as_str(), id.as_str()))
            .collect();
        let mut staged = Vec::with_capacity(order.len());
        let mut notes = Vec::new();
        for &i in &order {
            let step = &req.steps[i];
            let deps: Vec<String> = step
                .after
                .iter()
                .map(|a| by_name[a.as_str()].to_owned())
                .collect();
            let spec = match &step.spec {
                SpecInput::Text(text) => SpecInput::Text(with_dependencies(i, text, &deps)?),
                SpecInput::Authoritative(spec) => SpecInput::Authoritative(Box::new(
                    with_dependency_ids(i, (**spec).clone(), &deps)?,
                )),
                SpecInput::InArchive => {
                    return Err(SubmitError::InvalidSpec(SpecErrors(vec![problem(
                        format!("steps[{i}].spec"),
                        "missing: give each step its spec (YAML or JSON text)",
                    )])));
                }
            };
            let one = SubmitRequest {
                tenant: req.tenant.clone(),
                spec,
                code: step.code.clone(),
                idempotency_key: None,
                origin: req.origin.clone(),
                actor: req.actor.clone(),
            };
            let mut s = self
                .stage(one, Some(ids[i].clone()), &ids, now_ms)
                .await
                .map_err(|e| in_step(i, &step.name, e))?;
            s.event.message = format!(
                "{}; step {} of pipeline {}",
                s.event.message, step.name, req.name
            );
            notes.extend(s.notes.iter().map(|n| format!("step {}: {n}", step.name)));
            staged.push((i, s));
        }
        let news: Vec<NewJob> = staged
            .iter()
            .map(|(_, s)| NewJob {
                job: &s.record,
                idem: None,
                events: std::slice::from_ref(&s.event),
                audit: Some(&s.audit),
            })
            .collect();
        let created = match self.jobs.create_all(&news).await {
            Ok(created) => created,
            // A concurrent delivery of the same key wrote them first.
            Err(StoreError::AlreadyExists { .. }) if req.idempotency_key.is_some() => {
                if let Some(done) = self.existing_pipeline(&req, &ids).await? {
                    return Ok(done);
                }
                return Err(conflict(&req, &ids));
            }
            Err(e) => return Err(e.into()),
        };
        let mut by_index: HashMap<usize, JobRecord> =
            staged.iter().map(|(i, _)| *i).zip(created).collect();
        let steps = req
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((s.name.clone(), by_index.remove(&i)?)))
            .collect();
        Ok(SubmittedPipeline {
            name: req.name,
            steps,
            notes,
            created: true,
        })
    }

    /// The jobs an earlier request with `req`'s idempotency key wrote (`ids`, derived from it):
    /// `None` when it wrote none (or `req` has no key), an error when only some of them exist
    /// or one belongs to another tenant (the key was used for other steps).
    async fn existing_pipeline(
        &self,
        req: &PipelineRequest,
        ids: &[String],
    ) -> Result<Option<SubmittedPipeline>> {
        if req.idempotency_key.is_none() {
            return Ok(None);
        }
        let mut found = Vec::with_capacity(ids.len());
        for (step, id) in req.steps.iter().zip(ids) {
            match self.jobs.get_job(id).await? {
                Some(job) if job.tenant == req.tenant => found.push((step.name.clone(), job)),
                Some(_) => return Err(conflict(req, ids)),
                None => {}
            }
        }
        if found.is_empty() {
            return Ok(None);
        }
        if found.len() < ids.len() {
            return Err(conflict(req, ids));
        }
        Ok(Some(SubmittedPipeline {
            name: req.name.clone(),
            steps: found,
            notes: Vec::new(),
            created: false,
        }))
    }
}

/// The idempotency key of `req` was used before for a pipeline with other steps; the error names
/// the first step's job. (With a key, `ids` are [`step_job_id`]s, which keep the id rule, and a
/// pipeline has a step: the plain message is for a caller that broke both.)
fn conflict(req: &PipelineRequest, ids: &[String]) -> SubmitError {
    let key = req.idempotency_key.clone().unwrap_or_default();
    match ids.first().map(|id| crate::ids::JobId::parse(id.as_str())) {
        Some(Ok(job_id)) => SubmitError::IdempotencyConflict { key, job_id },
        _ => SubmitError::InvalidRequest(format!(
            "Idempotency-Key {key:?} was already used for a different request; use a new key"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(steps: &[(&str, &[&str])]) -> std::result::Result<Vec<usize>, String> {
        let owned: Vec<(String, Vec<String>)> = steps
            .iter()
            .map(|(n, a)| ((*n).to_owned(), a.iter().map(|s| (*s).to_owned()).collect()))
            .collect();
        let graph: Vec<(&str, &[String])> = owned
            .iter()
            .map(|(n, a)| (n.as_str(), a.as_slice()))
            .collect();
        step_order("nightly", &graph).map_err(|e| e.to_string())
    }

    #[test]
    fn steps_come_after_the_steps_they_wait_for() {
        let got = order(&[
            ("evaluate", &["train"]),
            ("train", &["prepare"]),
            ("prepare", &[]),
        ])
        .unwrap();
        assert_eq!(got, [2, 1, 0]);
        let diamond =
            order(&[("a", &[]), ("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])]).unwrap();
        let pos = |i: usize| diamond.iter().position(|&x| x == i).unwrap();
        assert!(pos(0) < pos(1) && pos(0) < pos(2) && pos(1) < pos(3) && pos(2) < pos(3));
    }

    #[test]
    fn cycles_unknown_steps_and_repeated_names_are_refused_naming_them() {
        let cycle = order(&[
            ("prepare", &["evaluate"]),
            ("train", &["prepare"]),
            ("evaluate", &["train"]),
        ])
        .unwrap_err();
        assert!(
            cycle.contains("cycle: prepare -> evaluate -> train -> prepare"),
            "{cycle}"
        );
        let unknown = order(&[("train", &["prep"])]).unwrap_err();
        assert!(
            unknown.contains("steps[0].after[0]") && unknown.contains("no step \"prep\""),
            "{unknown}"
        );
        let twice = order(&[("a", &[]), ("a", &[])]).unwrap_err();
        assert!(twice.contains("steps[1].name"), "{twice}");
        let itself = order(&[("a", &["a"])]).unwrap_err();
        assert!(itself.contains("cannot wait for itself"), "{itself}");
        assert!(order(&[]).unwrap_err().contains("1 to 20"));
    }

    #[test]
    fn a_steps_dependencies_come_from_after_only() {
        let text = with_dependencies(0, "name: t\nimage: x\n", &["j-1".into()]).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["depends_on"],
            json!([{"job": "j-1", "when": "succeeded"}])
        );
        let err = with_dependencies(2, "name: t\ndepends_on: []\n", &[]).unwrap_err();
        assert_eq!(err.0[0].path, "steps[2].spec.depends_on");
    }
}
