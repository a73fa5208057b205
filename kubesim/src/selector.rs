//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`) and field selectors (`=`, `==`, `!=`),
//! parsed from query strings and matched against JSON objects, and `metav1.LabelSelector`s and
//! node-selector terms as the scheduler reads them: one requirement type and one matcher for all.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::StatusError;
use crate::json::str_at;
use crate::resources::ResourceType;

/// Where a requirement reads labels from: a Node's or Pod's label map, parsed or as JSON.
pub trait LabelSet {
    /// The value of a label.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelSet for serde_json::Map<String, Value> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

impl<T: LabelSet> LabelSet for Option<&T> {
    fn label(&self, key: &str) -> Option<&str> {
        self.and_then(|l| l.label(key))
    }
}

/// A requirement's operator. Every spelling maps onto these four: a query's `k=v` is `In [v]`,
/// `k!=v` is `NotIn [v]` (true when the label is absent), `k` is `Exists`, `!k` `DoesNotExist`;
/// a `matchLabels` entry is `In` with one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// The label is set to one of the values.
    In,
    /// The label is missing or set to none of the values.
    NotIn,
    /// The label is set.
    Exists,
    /// The label is missing.
    DoesNotExist,
    /// Anything else (`Gt`, `Lt` or a typo; the API server refuses such selectors); matches
    /// nothing.
    Unknown,
}

impl Operator {
    /// Reads the operator of a `matchExpressions` or node-selector requirement.
    pub fn from_api(op: Option<&str>) -> Self {
        match op {
            Some("In") => Self::In,
            Some("NotIn") => Self::NotIn,
            Some("Exists") => Self::Exists,
            Some("DoesNotExist") => Self::DoesNotExist,
            _ => Self::Unknown,
        }
    }
}

/// One requirement of a label selector, whichever way it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label the requirement is about.
    pub key: String,
    /// How `key` is compared with `values`.
    pub operator: Operator,
    /// The values `In` and `NotIn` compare with; empty for `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

impl Requirement {
    fn new(key: &str, operator: Operator, values: Vec<String>) -> Self {
        Self {
            key: key.trim().to_string(),
            operator,
            values,
        }
    }

    /// Reads one `{key, operator, values}` object (`matchExpressions` or a node selector term).
    pub fn from_json(e: &Value) -> Self {
        Self {
            key: str_at(e, "/key").unwrap_or_default().to_string(),
            operator: Operator::from_api(e.get("operator").and_then(Value::as_str)),
            values: crate::json::strs(e.get("values"))
                .map(str::to_string)
                .collect(),
        }
    }

    /// Whether the labels satisfy the requirement.
    pub fn matches(&self, labels: &impl LabelSet) -> bool {
        let have = labels.label(&self.key);
        let listed = || have.is_some_and(|h| self.values.iter().any(|v| v == h));
        match self.operator {
            Operator::In => listed(),
            Operator::NotIn => !listed(),
            Operator::Exists => have.is_some(),
            Operator::DoesNotExist => have.is_none(),
            Operator::Unknown => false,
        }
    }
}

/// A `metav1.LabelSelector` as the scheduler converts it: a missing (`null`) selector selects
/// nothing, an empty one (`{}`) everything, otherwise every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `null` or absent.
    Nothing,
    /// `matchLabels` and `matchExpressions`, all of which must hold.
    All(Vec<Requirement>),
}

impl Selector {
    /// Reads a `LabelSelector` object.
    pub fn from_json(v: Option<&Value>) -> Self {
        let Some(obj) = v.and_then(Value::as_object) else {
            return Self::Nothing;
        };
        let labels = obj.get("matchLabels").and_then(Value::as_object);
        let mut reqs: Vec<Requirement> = labels
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some(Requirement::new(k, Operator::In, vec![v.as_str()?.into()])))
            .collect();
        reqs.extend(
            obj.get("matchExpressions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(Requirement::from_json),
        );
        Self::All(reqs)
    }

    /// Whether the labels satisfy the selector.
    pub fn matches(&self, labels: &impl LabelSet) -> bool {
        self.requirements()
            .is_some_and(|r| r.iter().all(|r| r.matches(labels)))
    }

    /// The `In` requirements: a matching object has the key set to one of the values, so an
    /// index by label can find every candidate.
    pub(crate) fn pinned(&self) -> impl Iterator<Item = &Requirement> {
        let reqs = self.requirements().unwrap_or_default();
        reqs.iter().filter(|r| r.operator == Operator::In)
    }

    /// The requirements, `None` for a selector that selects nothing.
    pub fn requirements(&self) -> Option<&[Requirement]> {
        match self {
            Self::Nothing => None,
            Self::All(r) => Some(r),
        }
    }
}

/// A parsed `labelSelector` query value: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

/// A parsed field selector: `(field, wanted value, equal?)` triples, all must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, String, bool)>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, StatusError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            StatusError::bad_request(format!(
                "unable to parse requirement: {whole:?}: expected a list in parentheses"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub fn parse(s: &str) -> Result<Self, StatusError> {
        let mut reqs = Vec::new();
        for part in split_top(s)
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let words: Vec<&str> = part.split_whitespace().collect();
            let one = |v: &str| vec![v.trim().to_string()];
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::new(key, Operator::DoesNotExist, Vec::new())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::new(k, Operator::NotIn, one(v))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::new(k, Operator::In, one(v))
            } else if words.len() >= 2 && words[1] == "in" {
                let rest = part.split_once(" in").map(|(_, r)| r).unwrap_or_default();
                Requirement::new(words[0], Operator::In, set_values(rest, part)?)
            } else if words.len() >= 2 && words[1] == "notin" {
                let rest = part
                    .split_once(" notin")
                    .map(|(_, r)| r)
                    .unwrap_or_default();
                Requirement::new(words[0], Operator::NotIn, set_values(rest, part)?)
            } else if words.len() == 1 {
                Requirement::new(part, Operator::Exists, Vec::new())
            } else {
                return Err(StatusError::bad_request(format!(
                    "unable to parse requirement: {part:?}"
                )));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = crate::json::at(obj, "/metadata/labels").and_then(Value::as_object);
        self.0.iter().all(|r| r.matches(&labels))
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value, rejecting fields the type does not support.
    pub fn parse(s: &str, rt: &ResourceType) -> Result<Self, StatusError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, eq) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, true)
            } else {
                return Err(StatusError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !rt.supports_field(field) {
                return Err(StatusError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), value.trim().to_string(), eq));
        }
        Ok(Self(reqs))
    }

    /// Whether an object satisfies every requirement (absent fields read as the empty string).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, want, eq)| {
            let have = field_value(obj, field);
            (have == *want) == *eq
        })
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Reads a selectable field as the API server renders it.
pub fn field_value(obj: &Value, field: &str) -> String {
    if field == "source" {
        return str_at(obj, "/source/component")
            .unwrap_or_default()
            .to_string();
    }
    let pointer = format!("/{}", field.replace('.', "/"));
    match crate::json::at(obj, &pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ if field == "spec.unschedulable" || field == "spec.hostNetwork" => "false".to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{EVENTS, PODS};
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": labels}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_handles_every_operator() {
        let o = obj(json!({"app": "ray", "tier": "head"}));
        for (sel, want) in [
            ("app=ray", true),
            ("app==ray,tier=head", true),
            ("app!=ray", false),
            ("missing!=x", true),
            ("tier in (head, worker)", true),
            ("tier notin (head)", false),
            ("missing notin (a)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (a,b),tier", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).map(|s| s.matches(&o)),
                Ok(want),
                "{sel}"
            );
        }
    }

    #[test]
    fn a_query_and_a_metav1_selector_saying_the_same_are_the_same_requirements() {
        let query = LabelSelector::parse("app=ray,tier notin (head),gpu,!spot").map(|s| s.0);
        let object = Selector::from_json(Some(&json!({
            "matchLabels": {"app": "ray"},
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["head"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "spot", "operator": "DoesNotExist"},
            ],
        })));
        assert_eq!(query.as_deref().ok(), object.requirements());
        let node: BTreeMap<String, String> = [("app", "ray"), ("gpu", "h100")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert!(object.matches(&node));
        assert!(!Selector::Nothing.matches(&node));
        let gt = Requirement::from_json(&json!({"key": "gpu", "operator": "Gt", "values": ["1"]}));
        assert!(
            !gt.matches(&node),
            "operators kubesim does not know match nothing"
        );
    }

    #[test]
    fn malformed_set_selector_is_a_bad_request() {
        assert_eq!(LabelSelector::parse("a in b").map_err(|e| e.code), Err(400));
    }

    #[test]
    fn field_selector_reads_nested_fields_and_rejects_unknown_ones() {
        let o = obj(json!({}));
        let s = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", &PODS).ok();
        assert_eq!(s.map(|s| s.matches(&o)), Some(true));
        let s = FieldSelector::parse("spec.nodeName=", &PODS).ok();
        assert_eq!(s.map(|s| s.matches(&json!({"spec": {}}))), Some(true));
        assert_eq!(
            FieldSelector::parse("spec.image=x", &PODS).map_err(|e| e.code),
            Err(400)
        );
        let ev = json!({"involvedObject": {"name": "p", "kind": "Pod"}, "source": {"component": "kubelet"}});
        let s = FieldSelector::parse(
            "involvedObject.name=p,involvedObject.kind=Pod,source=kubelet",
            &EVENTS,
        )
        .ok();
        assert_eq!(s.map(|s| s.matches(&ev)), Some(true));
    }
}
