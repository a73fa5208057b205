//! Create, get, list, replace, patch and delete of resources (and their `/status`), dispatching
//! watches and logs to their own modules.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{ApiState, ResourcePath, json_response, raw_json, table};
use crate::error::StatusError;
use crate::patch::{self, PatchKind};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, ListQuery, Part, Propagation};

/// A request on a resource path, as the router received it.
pub(super) struct Request<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    /// The parsed path.
    pub path: &'a ResourcePath,
    /// The decoded query parameters.
    pub query: &'a HashMap<String, String>,
    /// The request headers (`content-type` of patches, `accept` of tables).
    pub headers: &'a HeaderMap,
    /// The raw body (JSON or YAML).
    pub body: &'a Bytes,
}

pub(super) async fn handle(
    state: &ApiState,
    request: &Request<'_>,
) -> Result<Response, StatusError> {
    let Request {
        method,
        path,
        query,
        headers,
        body,
    } = *request;
    let rt = path.rt;
    let ns = path.namespace.clone().unwrap_or_default();
    let sub = path.sub.as_deref();
    if let Some(s) = sub {
        let served = (s == "status" && rt.status)
            || (s == "log" && std::ptr::eq(rt, &crate::resources::PODS));
        if !served {
            return Err(StatusError::no_route(&format!("{}/{s}", rt.plural)));
        }
    }
    if query.contains_key("dryRun") && method != Method::GET {
        // Refusing is safer than writing what the caller meant only to try.
        return Err(StatusError::bad_request(
            "dryRun is not supported by kubesim",
        ));
    }
    let store = &state.store;
    match (method.clone(), path.name.as_deref()) {
        (Method::GET, None) => {
            let q = list_query(path, query)?;
            if flag(query, "watch") {
                return super::watch::serve(state, rt, q, query).await;
            }
            let limit = query.get("limit").and_then(|l| l.parse().ok());
            let page = store.list(rt, &q, limit, query.get("continue").map(String::as_str))?;
            if table::wanted(headers) {
                return Ok(json_response(
                    StatusCode::OK,
                    &table::render(rt, &page.items, page.rv),
                ));
            }
            Ok(raw_json(StatusCode::OK, list_body(rt, &page)))
        }
        (Method::GET, Some(name)) if sub == Some("log") => {
            super::logs::serve(state, &ns, name, query).await
        }
        (Method::GET, Some(name)) => {
            let obj = store.get(rt, &ns, name)?;
            if table::wanted(headers) {
                let rv = store.current_rv();
                return Ok(json_response(
                    StatusCode::OK,
                    &table::render(rt, std::slice::from_ref(&obj), rv),
                ));
            }
            Ok(json_response(StatusCode::OK, &obj))
        }
        (Method::POST, None) => {
            if rt.namespaced && path.namespace.is_none() {
                return Err(StatusError::method_not_allowed(format!(
                    "create {} needs a namespace in the path",
                    rt.plural
                )));
            }
            let obj = store.create(rt, &ns, decode(body)?)?;
            Ok(json_response(StatusCode::CREATED, &obj))
        }
        (Method::PUT, Some(name)) => {
            let new = decode(body)?;
            let obj = store.update(rt, &ns, name, written_part(path), |_| Ok(new))?;
            Ok(json_response(StatusCode::OK, &obj))
        }
        (Method::PATCH, Some(name)) => patch(state, request, &ns, name),
        (Method::DELETE, Some(name)) => {
            let opts = delete_options(query, body)?;
            let obj = store.delete(rt, &ns, name, &opts)?;
            Ok(json_response(StatusCode::OK, &obj))
        }
        (Method::DELETE, None) => {
            let q = list_query(path, query)?;
            let opts = delete_options(query, body)?;
            let page = store.list(rt, &q, None, None)?;
            let mut deleted = Vec::new();
            for obj in &page.items {
                let (ns, name) = (crate::json::namespace(obj), crate::json::name(obj));
                // An item deleted meanwhile (cascade) is simply skipped.
                if let Ok(d) = store.delete(rt, ns, name, &opts) {
                    deleted.push(d);
                }
            }
            let page = crate::store::ListPage {
                rv: store.current_rv(),
                items: deleted,
                next: None,
            };
            Ok(raw_json(StatusCode::OK, list_body(rt, &page)))
        }
        (m, _) => Err(StatusError::method_not_allowed(format!(
            "{m} is not supported on this path"
        ))),
    }
}

/// What a PUT or PATCH on `path` writes: the `/status` subresource or the main resource.
fn written_part(path: &ResourcePath) -> Part {
    if path.sub.as_deref() == Some("status") {
        Part::Status
    } else {
        Part::Main
    }
}

fn patch(
    state: &ApiState,
    request: &Request<'_>,
    ns: &str,
    name: &str,
) -> Result<Response, StatusError> {
    let rt = request.path.rt;
    let part = written_part(request.path);
    let ct = request
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let kind =
        PatchKind::from_content_type(ct).ok_or_else(|| StatusError::unsupported_media_type(ct))?;
    let doc = decode(request.body)?;
    let store = &state.store;
    if kind == PatchKind::Apply {
        if request
            .query
            .get("fieldManager")
            .is_none_or(|m| m.is_empty())
        {
            return Err(StatusError::bad_request(
                "PATCH, application/apply-patch+yaml requests require the fieldManager parameter",
            ));
        }
        if store.try_get(rt, ns, name).is_none() {
            if part == Part::Status {
                return Err(StatusError::not_found(rt.plural, rt.group, name));
            }
            let mut doc = doc;
            crate::json::obj_mut(&mut doc, "metadata")
                .insert("name".into(), Value::String(name.to_string()));
            let obj = store.create(rt, ns, doc)?;
            return Ok(json_response(StatusCode::CREATED, &obj));
        }
    }
    let obj = store.update(rt, ns, name, part, |current| {
        let mut new = current.clone();
        match kind {
            PatchKind::Merge => json_patch::merge(&mut new, &doc),
            PatchKind::Strategic | PatchKind::Apply => patch::merge_keyed(&mut new, &doc),
            PatchKind::Json => new = patch::json_patch(current, &doc)?,
        }
        Ok(new)
    })?;
    Ok(json_response(StatusCode::OK, &obj))
}

/// Decodes a request body as JSON, or YAML when it is not JSON.
fn decode(body: &Bytes) -> Result<Value, StatusError> {
    if body.is_empty() {
        return Err(StatusError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body).or_else(|json_err| {
        yaml_serde::from_slice::<Value>(body).map_err(|_| {
            StatusError::bad_request(format!(
                "the request body is not valid JSON or YAML: {json_err}"
            ))
        })
    })
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "true" || v == "1")
}

fn list_query(
    path: &ResourcePath,
    query: &HashMap<String, String>,
) -> Result<ListQuery, StatusError> {
    Ok(ListQuery {
        namespace: path.namespace.clone(),
        labels: LabelSelector::parse(
            query
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
        fields: FieldSelector::parse(
            query
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
            path.rt,
        )?,
    })
}

fn delete_options(
    query: &HashMap<String, String>,
    body: &Bytes,
) -> Result<DeleteOptions, StatusError> {
    let doc: Value = if body.is_empty() {
        json!({})
    } else {
        decode(body)?
    };
    let policy = doc
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| query.get("propagationPolicy").cloned());
    let propagation = match policy.as_deref() {
        None | Some("Background") | Some("Foreground") => Propagation::Background,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(StatusError::bad_request(format!(
                "unsupported propagationPolicy {other:?}"
            )));
        }
    };
    let pre = |k: &str| {
        doc.pointer(&format!("/preconditions/{k}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let grace_period_seconds = match doc.get("gracePeriodSeconds") {
        Some(v) => v.as_i64(),
        None => query
            .get("gracePeriodSeconds")
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    StatusError::bad_request(format!("invalid gracePeriodSeconds {v:?}"))
                })
            })
            .transpose()?,
    };
    Ok(DeleteOptions {
        propagation,
        resource_version: pre("resourceVersion"),
        uid: pre("uid"),
        grace_period_seconds,
    })
}

/// Serialises a list without cloning its items.
pub(super) fn list_body(
    rt: &crate::resources::ResourceType,
    page: &crate::store::ListPage,
) -> Vec<u8> {
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(next) = &page.next {
        meta["continue"] = Value::String(next.clone());
    }
    let head = json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": meta}).to_string();
    let mut out = Vec::with_capacity(64 + page.items.len() * 1024);
    // `head` ends with '}': reopen it to append the items array.
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, &**item);
    }
    out.extend_from_slice(b"]}");
    out
}
