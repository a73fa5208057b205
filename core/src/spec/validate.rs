//! JobSpec validation: every rule of docs/design.md §2, every problem reported at once with its field path.
//!
//! The user's text is parsed into a generic tree first (not straight into structs) so that one bad
//! field does not hide the next one: each field is checked on its own and all problems are collected.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::{
    Checkpoints, DEFAULT_GRACE_SECONDS, Deadlines, JobSpec, MAX_RETRIES, Pool, Retries,
    is_dns_label,
};
use crate::constants::{
    DEFAULT_NAMESPACE, KNOWN_PLUGINS, PLATFORM_VERSION, PLUGIN_CUSTOM, RESERVED_ENV_PREFIX,
};
use crate::fleet::FleetShape;
use crate::notify;

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

/// The note for a CPU-only job that no CPU node can host but a GPU node can: it runs only on the
/// spare CPU of GPU nodes, which GPU jobs have first, so it may wait while GPUs are busy.
fn spill_note(spec: &JobSpec, fleet: &FleetShape) -> Option<String> {
    let [pool] = spec.pools.as_slice() else {
        return None;
    };
    if pool.series.is_some()
        || fleet.cpu_job_hosts.is_empty()
        || !fleet.hosts_cpu_job(pool.cpus, pool.memory_gb)
        || fleet.cpu_node_hosts_cpu_job(pool.cpus, pool.memory_gb)
    {
        return None;
    }
    let largest = fleet
        .cpu_job_hosts
        .iter()
        .find(|h| !h.gpu_node)
        .map_or_else(
            || "the fleet has no CPU nodes".to_owned(),
            |h| format!("the largest has {} CPUs and {} GiB", h.cpus, h.memory_gb),
        );
    Some(format!(
        "pools[0]: no CPU node fits {} CPUs and {} GiB ({largest}), so this job runs on spare CPU of GPU nodes, where GPU jobs go first: it starts when a GPU node has that much free beyond what its free GPUs keep, and reserves no GPU node while it waits",
        pool.cpus, pool.memory_gb
    ))
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

/// Parses YAML or JSON into a generic tree.
fn parse(text: &str) -> Result<Value, String> {
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
        let deadlines = self.deadlines(map, defaults);
        let retries = self.retries(map);
        let checkpoints = self.checkpoints(map);
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
            labels,
            namespace,
            platform_version: PLATFORM_VERSION.into(),
        })
    }

    fn image(&mut self, image: &str) {
        let ok = !image.is_empty()
            && image.len() <= 512
            && !image.starts_with('-')
            && image.chars().all(|c| c.is_ascii_graphic());
        if !ok {
            self.err(
                "image",
                format!(
                    "{image:?} is not a container image reference (e.g. ghcr.io/acme/train:1.2)"
                ),
            );
        }
    }

    fn env(&mut self, env: &BTreeMap<String, String>) {
        if env.len() > MAX_ENV {
            self.err(
                "env",
                format!("has {} variables; at most {MAX_ENV} are allowed", env.len()),
            );
        }
        let mut total = 0;
        for (k, v) in env {
            total += k.len() + v.len();
            let valid = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                self.err(format!("env.{k}"), "is not a valid variable name (letters, digits, '_', not starting with a digit)");
            } else if k.starts_with(RESERVED_ENV_PREFIX) {
                self.err(
                    format!("env.{k}"),
                    format!(
                        "names starting with {RESERVED_ENV_PREFIX} are reserved for the platform"
                    ),
                );
            }
            if v.contains('\0') {
                self.err(format!("env.{k}"), "value must not contain NUL bytes");
            }
        }
        if total > 32 * 1024 {
            self.err(
                "env",
                "is larger than 32 KiB in total; pass large data in files instead",
            );
        }
    }

    fn labels(&mut self, labels: &BTreeMap<String, String>) {
        if labels.len() > MAX_LABELS {
            self.err(
                "labels",
                format!(
                    "has {} labels; at most {MAX_LABELS} are allowed",
                    labels.len()
                ),
            );
        }
        for (k, v) in labels {
            let path = format!("labels.{k}");
            if let Some(why) = crate::constants::reserved_label(k) {
                self.err(&path, why);
            } else if !is_label_key(k) {
                self.err(&path, "is not a valid Kubernetes label key ([prefix/]name, name of at most 63 characters)");
            }
            if !is_label_value(v) {
                self.err(&path, format!("value {v:?} is not a valid Kubernetes label value (at most 63 of letters, digits, '-', '_', '.', starting and ending alphanumeric)"));
            }
        }
    }

    fn deadlines(&mut self, map: &Map<String, Value>, defaults: &Defaults) -> Deadlines {
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
    fn mapping<'m>(
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

    fn retries(&mut self, map: &Map<String, Value>) -> Retries {
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

    fn checkpoints(&mut self, map: &Map<String, Value>) -> Checkpoints {
        let mut c = Checkpoints::default();
        if let Some(m) = self.mapping(map, "checkpoints", CHECKPOINT_FIELDS, "{keep: 2}")
            && let Some(n) = self.integer(m, "keep", "checkpoints.keep", KEEP_RANGE)
        {
            c.keep = u32::try_from(n).unwrap_or(1);
        }
        c
    }

    /// The job's callbacks: at most [`notify::MAX_NOTIFY`], each a checked URL, known events
    /// (none: every event) and a known format.
    fn notify(&mut self, map: &Map<String, Value>, allow_loopback: bool) -> Vec<notify::Notify> {
        let list = match map.get("notify") {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Array(list)) => list,
            Some(other) => {
                self.err(
                    "notify",
                    format!(
                        "must be a list like [{{url: https://hooks.example.com/x, events: [terminal]}}], not {}",
                        type_name(other)
                    ),
                );
                return Vec::new();
            }
        };
        if list.len() > notify::MAX_NOTIFY {
            self.err(
                "notify",
                format!(
                    "{} callbacks; at most {} per job (a tenant subscription covers every job)",
                    list.len(),
                    notify::MAX_NOTIFY
                ),
            );
        }
        let mut out = Vec::new();
        for (i, item) in list.iter().enumerate().take(notify::MAX_NOTIFY) {
            let p = format!("notify[{i}]");
            let Some(m) = item.as_object() else {
                self.err(
                    &p,
                    format!(
                        "must be a mapping with url and events, not {}",
                        type_name(item)
                    ),
                );
                continue;
            };
            self.unknown_fields(m, NOTIFY_FIELDS, &format!("{p}."));
            let url = self
                .string(m, "url", &format!("{p}.url"), true)
                .and_then(|u| match notify::check_url(&u, allow_loopback) {
                    Ok(_) => Some(u),
                    Err(why) => {
                        self.err(format!("{p}.url"), format!("{u:?}: {why}"));
                        None
                    }
                });
            let events = match m.get("events") {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(names)) => names
                    .iter()
                    .map(|n| {
                        n.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("event names are strings, not {}", type_name(n)))
                    })
                    .collect::<Result<Vec<String>, String>>(),
                Some(other) => Err(format!(
                    "must be a list of event names, not {}",
                    type_name(other)
                )),
            }
            .and_then(|names| notify::parse_events(&names));
            let events = match events {
                Ok(e) => Some(e),
                Err(why) => {
                    self.err(format!("{p}.events"), why);
                    None
                }
            };
            let format = match m.get("format") {
                None | Some(Value::Null) => Some(notify::Format::Json),
                Some(Value::String(f)) => notify::Format::parse(f)
                    .map_err(|why| self.err(format!("{p}.format"), why))
                    .ok(),
                Some(other) => {
                    self.err(
                        format!("{p}.format"),
                        format!("must be json or slack, not {}", type_name(other)),
                    );
                    None
                }
            };
            if let (Some(url), Some(events), Some(format)) = (url, events, format) {
                out.push(notify::Notify {
                    url,
                    events,
                    format,
                });
            }
        }
        out
    }

    fn pools(&mut self, map: &Map<String, Value>, plugin: &str) -> Option<Vec<Pool>> {
        let list = match map.get("pools") {
            None | Some(Value::Null) => {
                self.err("pools", "is required: list at least one pool, e.g. [{name: main, series: h200, nodes: 1, gpus_per_node: 8}]");
                return None;
            }
            Some(Value::Array(list)) => list,
            Some(other) => {
                self.err(
                    "pools",
                    format!("must be a list of pools, not {}", type_name(other)),
                );
                return None;
            }
        };
        if list.is_empty() {
            self.err("pools", "must list at least one pool");
            return None;
        }
        if list.len() > MAX_POOLS {
            self.err(
                "pools",
                format!("has {} pools; at most {MAX_POOLS} are allowed", list.len()),
            );
        }
        let cpu_job =
            list.len() == 1 && list[0].get("gpus_per_node").and_then(Value::as_u64) == Some(0);
        let mut names = BTreeSet::new();
        let mut pools = Vec::new();
        let mut complete = true;
        for (i, item) in list.iter().enumerate() {
            match self.pool(item, i, cpu_job, list.len(), plugin) {
                Some(p) => {
                    if !names.insert(p.name.clone()) {
                        self.err(
                            format!("pools[{i}].name"),
                            format!(
                                "duplicate pool name {:?}; pool names must be unique",
                                p.name
                            ),
                        );
                    }
                    pools.push(p);
                }
                None => complete = false,
            }
        }
        complete.then_some(pools)
    }

    fn pool(
        &mut self,
        item: &Value,
        i: usize,
        cpu_job: bool,
        pool_count: usize,
        plugin: &str,
    ) -> Option<Pool> {
        let p = format!("pools[{i}]");
        let Some(m) = item.as_object() else {
            self.err(
                &p,
                format!(
                    "must be a mapping with name, series, nodes and gpus_per_node, not {}",
                    type_name(item)
                ),
            );
            return None;
        };
        self.unknown_fields(m, POOL_FIELDS, &format!("{p}."));
        let name = self.dns_label(
            m,
            ("name", &format!("{p}.name"), true),
            15,
            "must be a DNS label of at most 15 characters",
        );
        let series = self.dns_label(
            m,
            ("series", &format!("{p}.series"), false),
            63,
            "is not a valid series name",
        );
        let nodes = self.required_integer(
            m,
            (&p, "nodes"),
            (1, MAX_NODES_PER_POOL as i64),
            "number of machines in the pool",
        );
        let gpus = self.required_integer(
            m,
            (&p, "gpus_per_node"),
            (0, MAX_GPUS_PER_NODE as i64),
            "GPUs per machine; 0 for a CPU-only job",
        );
        let cpus = self.number(m, "cpus", &format!("{p}.cpus"), 1024.0);
        let memory_gb = self.number(m, "memory_gb", &format!("{p}.memory_gb"), 16_384.0);

        let (nodes, gpus) = (nodes? as u32, gpus? as u32);
        let (cpus, memory_gb) = if gpus == 0 {
            self.cpu_pool_rules(&p, cpu_job, pool_count, plugin, nodes, series.is_some(), m);
            (cpus?, memory_gb?)
        } else {
            if series.is_none() {
                self.err(
                    format!("{p}.series"),
                    "is required for a pool with GPUs (e.g. h200)",
                );
            }
            (
                cpus.unwrap_or(DEFAULT_CPUS_PER_GPU * f64::from(gpus)),
                memory_gb.unwrap_or(DEFAULT_MEMORY_GB_PER_GPU * f64::from(gpus)),
            )
        };
        // Kubernetes quantities are rendered in millicores and MiB; refuse finer values than that.
        let cpus = (cpus * 1000.0).round() / 1000.0;
        let memory_gb = (memory_gb * 1024.0).round() / 1024.0;
        Some(Pool {
            name: name?,
            series,
            nodes,
            gpus_per_node: gpus,
            cpus,
            memory_gb,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn cpu_pool_rules(
        &mut self,
        p: &str,
        cpu_job: bool,
        pool_count: usize,
        plugin: &str,
        nodes: u32,
        has_series: bool,
        m: &Map<String, Value>,
    ) {
        if !cpu_job || pool_count != 1 {
            self.err(format!("{p}.gpus_per_node"), "0 is only allowed for a CPU-only job, which has exactly one pool; give every pool of a multi-pool job at least one GPU");
            return;
        }
        if plugin != PLUGIN_CUSTOM {
            self.err(
                "plugin",
                format!("CPU-only jobs must use plugin {PLUGIN_CUSTOM}"),
            );
        }
        if nodes != 1 {
            self.err(
                format!("{p}.nodes"),
                "multi-machine CPU jobs are not supported; a CPU-only job runs on nodes: 1",
            );
        }
        if has_series {
            self.err(
                format!("{p}.series"),
                "a CPU-only job has no GPU series; remove series (it may run on any node)",
            );
        }
        for (key, what) in [("cpus", "CPU cores"), ("memory_gb", "memory in GiB")] {
            if !m.contains_key(key) {
                self.err(
                    format!("{p}.{key}"),
                    format!("is required for a CPU-only job ({what}, greater than 0)"),
                );
            }
        }
    }

    /// Rejects a CPU-only pool that no idle node could host: CPU nodes whole, GPU nodes only
    /// beyond the share their GPUs keep (see `capacity::GpuShare`). Names the largest that fit.
    fn fit_cpu_only(&mut self, p: &str, pool: &Pool, fleet: &FleetShape) {
        if fleet.cpu_job_hosts.is_empty() {
            // A snapshot from before per-GPU shares: only the largest node sizes are known.
            if pool.cpus > f64::from(fleet.max_node_cpus) {
                self.err(
                    format!("{p}.cpus"),
                    format!(
                        "{} CPUs exceed the largest node ({} CPUs)",
                        pool.cpus, fleet.max_node_cpus
                    ),
                );
            }
            if pool.memory_gb > f64::from(fleet.max_node_memory_gb) {
                self.err(
                    format!("{p}.memory_gb"),
                    format!(
                        "{} GiB exceeds the largest node ({} GiB)",
                        pool.memory_gb, fleet.max_node_memory_gb
                    ),
                );
            }
            return;
        }
        if fleet.hosts_cpu_job(pool.cpus, pool.memory_gb) {
            return;
        }
        let largest: Vec<String> = fleet
            .cpu_job_hosts
            .iter()
            .map(|h| {
                let kind = if h.gpu_node {
                    "on a GPU node, after the CPU and memory its GPUs keep"
                } else {
                    "on a CPU node"
                };
                format!("{} CPUs with {} GiB {kind}", h.cpus, h.memory_gb)
            })
            .collect();
        // Name the field that is too big for every host that would fit the other one.
        let cpus_fit = fleet
            .cpu_job_hosts
            .iter()
            .any(|h| h.cpus + 1e-9 >= pool.cpus);
        let field = if cpus_fit { "memory_gb" } else { "cpus" };
        self.err(
            format!("{p}.{field}"),
            format!(
                "a CPU-only machine of {} CPUs and {} GiB fits no node; the largest that fit: {}",
                pool.cpus,
                pool.memory_gb,
                largest.join("; ")
            ),
        );
    }

    /// Rejects jobs that no node of the fleet could ever host.
    fn fit(&mut self, spec: &JobSpec, fleet: &FleetShape) {
        let known: Vec<&str> = fleet.series.keys().map(String::as_str).collect();
        let mut per_series: BTreeMap<&str, (u32, Vec<&str>)> = BTreeMap::new();
        for (i, pool) in spec.pools.iter().enumerate() {
            let p = format!("pools[{i}]");
            let Some(series) = pool.series.as_deref() else {
                self.fit_cpu_only(&p, pool, fleet);
                continue;
            };
            let Some(shape) = fleet.series.get(series) else {
                self.err(
                    format!("{p}.series"),
                    format!("unknown series {series:?}; known: {}", known.join(", ")),
                );
                continue;
            };
            if pool.gpus_per_node > shape.max_gpus_per_node {
                self.err(
                    format!("{p}.gpus_per_node"),
                    format!(
                        "{} GPUs per node, but the largest {series} node has {}",
                        pool.gpus_per_node, shape.max_gpus_per_node
                    ),
                );
            }
            if pool.nodes > shape.nodes {
                self.err(
                    format!("{p}.nodes"),
                    format!(
                        "{} nodes, but the fleet has only {} {series} nodes",
                        pool.nodes, shape.nodes
                    ),
                );
            }
            if pool.cpus > f64::from(shape.max_cpus_per_node) {
                self.err(
                    format!("{p}.cpus"),
                    format!(
                        "{} CPUs per node, but the largest {series} node has {}",
                        pool.cpus, shape.max_cpus_per_node
                    ),
                );
            }
            if pool.memory_gb > f64::from(shape.max_memory_gb_per_node) {
                self.err(
                    format!("{p}.memory_gb"),
                    format!(
                        "{} GiB per node, but the largest {series} node has {}",
                        pool.memory_gb, shape.max_memory_gb_per_node
                    ),
                );
            }
            let entry = per_series.entry(series).or_default();
            entry.0 += pool.nodes;
            entry.1.push(&pool.name);
        }
        // Pools of one job never share a node, so pools of one series add up.
        for (series, (nodes, names)) in per_series {
            let have = fleet.series.get(series).map_or(0, |s| s.nodes);
            if names.len() > 1 && nodes > have {
                self.err(
                    "pools",
                    format!(
                        "pools {} together need {nodes} {series} nodes; the fleet has only {have}",
                        names.join(", ")
                    ),
                );
            }
        }
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
