//! JobSpec validation: every rule of docs/design.md §2, every problem reported at once with its field path.
//!
//! The user's text is parsed into a generic tree first (not straight into structs) so that one bad
//! field does not hide the next one: each field is checked on its own and all problems are collected.

mod basics;
mod fit;
mod notify;
mod policy;
mod pools;

use fit::spill_note;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::{
    ArraySpec, Checkpoints, DEFAULT_GRACE_SECONDS, Deadlines, Dependency, DependencyWhen, JobSpec,
    MAX_ARRAY_SIZE, MAX_DEPENDENCIES, MAX_RETRIES, MIN_ARRAY_SIZE, Pool, Retries, is_dns_label,
};
use crate::constants::{
    DEFAULT_NAMESPACE, KNOWN_PLUGINS, PLATFORM_VERSION, PLUGIN_CUSTOM, RESERVED_ENV_PREFIX,
};
use crate::fleet::FleetShape;

/// Largest spec text accepted, in bytes; specs are small, anything bigger is a mistake or an attack.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;
/// Most pools in one job.
pub const MAX_POOLS: usize = 8;
/// Most nodes in one pool.
pub const MAX_NODES_PER_POOL: u64 = 1024;
/// Most GPUs per node any job may ask for.
pub const MAX_GPUS_PER_NODE: u64 = 16;
/// Most env variables.
pub const MAX_ENV: usize = 128;
/// Most labels.
pub const MAX_LABELS: usize = 32;
pub use crate::constants::{DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_GB_PER_GPU};

const ROOT_FIELDS: &[&str] = &[
    "name",
    "plugin",
    "image",
    "entrypoint",
    "env",
    "pools",
    "deadlines",
    "retries",
    "checkpoints",
    "notify",
    "priority",
    "preemptible",
    "array",
    "depends_on",
    "labels",
    "namespace",
];
const POOL_FIELDS: &[&str] = &[
    "name",
    "series",
    "nodes",
    "gpus_per_node",
    "cpus",
    "memory_gb",
];
const DEADLINE_FIELDS: &[&str] = &["pre_running_seconds", "run_seconds", "grace_seconds"];
const RETRY_FIELDS: &[&str] = &["infrastructure", "application"];
const CHECKPOINT_FIELDS: &[&str] = &["keep"];
const NOTIFY_FIELDS: &[&str] = &["url", "events", "format"];
const ARRAY_FIELDS: &[&str] = &["size", "parallelism"];
const DEPENDENCY_FIELDS: &[&str] = &["job", "when", "n_to_n"];
/// Fields users try that the platform deliberately does not support, with the reason.
const UNSUPPORTED_FIELDS: &[(&str, &str)] = &[
    (
        "scratch",
        "scratch volumes are not supported; write scratch data under the working directory",
    ),
    (
        "volumes",
        "scratch volumes are not supported; write scratch data under the working directory",
    ),
];

/// Platform defaults filled into the authoritative spec (from configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    /// Pre-running deadline when the spec names none.
    pub pre_running_seconds: u64,
    /// Run deadline when the spec names none.
    pub run_seconds: u64,
    /// Namespace when the spec names none (and the tenant has no namespace of its own).
    pub namespace: String,
    /// The operator's mapping of tenants to namespaces; a tenant not named here uses
    /// `namespace`. A submission may only name its tenant's namespace.
    pub tenant_namespaces: BTreeMap<String, String>,
    /// Callbacks may go to loopback receivers, over http too (`tuneplane dev` only).
    pub allow_loopback_callbacks: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            pre_running_seconds: 1800,
            run_seconds: 86_400,
            namespace: DEFAULT_NAMESPACE.into(),
            tenant_namespaces: Default::default(),
            allow_loopback_callbacks: false,
        }
    }
}

impl Defaults {
    /// What a client checks before it sends a spec to a server whose configuration it does not
    /// know: every rule the spec carries itself, with the rules that depend on the server's
    /// configuration left to the server (callbacks to loopback receivers, allowed by `tuneplane
    /// dev` only), which answers with its own error naming the field.
    pub fn client_side() -> Defaults {
        Defaults {
            allow_loopback_callbacks: true,
            ..Defaults::default()
        }
    }

    /// The namespace `tenant`'s workloads run in.
    pub fn namespace_for(&self, tenant: &str) -> &str {
        self.tenant_namespaces
            .get(tenant)
            .map_or(self.namespace.as_str(), String::as_str)
    }

    /// These defaults as seen by `tenant`: its own namespace is the default one.
    pub fn for_tenant(&self, tenant: &str) -> Defaults {
        Defaults {
            namespace: self.namespace_for(tenant).to_owned(),
            ..self.clone()
        }
    }

    /// Refuses `spec` when it names a namespace other than `tenant`'s.
    pub fn check_namespace(&self, tenant: &str, spec: &JobSpec) -> Result<(), SpecErrors> {
        let own = self.namespace_for(tenant);
        if spec.namespace == own {
            return Ok(());
        }
        Err(SpecErrors(vec![FieldError {
            path: "namespace".into(),
            message: format!(
                "{:?} is not this tenant's namespace: its jobs run in {own:?} (set by the platform's operator); remove `namespace:` from the spec or set it to {own:?}",
                spec.namespace
            ),
        }]))
    }
}

/// Allowed ranges of the deadlines, seconds.
const PRE_RUNNING_RANGE: (u64, u64) = (5, 7 * 86_400);
const RUN_RANGE: (u64, u64) = (10, 30 * 86_400);
const GRACE_RANGE: (u64, u64) = (0, 3_600);
/// Allowed range of `checkpoints.keep`.
const KEEP_RANGE: (i64, i64) = (1, 20);

/// One problem with a spec: where it is and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldError {
    /// Field path, e.g. `pools[1].series`; empty for the document itself.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<FieldError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "the job spec has {n} problem{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// A valid spec, plus notes the caller should pass on (e.g. that fleet fit was not checked).
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    /// The authoritative spec.
    pub spec: JobSpec,
    /// Informational notes for the user.
    pub notes: Vec<String>,
}

/// Parses `text` (YAML or JSON) and validates it against every rule; with `fleet`, also rejects jobs
/// that could never fit. Returns the authoritative spec or every problem at once.
pub fn validate(
    text: &str,
    fleet: Option<&FleetShape>,
    defaults: &Defaults,
) -> Result<Validated, SpecErrors> {
    let doc = parse(text).map_err(|m| {
        SpecErrors(vec![FieldError {
            path: String::new(),
            message: m,
        }])
    })?;
    let mut v = Checker { errors: Vec::new() };
    let spec = v.spec(&doc, defaults);
    let mut notes = Vec::new();
    if let Some(spec) = &spec {
        match fleet {
            Some(fleet) => {
                v.fit(spec, fleet);
                notes.extend(spill_note(spec, fleet));
            }
            None => notes.push(
                "fleet fit not checked: no capacity snapshot yet; the job may wait until capacity is known"
                    .to_string(),
            ),
        }
    }
    match spec {
        Some(spec) if v.errors.is_empty() => Ok(Validated { spec, notes }),
        _ => Err(SpecErrors(v.errors)),
    }
}

/// Parses YAML or JSON into a generic tree (a mapping; a key written twice is an error).
pub(crate) fn parse(text: &str) -> Result<Value, String> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(format!(
            "spec is {} bytes; the limit is {MAX_SPEC_BYTES} bytes (keep data out of the spec)",
            text.len()
        ));
    }
    if text.trim().is_empty() {
        return Err("spec is empty; write a YAML or JSON document with at least name, image, entrypoint and pools".into());
    }
    let value = super::strict::parse_strict(text, text.trim_start().starts_with('{'))?;
    if !value.is_object() {
        return Err(
            "spec must be a mapping of fields (name, image, entrypoint, pools, ...)".into(),
        );
    }
    Ok(value)
}

struct Checker {
    errors: Vec<FieldError>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

impl Checker {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Reports fields of `map` outside `allowed` (and the deliberately unsupported ones).
    fn unknown_fields(&mut self, map: &Map<String, Value>, allowed: &[&str], prefix: &str) {
        for key in map.keys() {
            if allowed.contains(&key.as_str()) {
                continue;
            }
            let path = format!("{prefix}{key}");
            match UNSUPPORTED_FIELDS.iter().find(|(k, _)| k == key) {
                Some((_, why)) => self.err(path, *why),
                None => {
                    let hint = closest(key, allowed)
                        .map(|k| format!("did you mean {k:?}? "))
                        .unwrap_or_default();
                    self.err(
                        path,
                        format!(
                            "unknown field; {hint}allowed fields: {}",
                            allowed.join(", ")
                        ),
                    )
                }
            }
        }
    }

    fn string(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        required: bool,
    ) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) if required => {
                self.err(path, "is required");
                None
            }
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.err(path, format!("must be a string, not {}", type_name(other)));
                None
            }
        }
    }

    fn integer(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        range: (i64, i64),
    ) -> Option<i64> {
        let v = map.get(key)?;
        if v.is_null() {
            return None;
        }
        match v.as_i64() {
            Some(n) if n >= range.0 && n <= range.1 => Some(n),
            Some(n) => {
                self.err(
                    path,
                    format!("{n} is out of range; allowed {}..={}", range.0, range.1),
                );
                None
            }
            None if v.is_number() => {
                self.err(
                    path,
                    format!("must be a whole number in {}..={}", range.0, range.1),
                );
                None
            }
            None => {
                self.err(
                    path,
                    format!("must be a whole number, not {}", type_name(v)),
                );
                None
            }
        }
    }

    /// [`integer`](Self::integer) of the field `key` under `prefix`, reported as required (with
    /// `what` it holds) when the map has no such key.
    fn required_integer(
        &mut self,
        map: &Map<String, Value>,
        (prefix, key): (&str, &str),
        range: (i64, i64),
        what: &str,
    ) -> Option<i64> {
        let path = format!("{prefix}.{key}");
        let n = self.integer(map, key, &path, range);
        if !map.contains_key(key) {
            self.err(path, format!("is required ({what})"));
        }
        n
    }

    fn number(&mut self, map: &Map<String, Value>, key: &str, path: &str, max: f64) -> Option<f64> {
        let v = map.get(key)?;
        if v.is_null() {
            return None;
        }
        match v.as_f64() {
            Some(n) if n > 0.0 && n <= max => Some(n),
            Some(n) => {
                self.err(
                    path,
                    format!("{n} is out of range; must be greater than 0 and at most {max}"),
                );
                None
            }
            None => {
                self.err(path, format!("must be a number, not {}", type_name(v)));
                None
            }
        }
    }

    /// [`string`](Self::string) of the field `key` (reported at `path`) that must be a DNS label
    /// of at most `max` characters: another value is reported as `{value:?} {problem}` (and
    /// still returned, so that later checks can name it).
    fn dns_label(
        &mut self,
        map: &Map<String, Value>,
        (key, path, required): (&str, &str, bool),
        max: usize,
        problem: &str,
    ) -> Option<String> {
        let value = self.string(map, key, path, required);
        if let Some(v) = &value
            && !is_dns_label(v, max)
        {
            self.err(path, format!("{v:?} {problem}"));
        }
        value
    }

    fn string_map(&mut self, map: &Map<String, Value>, key: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        match map.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let s = match v {
                        Value::String(s) => s.clone(),
                        // YAML turns `EPOCHS: 3` into a number; Kubernetes wants strings, so convert.
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        other => {
                            self.err(
                                format!("{key}.{k}"),
                                format!("must be a string, not {}", type_name(other)),
                            );
                            continue;
                        }
                    };
                    out.insert(k.clone(), s);
                }
            }
            Some(other) => self.err(
                key,
                format!(
                    "must be a mapping of names to strings, not {}",
                    type_name(other)
                ),
            ),
        }
        out
    }

    fn spec(&mut self, doc: &Value, defaults: &Defaults) -> Option<JobSpec> {
        let map = doc.as_object()?;
        self.unknown_fields(map, ROOT_FIELDS, "");

        let name = self.dns_label(
            map,
            ("name", "name", true),
            40,
            "must be a DNS label: lower-case letters, digits and '-', starting with a letter, ending with a letter or digit, at most 40 characters",
        );
        let plugin = self
            .string(map, "plugin", "plugin", false)
            .unwrap_or_else(|| PLUGIN_CUSTOM.into());
        if !plugin.contains('/') || plugin.split('/').count() != 2 {
            self.err(
                "plugin",
                format!("{plugin:?} must have the form family/variant, e.g. {PLUGIN_CUSTOM}"),
            );
        } else if !KNOWN_PLUGINS.contains(&plugin.as_str()) {
            self.err(
                "plugin",
                format!(
                    "unknown plugin {plugin:?}; known: {}",
                    KNOWN_PLUGINS.join(", ")
                ),
            );
        }
        let image = self.string(map, "image", "image", true);
        if let Some(i) = &image {
            self.image(i);
        }
        let entrypoint = self.string(map, "entrypoint", "entrypoint", true);
        if let Some(e) = &entrypoint {
            if e.trim().is_empty() {
                self.err(
                    "entrypoint",
                    "must not be empty; give the command to run, e.g. python train.py",
                );
            } else if e.len() > 4096 || e.contains('\0') {
                self.err(
                    "entrypoint",
                    "must be at most 4096 characters without NUL bytes",
                );
            }
        }
        let env = self.string_map(map, "env");
        self.env(&env);
        let labels = self.string_map(map, "labels");
        self.labels(&labels);
        let namespace = self
            .string(map, "namespace", "namespace", false)
            .unwrap_or_else(|| defaults.namespace.clone());
        if !is_dns_label(&namespace, 63) {
            self.err(
                "namespace",
                format!("{namespace:?} must be a DNS label of at most 63 characters"),
            );
        }
        let priority = self
            .integer(map, "priority", "priority", (-1000, 1000))
            .unwrap_or(0);
        let preemptible = match map.get("preemptible") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    "preemptible",
                    format!(
                        "must be true or false, not {}; false keeps the job from being stopped for another job (and from borrowing above the tenant's quota)",
                        type_name(other)
                    ),
                );
                true
            }
        };
        let deadlines = self.deadlines(map, defaults);
        let retries = self.retries(map);
        let checkpoints = self.checkpoints(map);
        let array = self.array(map);
        let depends_on = self.depends_on(map, array.is_some());
        let notify = self.notify(map, defaults.allow_loopback_callbacks);
        let pools = self.pools(map, &plugin);

        Some(JobSpec {
            name: name?,
            plugin,
            image: image?,
            entrypoint: entrypoint?,
            env,
            pools: pools?,
            deadlines,
            retries,
            checkpoints,
            notify,
            priority: i32::try_from(priority).ok()?,
            preemptible,
            array,
            depends_on,
            labels,
            namespace,
            platform_version: PLATFORM_VERSION.into(),
        })
    }
}

/// The allowed name closest to a misspelt `key` (at most a third of its letters off), if any.
fn closest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let budget = (key.chars().count() / 3).max(1);
    allowed
        .iter()
        .map(|a| (edit_distance(key, a), *a))
        .filter(|(d, _)| *d <= budget)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// Levenshtein distance over characters (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric())
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                is_dns_label(l, 63) || l.chars().all(|c| c.is_ascii_digit()) && !l.is_empty()
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests {
    //! The checker's field lists are kept by hand beside the structs: these tests fail when a
    //! field is added to one and not the other.

    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    /// The keys of the JSON object at `ptr` of `value`.
    fn keys(value: &Value, ptr: &str) -> BTreeSet<String> {
        value
            .pointer(ptr)
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("no object at {ptr} in {value}"))
            .keys()
            .cloned()
            .collect()
    }

    fn set(fields: &[&str]) -> BTreeSet<String> {
        fields.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn every_field_list_names_exactly_the_fields_of_its_struct() {
        let text = r#"
name: every-field
plugin: custom/custom
image: python:3.11
entrypoint: python train.py
env: {A: "1"}
pools: [{name: main, series: h200, nodes: 1, gpus_per_node: 8, cpus: 32, memory_gb: 256}]
deadlines: {pre_running_seconds: 600, run_seconds: 3600, grace_seconds: 60}
retries: {infrastructure: 1, application: 1}
checkpoints: {keep: 3}
notify: [{url: "https://hooks.example.com/tp", events: [succeeded], format: json}]
priority: 5
preemptible: false
array: {size: 4, parallelism: 2}
depends_on: [{job: j-0123456789abcdef, when: ended, n_to_n: true}]
labels: {team: nlp}
namespace: tuneplane-jobs
"#;
        let spec = validate(text, None, &Defaults::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .spec;
        let json = serde_json::to_value(&spec).unwrap_or_default();
        // The platform fills `platform_version`; a user never writes it.
        let mut root = keys(&json, "");
        assert!(root.remove("platform_version"), "{root:?}");
        assert_eq!(root, set(ROOT_FIELDS), "ROOT_FIELDS and JobSpec");
        assert_eq!(
            keys(&json, "/pools/0"),
            set(POOL_FIELDS),
            "POOL_FIELDS and Pool"
        );
        assert_eq!(
            keys(&json, "/deadlines"),
            set(DEADLINE_FIELDS),
            "DEADLINE_FIELDS"
        );
        assert_eq!(keys(&json, "/retries"), set(RETRY_FIELDS), "RETRY_FIELDS");
        assert_eq!(
            keys(&json, "/checkpoints"),
            set(CHECKPOINT_FIELDS),
            "CHECKPOINT_FIELDS"
        );
        assert_eq!(
            keys(&json, "/notify/0"),
            set(NOTIFY_FIELDS),
            "NOTIFY_FIELDS"
        );
        assert_eq!(keys(&json, "/array"), set(ARRAY_FIELDS), "ARRAY_FIELDS");
        assert_eq!(
            keys(&json, "/depends_on/0"),
            set(DEPENDENCY_FIELDS),
            "DEPENDENCY_FIELDS"
        );
    }

    /// A spec that names no optional section serializes to the same keys as before the section
    /// existed: the authoritative spec is hashed into every capsule's digest, so an optional field
    /// added without `skip_serializing_if` (absent means empty) would change the digest of every
    /// job submitted again with the same files.
    #[test]
    fn a_spec_without_optional_sections_serializes_to_the_keys_it_always_had() {
        let text = "name: minimal\nimage: python:3.11\nentrypoint: python train.py\npools: [{name: main, series: h200, nodes: 1, gpus_per_node: 8}]\n";
        let spec = validate(text, None, &Defaults::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .spec;
        let json = serde_json::to_value(&spec).unwrap_or_default();
        let always = [
            "checkpoints",
            "deadlines",
            "entrypoint",
            "env",
            "image",
            "labels",
            "name",
            "namespace",
            "platform_version",
            "plugin",
            "pools",
            "priority",
            "retries",
        ];
        assert_eq!(
            keys(&json, ""),
            set(&always),
            "a new optional field must be left out of the serialized spec when absent"
        );
        // One level down too: a pool that names no optional field keeps its keys.
        assert_eq!(
            keys(&json, "/pools/0"),
            set(&[
                "cpus",
                "gpus_per_node",
                "memory_gb",
                "name",
                "nodes",
                "series"
            ]),
            "a new optional pool field must be left out of the serialized spec when absent"
        );
    }
}
