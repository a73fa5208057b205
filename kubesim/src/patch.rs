//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the approximation of
//! server-side apply used here (a merge where lists of named items merge by `name`).

use serde_json::Value;

use crate::error::ApiError;

/// The patch formats a `PATCH` request can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`, approximated as a merge keyed by `name` in lists.
    Strategic,
    /// `application/json-patch+json`.
    Json,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// The patch kind of a `Content-Type` header value.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let ct = ct.split(';').next().unwrap_or_default().trim();
        match ct {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/json-patch+json" => Some(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies an RFC 7386 merge patch in place: objects merge, `null` removes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Merges like [`merge`] but lists whose items all carry a `name` merge item by item.
/// This approximates server-side apply and strategic merge for containers, env, volumes, ports.
pub fn merge_keyed(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_keyed(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (Value::Array(t), Value::Array(p)) if is_named_list(t) && is_named_list(p) => {
            let mut out = Vec::with_capacity(p.len());
            for item in p {
                let name = item.get("name");
                let mut merged = t
                    .iter()
                    .find(|x| x.get("name") == name)
                    .cloned()
                    .unwrap_or(Value::Null);
                merge_keyed(&mut merged, item);
                out.push(merged);
            }
            *t = out;
        }
        (t, p) => {
            let mut fresh = Value::Null;
            merge(&mut fresh, p);
            *t = fresh;
        }
    }
}

fn is_named_list(items: &[Value]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|i| i.get("name").is_some_and(Value::is_string))
}

/// Applies an RFC 6902 JSON patch, returning the patched document.
pub fn json_patch(doc: &Value, ops: &Value) -> Result<Value, ApiError> {
    let ops = ops
        .as_array()
        .ok_or_else(|| ApiError::bad_request("json patch must be an array of operations"))?;
    let mut doc = doc.clone();
    for (i, op) in ops.iter().enumerate() {
        let bad = |m: &str| ApiError::invalid_patch(format!("operation {i}: {m}"));
        let kind = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("missing op"))?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("missing path"))?;
        let value = || op.get("value").cloned().ok_or_else(|| bad("missing value"));
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("missing from"))
        };
        match kind {
            "add" => add(&mut doc, path, value()?).map_err(|m| bad(&m))?,
            "remove" => {
                remove(&mut doc, path).map_err(|m| bad(&m))?;
            }
            "replace" => {
                remove(&mut doc, path).map_err(|m| bad(&m))?;
                add(&mut doc, path, value()?).map_err(|m| bad(&m))?;
            }
            "move" => {
                let v = remove(&mut doc, from()?).map_err(|m| bad(&m))?;
                add(&mut doc, path, v).map_err(|m| bad(&m))?;
            }
            "copy" => {
                let v = doc
                    .pointer(from()?)
                    .cloned()
                    .ok_or_else(|| bad("from path does not exist"))?;
                add(&mut doc, path, v).map_err(|m| bad(&m))?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value()?) {
                    return Err(bad(&format!("test failed at {path}")));
                }
            }
            other => return Err(bad(&format!("unknown op {other:?}"))),
        }
    }
    Ok(doc)
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_parent(path: &str) -> Result<(&str, String), String> {
    let idx = path
        .rfind('/')
        .ok_or_else(|| format!("invalid path {path:?}"))?;
    Ok((&path[..idx], unescape(&path[idx + 1..])))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_parent(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse().map_err(|_| format!("bad index {last:?}"))?
            };
            if idx > a.len() {
                return Err(format!("index {idx} out of range"));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(format!("parent of {path:?} does not exist")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_parent(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m
            .remove(&last)
            .ok_or_else(|| format!("{path:?} does not exist")),
        Some(Value::Array(a)) => {
            let idx: usize = last.parse().map_err(|_| format!("bad index {last:?}"))?;
            if idx >= a.len() {
                return Err(format!("index {idx} out of range"));
            }
            Ok(a.remove(idx))
        }
        _ => Err(format!("{path:?} does not exist")),
    }
}

impl ApiError {
    /// `422 Invalid` for a JSON patch that cannot be applied. The API server answers every such
    /// failure alike (a generic server response: no cause, empty details); `message` says what
    /// failed in kubesim's log only.
    pub fn invalid_patch(message: String) -> Self {
        tracing::debug!(%message, "JSON patch not applied");
        let mut e =
            ApiError::bad_request("the server rejected our request due to an error in our request");
        e.code = 422;
        e.reason = "Invalid";
        e.details = Some(serde_json::json!({}));
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn keyed_merge_merges_named_list_items() {
        let mut doc = json!({"containers": [{"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]}]});
        merge_keyed(
            &mut doc,
            &json!({"containers": [{"name": "a", "image": "y"}]}),
        );
        assert_eq!(
            doc,
            json!({"containers": [{"name": "a", "image": "y", "env": [{"name": "K", "value": "1"}]}]})
        );
    }

    #[test]
    fn json_patch_supports_add_replace_remove_test() {
        let doc = json!({"metadata": {"labels": {"a": "1"}}, "list": [1, 2]});
        let ops = json!([
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
            {"op": "remove", "path": "/list/0"},
            {"op": "add", "path": "/list/-", "value": 9}
        ]);
        assert_eq!(
            json_patch(&doc, &ops).ok(),
            Some(json!({"metadata": {"labels": {"a": "3", "b": "2"}}, "list": [2, 9]}))
        );
        let failing = json!([{"op": "test", "path": "/list/0", "value": 7}]);
        assert_eq!(json_patch(&doc, &failing).map_err(|e| e.code), Err(422));
    }
}
