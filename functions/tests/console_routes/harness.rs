//! The console tests' harness: the functions' shared one ([`Harness`]) driven as a browser drives
//! the console, with plain requests (cookies and CSRF tokens handled by hand).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use tower::ServiceExt;
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::job::JobRecord;
use tuneplane_functions::AppState;

use crate::common::Harness;

/// The router and state of a [`Harness`], and its tenants' keys.
pub struct Stack {
    /// The router.
    pub app: Router,
    /// Its state.
    pub state: Arc<AppState>,
    /// API key of tenant `acme`.
    pub key_a: String,
    /// API key of tenant `globex`.
    pub key_b: String,
    _harness: Harness,
}

/// A response as a browser sees it: status, headers and the body as text.
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: axum::http::HeaderMap,
    /// Body.
    pub body: String,
}

impl Reply {
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
    pub fn cookies(&self) -> Vec<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    }
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.cookies().into_iter().find_map(|c| {
            let first = c.split(';').next()?.to_owned();
            let (k, v) = first.split_once('=')?;
            (k == name && !v.is_empty()).then(|| first.clone())
        })
    }
}

/// The value of the first hidden `csrf` field of a page.
pub fn csrf_of(html: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = html
        .find(marker)
        .map(|i| i + marker.len())
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    html[start..]
        .split('"')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A console stack: the functions' shared harness (the whole API router over embedded stores,
/// keys of two tenants), with a browser's view of its answers.
pub async fn stack() -> Stack {
    let harness = Harness::embedded().await;
    Stack {
        app: harness.app.clone(),
        state: harness.state.clone(),
        key_a: harness.key_a.clone(),
        key_b: harness.key_b.clone(),
        _harness: harness,
    }
}

impl Stack {
    /// Runs `req` through the router.
    pub async fn call(&self, req: Request<Body>) -> axum::response::Response {
        match self.app.clone().oneshot(req).await {
            Ok(res) => res,
            Err(never) => match never {},
        }
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        cookie: Option<&str>,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "127.0.0.1:8080");
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c)
        }
        if let Some(t) = content_type {
            req = req.header(header::CONTENT_TYPE, t)
        }
        let req = req.body(Body::from(body)).unwrap();
        let res = self.call(req).await;
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
            .await
            .unwrap_or_default();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    pub async fn get(&self, path: &str, cookie: Option<&str>) -> Reply {
        self.send(Method::GET, path, cookie, None, Vec::new()).await
    }

    pub async fn post_form(
        &self,
        path: &str,
        cookie: Option<&str>,
        fields: &[(&str, &str)],
    ) -> Reply {
        let body: String = fields
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    tuneplane_functions::console::viewer::encode_component(v)
                )
            })
            .collect::<Vec<_>>()
            .join("&");
        self.send(
            Method::POST,
            path,
            cookie,
            Some("application/x-www-form-urlencoded"),
            body.into_bytes(),
        )
        .await
    }

    /// Opens the sign-in page at `path`; returns its sign-in cookie and CSRF token.
    pub async fn sign_in_form(&self, path: &str) -> (String, String) {
        let page = self.get(path, None).await;
        let nonce = page.cookie("tp_signin").expect("no sign-in cookie");
        (nonce, csrf_of(&page.body))
    }

    /// Signs in with `key`; returns the session cookie (`tp_session=...`).
    pub async fn sign_in(&self, key: &str) -> String {
        let (nonce, csrf) = self
            .sign_in_form("/console/sign-in?next=/console/capacity")
            .await;
        let res = self
            .post_form(
                "/console/sign-in",
                Some(&nonce),
                &[
                    ("api_key", key),
                    ("csrf", &csrf),
                    ("next", "/console/capacity"),
                ],
            )
            .await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
        assert_eq!(res.location(), "/console/capacity");
        res.cookie("tp_session").expect("no session cookie")
    }

    /// Sends the submit form with `spec` and hello.py's archive as the code.
    pub async fn submit_form(
        &self,
        session: &str,
        csrf: &str,
        idempotency_key: &str,
        spec: &str,
    ) -> Reply {
        let fields = [
            ("csrf", csrf),
            ("idempotency_key", idempotency_key),
            ("spec", spec),
        ];
        let (content_type, body) = multipart(&fields, Some(&archive()));
        self.send(
            Method::POST,
            "/console/submit",
            Some(session),
            Some(&content_type),
            body,
        )
        .await
    }

    /// Sends the playground form: `[model, series, gpus, ttl_minutes]`.
    pub async fn request_playground(
        &self,
        session: &str,
        csrf: &str,
        [model, series, gpus, ttl_minutes]: [&str; 4],
    ) -> Reply {
        self.post_form(
            "/console/playgrounds",
            Some(session),
            &[
                ("csrf", csrf),
                ("model", model),
                ("series", series),
                ("gpus", gpus),
                ("ttl_minutes", ttl_minutes),
            ],
        )
        .await
    }

    /// Signs out of `session`, with the CSRF token of a page it was shown.
    pub async fn sign_out(&self, session: &str, csrf: &str) -> Reply {
        self.post_form("/console/sign-out", Some(session), &[("csrf", csrf)])
            .await
    }

    /// The stored job `id`.
    pub async fn job(&self, id: &str) -> JobRecord {
        let job = self.state.submit.jobs().get_job(id).await;
        job.ok().flatten().expect("job")
    }

    /// The jobs stored for `tenant`.
    pub async fn stored_jobs(&self, tenant: &str) -> Vec<JobRecord> {
        let jobs = self.state.submit.jobs();
        jobs.list_jobs(&tenant.parse().unwrap(), &Default::default())
            .await
            .unwrap()
            .items
    }

    /// Publishes `snap` as the reconciler does.
    pub async fn publish_capacity(&self, snap: &CapacitySnapshot) {
        let value = serde_json::to_value(snap).unwrap_or_default();
        self.state.submit.jobs().put_capacity(&value).await.unwrap();
    }

    pub async fn submit_api(&self, key: &str, name: &str) -> String {
        let spec = format!(
            "name: {name}\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}}\n"
        );
        let body = serde_json::json!({"spec": spec, "code": {"inline": base64_archive()}});
        let req = Request::builder()
            .method(Method::POST)
            .uri("/v1/jobs")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let res = self.call(req).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        v["job_id"].as_str().unwrap_or_default().to_owned()
    }
}

/// A ready h200 node with 8 GPUs, `used` of them in use.
pub fn h200_node(name: &str, used: u32) -> NodeCapacity {
    NodeCapacity::ready(name, Some("h200"), 8, 64.0, 512.0).with_gpus_used(used)
}

/// A tar.gz holding `hello.py`.
pub fn archive() -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let data = b"print('hello')\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "hello.py", &data[..]).unwrap();
    b.into_inner().and_then(|g| g.finish()).unwrap()
}

pub fn base64_archive() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(archive())
}

pub fn multipart(fields: &[(&str, &str)], code: Option<&[u8]>) -> (String, Vec<u8>) {
    let boundary = "----tpboundary7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    if let Some(code) = code {
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"code\"; filename=\"code.tar.gz\"\r\nContent-Type: application/gzip\r\n\r\n").as_bytes());
        body.extend_from_slice(code);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}
