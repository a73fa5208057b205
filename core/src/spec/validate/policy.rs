//! Deadlines, retries, checkpoints and arrays: the sections that say how a job runs and ends.

use super::*;

impl Checker {
    pub(super) fn deadlines(&mut self, map: &Map<String, Value>, defaults: &Defaults) -> Deadlines {
        let mut d = Deadlines {
            pre_running_seconds: defaults.pre_running_seconds,
            run_seconds: defaults.run_seconds,
            grace_seconds: DEFAULT_GRACE_SECONDS,
        };
        match map.get("deadlines") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                self.unknown_fields(m, DEADLINE_FIELDS, "deadlines.");
                let fields = [
                    (
                        "pre_running_seconds",
                        PRE_RUNNING_RANGE,
                        &mut d.pre_running_seconds,
                    ),
                    ("run_seconds", RUN_RANGE, &mut d.run_seconds),
                    ("grace_seconds", GRACE_RANGE, &mut d.grace_seconds),
                ];
                for (key, (lo, hi), seconds) in fields {
                    let path = format!("deadlines.{key}");
                    if let Some(n) = self.integer(m, key, &path, (lo as i64, hi as i64)) {
                        *seconds = n as u64;
                    }
                }
            }
            Some(other) => self.err(
                "deadlines",
                format!(
                    "must be a mapping with pre_running_seconds, run_seconds and grace_seconds, not {}",
                    type_name(other)
                ),
            ),
        }
        d
    }

    /// A mapping field of the spec (`None` when absent or null; an error for anything else).
    pub(super) fn mapping<'m>(
        &mut self,
        map: &'m Map<String, Value>,
        key: &str,
        fields: &[&str],
        example: &str,
    ) -> Option<&'m Map<String, Value>> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                self.unknown_fields(m, fields, &format!("{key}."));
                Some(m)
            }
            Some(other) => {
                self.err(
                    key,
                    format!("must be a mapping like {example}, not {}", type_name(other)),
                );
                None
            }
        }
    }

    pub(super) fn retries(&mut self, map: &Map<String, Value>) -> Retries {
        let mut r = Retries::default();
        if let Some(m) = self.mapping(
            map,
            "retries",
            RETRY_FIELDS,
            "{infrastructure: 2, application: 0}",
        ) {
            let max = i64::from(MAX_RETRIES);
            for (key, count) in [
                ("infrastructure", &mut r.infrastructure),
                ("application", &mut r.application),
            ] {
                if let Some(n) = self.integer(m, key, &format!("retries.{key}"), (0, max)) {
                    *count = u32::try_from(n).unwrap_or(0);
                }
            }
        }
        r
    }

    pub(super) fn checkpoints(&mut self, map: &Map<String, Value>) -> Checkpoints {
        let mut c = Checkpoints::default();
        if let Some(m) = self.mapping(map, "checkpoints", CHECKPOINT_FIELDS, "{keep: 2}")
            && let Some(n) = self.integer(m, "keep", "checkpoints.keep", KEEP_RANGE)
        {
            c.keep = u32::try_from(n).unwrap_or(1);
        }
        c
    }

    pub(super) fn array(&mut self, map: &Map<String, Value>) -> Option<ArraySpec> {
        let m = self.mapping(map, "array", ARRAY_FIELDS, "{size: 20, parallelism: 4}")?;
        let range = (i64::from(MIN_ARRAY_SIZE), i64::from(MAX_ARRAY_SIZE));
        if !m.contains_key("size") {
            self.err(
                "array.size",
                format!(
                    "is required: how many children to run ({MIN_ARRAY_SIZE} to {MAX_ARRAY_SIZE}), e.g. array: {{size: 20}}"
                ),
            );
            return None;
        }
        let size = u32::try_from(self.integer(m, "size", "array.size", range)?).ok()?;
        let parallelism = match m.get("parallelism") {
            None | Some(Value::Null) => None,
            Some(_) => {
                let n = self.integer(m, "parallelism", "array.parallelism", (1, i64::from(size)));
                Some(u32::try_from(n?).ok()?)
            }
        };
        Some(ArraySpec { size, parallelism })
    }

    /// The jobs this one waits for: at most [`MAX_DEPENDENCIES`], each a job id named once, with
    /// `when` succeeded (default) or ended; `n_to_n` only for an array (the submission checks
    /// the other side is an array of the same size).
    pub(super) fn depends_on(
        &mut self,
        map: &Map<String, Value>,
        is_array: bool,
    ) -> Vec<Dependency> {
        let list = match map.get("depends_on") {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Array(list)) => list,
            Some(other) => {
                self.err(
                    "depends_on",
                    format!(
                        "must be a list like [{{job: JOB_ID, when: succeeded}}], not {}",
                        type_name(other)
                    ),
                );
                return Vec::new();
            }
        };
        if list.len() > MAX_DEPENDENCIES {
            self.err(
                "depends_on",
                format!(
                    "{} dependencies; at most {MAX_DEPENDENCIES} (depend on an array's parent to wait for all of its children)",
                    list.len()
                ),
            );
        }
        let mut out: Vec<Dependency> = Vec::new();
        for (i, item) in list.iter().enumerate().take(MAX_DEPENDENCIES) {
            let p = format!("depends_on[{i}]");
            let Some(m) = item.as_object() else {
                self.err(
                    &p,
                    format!(
                        "must be a mapping like {{job: JOB_ID, when: succeeded}}, not {}",
                        type_name(item)
                    ),
                );
                continue;
            };
            self.unknown_fields(m, DEPENDENCY_FIELDS, &format!("{p}."));
            let Some(job) = self.string(m, "job", &format!("{p}.job"), true) else {
                continue;
            };
            if !crate::ids::valid_id(&job) {
                self.err(
                    format!("{p}.job"),
                    format!("{job:?} is not a job id; use the id tuneplane submit printed (tuneplane jobs lists them)"),
                );
                continue;
            }
            let when = match m.get("when") {
                None | Some(Value::Null) => DependencyWhen::Succeeded,
                Some(Value::String(w)) if w == "succeeded" => DependencyWhen::Succeeded,
                Some(Value::String(w)) if w == "ended" => DependencyWhen::Ended,
                Some(other) => {
                    self.err(
                        format!("{p}.when"),
                        format!("{other} must be succeeded (the default: wait for it to succeed) or ended (wait for it to end, however)"),
                    );
                    continue;
                }
            };
            let n_to_n = match m.get("n_to_n") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    self.err(
                        format!("{p}.n_to_n"),
                        format!("must be true or false, not {}", type_name(other)),
                    );
                    continue;
                }
            };
            if n_to_n && !is_array {
                self.err(
                    format!("{p}.n_to_n"),
                    "pairs children of two arrays of one size; this job is not an array (add array: {size: N} or leave n_to_n out)",
                );
                continue;
            }
            if out.iter().any(|d| d.job == job) {
                self.err(
                    format!("{p}.job"),
                    format!("{job:?} is named twice; name each job once"),
                );
                continue;
            }
            out.push(Dependency { job, when, n_to_n });
        }
        out
    }
}
