//! `/v1/playgrounds/{id}/proxy/...`: a tenant reaches its playground's vLLM server through the API
//! with its own TunePlane key. The API checks the key and the owner, adds the server's own key
//! (vLLM runs with `--api-key`, see `render::playground`) and forwards to the pod's IP, which must
//! lie in the pod networks the operator configured (`TUNEPLANE_PLAYGROUND_POD_CIDRS`): the API
//! dials nothing else, whatever a record says. No tenant needs cluster credentials, and no
//! tenant's key reaches a pod.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tuneplane_core::playground::{PlaygroundView, ShownState};
use tuneplane_core::render::playground::PORT;
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};

use crate::error::ApiError;
use crate::state::{AppState, Auth, RawBody};

/// The paths the proxy forwards, by method: vLLM's OpenAI-compatible API as TunePlane documents
/// it (README, Playgrounds). vLLM checks its key only under `/v1`, `/v2` and `/inference`, and
/// serves `/invocations`, `/tokenize`, `/score`, `/pooling` and `/metrics` without one: none of
/// those is forwarded, whatever the caller asks.
pub const FORWARDED: [(&str, &str); 5] = [
    ("GET", "v1/models"),
    ("POST", "v1/chat/completions"),
    ("POST", "v1/completions"),
    ("POST", "v1/embeddings"),
    ("POST", "v1/responses"),
];

/// Whether `method` on `path` (after `/proxy/`) is one of [`FORWARDED`].
pub fn forwarded(method: &Method, path: &str) -> bool {
    FORWARDED
        .iter()
        .any(|(m, p)| method.as_str() == *m && path == *p)
}

/// Largest response passed back, bytes (a completion is far smaller).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

pub use crate::pod_network::{Cidr, PlaygroundProxy, UPSTREAM_TIMEOUT, parse_networks};

fn unavailable(code: &'static str, message: String) -> ApiError {
    ApiError::Upstream {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code,
        message,
    }
}

fn bad_gateway(message: String) -> ApiError {
    ApiError::Upstream {
        status: StatusCode::BAD_GATEWAY,
        code: "upstream_failed",
        message,
    }
}

/// `GET|POST /v1/playgrounds/{id}/proxy/{*path}`: the caller's playground `id`'s server at
/// `path` (`v1/models`, `v1/chat/completions`). GET needs `jobs:read`, POST `jobs:write`.
pub async fn forward(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path((id, path)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    principal.require(if method == Method::GET {
        SCOPE_JOBS_READ
    } else {
        SCOPE_JOBS_WRITE
    })?;
    let pg = state
        .control()
        .owned_playground(&principal.tenant, &id)
        .await?;
    let key = pg.server_key.clone();
    let ip = pg.pod_ip.clone();
    let view = PlaygroundView::of(pg, (state.clock)());
    if view.state != ShownState::Running {
        let why = match (&view.reason, &view.message) {
            (Some(r), Some(m)) => format!(" ({r}: {m})"),
            (None, Some(m)) => format!(" ({m})"),
            _ => String::new(),
        };
        return Err(ApiError::Conflict {
            code: "playground_not_running",
            message: format!(
                "playground {id} is {}{why}; try again once `tuneplane playground list` shows it Running",
                view.state.as_str()
            ),
        });
    }
    let Some(key) = key else {
        return Err(ApiError::Conflict {
            code: "playground_without_key",
            message: format!(
                "playground {id} was made by an older version without a server key and cannot be proxied; delete it and create another"
            ),
        });
    };
    if state.playground_proxy.networks.is_empty() {
        return Err(unavailable(
            "proxy_unavailable",
            "this API has no route to playground pods: the operator sets TUNEPLANE_PLAYGROUND_POD_CIDRS to the pod network (see README, Playgrounds)".into(),
        ));
    }
    let ip: IpAddr = ip
        .as_deref()
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            unavailable(
                "playground_not_running",
                format!("playground {id}'s pod has no IP yet; try again in a few seconds"),
            )
        })?;
    if !state
        .playground_proxy
        .networks
        .iter()
        .any(|n| n.contains(ip))
    {
        tracing::warn!(playground = %id, %ip, "pod IP outside TUNEPLANE_PLAYGROUND_POD_CIDRS; not forwarded");
        return Err(bad_gateway(format!(
            "playground {id}'s pod address is outside the pod networks this API may reach; the operator checks TUNEPLANE_PLAYGROUND_POD_CIDRS"
        )));
    }
    if !forwarded(&method, &path) {
        let list: Vec<String> = FORWARDED.iter().map(|(m, p)| format!("{m} {p}")).collect();
        return Err(ApiError::NotFound(format!(
            "{method} {path:?} is not forwarded to a playground; the proxy forwards {}",
            list.join(", ")
        )));
    }
    let host = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let mut url = format!("http://{host}:{PORT}/{path}");
    if let Some(q) = uri.query() {
        url.push('?');
        url.push_str(q);
    }
    let mut request = state
        .playground_proxy
        .client
        .request(method.clone(), &url)
        // The server's key, never the caller's: no tenant key reaches a pod.
        .bearer_auth(&key);
    for name in [header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(v) = headers.get(&name) {
            request = request.header(name, v);
        }
    }
    if method != Method::GET {
        request = request.body(body.to_vec());
    }
    let mut upstream = request.send().await.map_err(|e| {
        bad_gateway(format!(
            "playground {id}'s server did not answer ({}); it may still be loading the model, try again shortly",
            if e.is_timeout() { "timed out" } else if e.is_connect() { "connection refused" } else { "request failed" }
        ))
    })?;
    let status = upstream.status();
    let content_type = upstream.headers().get(header::CONTENT_TYPE).cloned();
    let mut out = Vec::new();
    while let Some(chunk) = upstream
        .chunk()
        .await
        .map_err(|_| bad_gateway(format!("playground {id}'s server broke off its answer")))?
    {
        if out.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(bad_gateway(format!(
                "playground {id}'s answer is over {} MiB; ask for less (max_tokens)",
                MAX_RESPONSE_BYTES >> 20
            )));
        }
        out.extend_from_slice(&chunk);
    }
    let mut response = Response::builder().status(status.as_u16());
    if let Some(ct) = content_type {
        response = response.header(header::CONTENT_TYPE, ct);
    }
    Ok(response
        .body(Body::from(out))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn only_the_documented_openai_paths_are_forwarded() {
        assert!(forwarded(&Method::GET, "v1/models"));
        assert!(forwarded(&Method::POST, "v1/chat/completions"));
        for (method, path) in [
            (Method::POST, "invocations"),
            (Method::GET, "metrics"),
            (Method::POST, "tokenize"),
            (Method::POST, "score"),
            (Method::POST, "pooling"),
            (Method::POST, "v1/models"),
            (Method::GET, "v1/chat/completions"),
            (Method::POST, "v1/chat/completions/../../invocations"),
            (Method::POST, "v1//chat/completions"),
            (Method::POST, "/v1/chat/completions"),
        ] {
            assert!(!forwarded(&method, path), "{method} {path}");
        }
    }

    #[test]
    fn networks_hold_their_addresses_and_nothing_else() {
        let pods = Cidr::parse("10.244.0.0/16").expect("parses");
        assert!(pods.contains(ip("10.244.1.7")));
        assert!(pods.contains(ip("10.244.255.254")));
        assert!(!pods.contains(ip("10.245.0.1")));
        assert!(!pods.contains(ip("127.0.0.1")));
        assert!(!pods.contains(ip("::1")));
        let one = Cidr::parse("127.83.0.1/32").expect("parses");
        assert!(one.contains(ip("127.83.0.1")) && !one.contains(ip("127.83.0.2")));
        let v6 = Cidr::parse("fd00:10::/64").expect("parses");
        assert!(v6.contains(ip("fd00:10::5")) && !v6.contains(ip("fd00:11::5")));
    }

    #[test]
    fn bad_and_too_wide_networks_are_refused_with_the_reason() {
        for (text, says) in [
            ("10.244.0.0", "write it as"),
            ("10.244.0.0/33", "prefix length from 8 to 32"),
            ("0.0.0.0/0", "prefix length from 8 to 32"),
            ("pods/16", "not an IP address"),
            ("::/0", "from 16 to 128"),
        ] {
            let e = Cidr::parse(text).err().unwrap_or_default();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert_eq!(parse_networks(" ").map(|v| v.len()), Ok(0));
        assert_eq!(
            parse_networks("10.244.0.0/16, 127.0.0.0/8").map(|v| v.len()),
            Ok(2)
        );
    }
}
