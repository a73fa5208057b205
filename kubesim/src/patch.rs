//! Patches: the formats a `PATCH` may carry, JSON patch (RFC 6902) and the approximation of
//! server-side apply used here (a merge where lists of named items merge by `name`). JSON merge
//! patch (RFC 7386) and the RFC 6902 operations are the `json-patch` crate's.

use serde_json::Value;

use crate::error::StatusError;

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

/// Merges like a JSON merge patch ([`json_patch::merge`]) but lists whose items all carry a
/// `name` merge item by item. This approximates server-side apply and strategic merge for containers, env, volumes, ports.
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
            ::json_patch::merge(&mut fresh, p);
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

/// Applies an RFC 6902 JSON patch, returning the patched document; the document is unchanged
/// when any operation fails.
pub fn json_patch(doc: &Value, ops: &Value) -> Result<Value, StatusError> {
    if !ops.is_array() {
        return Err(StatusError::bad_request(
            "json patch must be an array of operations",
        ));
    }
    let ops: ::json_patch::Patch = serde_json::from_value(ops.clone())
        .map_err(|e| StatusError::invalid_patch(format!("malformed operation: {e}")))?;
    let mut doc = doc.clone();
    ::json_patch::patch(&mut doc, &ops).map_err(|e| StatusError::invalid_patch(e.to_string()))?;
    Ok(doc)
}

impl StatusError {
    /// `422 Invalid` for a JSON patch that cannot be applied. The API server answers every such
    /// failure alike (a generic server response: no cause, empty details); `message` says what
    /// failed in kubesim's log only.
    pub fn invalid_patch(message: String) -> Self {
        tracing::debug!(%message, "JSON patch not applied");
        let mut e = StatusError::bad_request(
            "the server rejected our request due to an error in our request",
        );
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
