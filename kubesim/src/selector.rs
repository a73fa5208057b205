//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`) and field selectors (`=`, `==`, `!=`),
//! parsed from query strings and matched against JSON objects.

use serde_json::Value;

use crate::error::ApiError;
use crate::json::str_at;
use crate::resources::ResourceType;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelReq {
    /// `key=value` / `key==value`.
    Eq(String, String),
    /// `key!=value` (also true when the label is absent).
    NotEq(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<LabelReq>);

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

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
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
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s)
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let words: Vec<&str> = part.split_whitespace().collect();
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
            } else if words.len() >= 2 && words[1] == "in" {
                let rest = part.split_once(" in").map(|(_, r)| r).unwrap_or_default();
                LabelReq::In(words[0].to_string(), set_values(rest, part)?)
            } else if words.len() >= 2 && words[1] == "notin" {
                let rest = part
                    .split_once(" notin")
                    .map(|(_, r)| r)
                    .unwrap_or_default();
                LabelReq::NotIn(words[0].to_string(), set_values(rest, part)?)
            } else if words.len() == 1 {
                LabelReq::Exists(part.to_string())
            } else {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}"
                )));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = crate::json::at(obj, "/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value, rejecting fields the type does not support.
    pub fn parse(s: &str, rt: &ResourceType) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, eq) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !rt.supports_field(field) {
                return Err(ApiError::bad_request(format!(
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
