//! The HTTP face of the simulator: Kubernetes API paths parsed by hand (one fallback handler, so
//! core and group paths, cluster-scoped and namespaced forms share one parser) and dispatched to
//! CRUD, watch, log and discovery handlers.

mod crud;
mod discovery;
pub mod faults;
mod logs;
mod table;
mod watch;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::StatusError;
use crate::resources::{self, ResourceType};
use crate::store::Store;

/// What the API handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The object store, shared with the simulated controllers (what a request writes, they see
    /// at their next tick).
    pub store: Arc<Store>,
    /// Whether KubeRay types (`ray.io/v1`) are served.
    pub kuberay: bool,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: std::time::Duration,
    /// Injected failures.
    pub faults: Arc<faults::Faults>,
}

/// The router serving the whole API.
pub fn router(state: ApiState) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

/// A parsed resource path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// The type addressed.
    pub rt: &'static ResourceType,
    /// Namespace from the path (`None` for cluster-scoped or all-namespaces paths).
    pub namespace: Option<String>,
    /// Object name, for object paths.
    pub name: Option<String>,
    /// Subresource (`status`, `log`), for subresource paths.
    pub sub: Option<String>,
}

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`.
    Resources(String, String),
    /// `/version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// A resource path.
    Resource(ResourcePath),
    /// `/api/v1/namespaces/<ns>/pods/<name>[:<port>]/proxy/...` (namespace, pod name).
    PodProxy(String, String),
}

/// Parses a request path; `None` when the server does not serve it.
pub fn parse_path(path: &str, kuberay: bool) -> Option<Route> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api"] => return Some(Route::CoreVersions),
        ["apis"] => return Some(Route::Groups),
        ["version"] => return Some(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => return Some(Route::Health),
        ["apis", g] => {
            return resources::groups(kuberay)
                .iter()
                .any(|(name, _)| name == g)
                .then(|| Route::Group(g.to_string()));
        }
        ["api", "v1"] => return Some(Route::Resources(String::new(), "v1".into())),
        ["apis", g, v] => {
            let served = resources::groups(kuberay)
                .iter()
                .any(|(name, ver)| name == g && ver == v);
            return served.then(|| Route::Resources(g.to_string(), v.to_string()));
        }
        ["api", "v1", "namespaces", ns, "pods", target, "proxy", ..] => {
            let name = target.split(':').next().unwrap_or_default();
            return Some(Route::PodProxy(ns.to_string(), name.to_string()));
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let find = |plural: &str| resources::find(group, version, plural, kuberay);
    let route = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if find(plural).is_some_and(|r| r.namespaced) && tail.len() <= 2 =>
        {
            ResourcePath {
                rt: find(plural)?,
                namespace: Some(ns.to_string()),
                name: tail.first().map(|s| s.to_string()),
                sub: tail.get(1).map(|s| s.to_string()),
            }
        }
        [plural, tail @ ..] if tail.len() <= 2 => {
            let rt = find(plural)?;
            if rt.namespaced && !tail.is_empty() {
                return None;
            }
            ResourcePath {
                rt,
                namespace: None,
                name: tail.first().map(|s| s.to_string()),
                sub: tail.get(1).map(|s| s.to_string()),
            }
        }
        _ => return None,
    };
    Some(Route::Resource(route))
}

/// A request as an audit log names it: verb and resource (`create pods`, `get pods/log`,
/// `watch rayjobs`).
pub fn audit_verb(method: &Method, path: &ResourcePath, query: &HashMap<String, String>) -> String {
    let named = path.name.is_some();
    let verb = match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        Method::GET if named => "get",
        Method::GET if query.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        Method::GET => "list",
        _ => "other",
    };
    match &path.sub {
        Some(sub) => format!("{verb} {}/{sub}", path.rt.plural),
        None => format!("{verb} {}", path.rt.plural),
    }
}

/// Decodes a query string into a map (last value wins).
pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in q.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(percent_decode(k), percent_decode(v));
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A JSON response.
pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A JSON response from pre-serialised bytes.
pub(crate) fn raw_json(code: StatusCode, body: Vec<u8>) -> Response {
    (
        code,
        [("content-type", "application/json")],
        Body::from(body),
    )
        .into_response()
}

/// A 200 response of `content_type` with `body`.
pub(crate) fn ok_body(content_type: &'static str, body: Body) -> Response {
    (StatusCode::OK, [("content-type", content_type)], body).into_response()
}

/// A body sent piece by piece as its source yields them: a watch's event lines, a followed log.
pub(crate) trait Pieces: Send + 'static {
    /// The next piece to send, or `None` when the body ends (the client then sees the end of the
    /// response).
    fn next_piece(&mut self) -> impl Future<Output = Option<String>> + Send;
}

/// A 200 response of `content_type` whose body is `source`'s pieces, each sent as it comes.
pub(crate) fn streamed(content_type: &'static str, source: impl Pieces) -> Response {
    let body = futures_util::stream::unfold(source, |mut s| async move {
        let piece = s.next_piece().await?;
        Some((Ok::<_, Infallible>(Bytes::from(piece)), s))
    });
    ok_body(content_type, Body::from_stream(body))
}

async fn dispatch(
    axum::extract::State(state): axum::extract::State<ApiState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    body: Bytes,
) -> Response {
    let query = parse_query(uri.query());
    let Some(route) = parse_path(uri.path(), state.kuberay) else {
        return StatusError::no_route(uri.path()).into_response();
    };
    tracing::debug!(%method, path = uri.path(), "request");
    let result = match route {
        Route::Resource(path) => {
            let verdict =
                state
                    .faults
                    .verdict(&method, uri.path(), audit_verb(&method, &path, &query));
            if let Some(delay) = verdict.delay {
                tokio::time::sleep(delay).await;
            }
            let request = crud::Request {
                method: &method,
                path: &path,
                query: &query,
                headers: &headers,
                body: &body,
            };
            type Conn = axum::extract::ConnectInfo<faults::ConnHandle>;
            let conn = extensions.get::<Conn>().map(|c| c.0.clone());
            match verdict.fault {
                Some(faults::Fault::Status(failure)) => return failure,
                // A killed connection never writes the answer. Served without a killable
                // connection (a router used directly), a drop answers a plain 503.
                Some(faults::Fault::Drop) => {
                    if let Some(conn) = conn {
                        conn.kill();
                    }
                    return faults::status(503, 1);
                }
                Some(faults::Fault::LoseResponse) => {
                    let answer = crud::handle(&state, &request).await;
                    if let Some(conn) = conn {
                        conn.kill();
                    }
                    return answer.unwrap_or_else(IntoResponse::into_response);
                }
                None => {}
            }
            crud::handle(&state, &request).await
        }
        Route::PodProxy(ns, name) => match state.store.get(&resources::PODS, &ns, &name) {
            // Simulated pods serve nothing; say so instead of a bare 404.
            Ok(_) => {
                let mut e = StatusError::internal(format!(
                    "kubesim does not proxy to pods: pod {ns}/{name} is simulated and serves no port"
                ));
                e.code = 503;
                e.reason = "ServiceUnavailable";
                Err(e)
            }
            Err(e) => Err(e),
        },
        other if method == Method::GET => Ok(discovery::handle(&state, &other, &uri)),
        _ => Err(StatusError::method_not_allowed(format!(
            "{method} is not supported on {}",
            uri.path()
        ))),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = (&'static str, Option<String>, Option<String>, Option<String>);

    fn res(path: &str) -> Option<Parsed> {
        match parse_path(path, true)? {
            Route::Resource(p) => Some((p.rt.plural, p.namespace, p.name, p.sub)),
            _ => None,
        }
    }

    #[test]
    fn paths_parse_into_type_namespace_name_and_subresource() {
        let s = |x: &str| Some(x.to_string());
        assert_eq!(res("/api/v1/pods"), Some(("pods", None, None, None)));
        assert_eq!(
            res("/api/v1/namespaces/ns/pods/p/log"),
            Some(("pods", s("ns"), s("p"), s("log")))
        );
        assert_eq!(
            res("/api/v1/namespaces"),
            Some(("namespaces", None, None, None))
        );
        assert_eq!(
            res("/api/v1/namespaces/ns"),
            Some(("namespaces", None, s("ns"), None))
        );
        assert_eq!(
            res("/api/v1/namespaces/ns/status"),
            Some(("namespaces", None, s("ns"), s("status")))
        );
        assert_eq!(
            res("/api/v1/nodes/n1/status"),
            Some(("nodes", None, s("n1"), s("status")))
        );
        assert_eq!(
            res("/apis/ray.io/v1/namespaces/a/rayjobs/j/status"),
            Some(("rayjobs", s("a"), s("j"), s("status")))
        );
        assert_eq!(
            res("/apis/coordination.k8s.io/v1/namespaces/a/leases"),
            Some(("leases", s("a"), None, None))
        );
        assert_eq!(res("/api/v1/pods/p"), None);
        assert_eq!(res("/api/v1/widgets"), None);
        assert!(parse_path("/apis/ray.io/v1/rayjobs", false).is_none());
        assert_eq!(
            parse_path("/api/v1/namespaces/a/pods/pg:8000/proxy/v1/models", true),
            Some(Route::PodProxy("a".into(), "pg".into()))
        );
    }

    #[test]
    fn query_values_are_percent_decoded() {
        let q = parse_query(Some("labelSelector=app%3Dray%2Ctier+in+%28a%29&watch=1"));
        assert_eq!(
            q.get("labelSelector").map(String::as_str),
            Some("app=ray,tier in (a)")
        );
        assert_eq!(q.get("watch").map(String::as_str), Some("1"));
    }
}
