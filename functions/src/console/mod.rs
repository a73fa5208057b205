//! The web console: server-rendered HTML pages over the same stores and rules as the `/v1` API,
//! mounted on the same router, so it is served by Lambda behind API Gateway and by `tuneplane dev`
//! alike.
//!
//! - Pages: jobs ([`jobs`]), job detail with the event view and log preview, capacity
//!   ([`capacity`]), playgrounds ([`playgrounds`]) and submit ([`submit`]).
//! - Sign-in with an API key ([`auth`]), the signed-in user of a page ([`viewer`]); the session lives in a signed, expiring, HttpOnly, Secure,
//!   SameSite=Strict cookie ([`session`]); every form carries a CSRF token.
//! - HTML is rendered with `maud`; CSS and a little progressive-enhancement JavaScript (local
//!   times, relative ages, auto-refresh, inline spec validation) are embedded in the binary
//!   ([`assets`]). Every page works without JavaScript.
//!
//! Handlers only fetch, call core, and render; pure view helpers live in [`view`].

pub mod assets;
pub mod auth;
pub mod callbacks;
pub mod capacity;
pub mod jobs;
pub mod jobs_detail;
pub mod layout;
pub mod logs;
pub mod playgrounds;
pub mod session;
pub mod submit;
pub mod usage;
pub mod view;
pub mod viewer;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

use crate::state::AppState;
use session::{ENV_CONSOLE_SECRET, SessionKey};

/// Path prefix of every console page.
pub const BASE: &str = "/console";

/// Console settings shared by its handlers (an extension on the console's routes).
#[derive(Debug, Clone)]
pub struct ConsoleKeys {
    /// Signs sessions and CSRF tokens.
    pub session: SessionKey,
}

impl ConsoleKeys {
    /// Keys from [`ENV_CONSOLE_SECRET`] when set (read once, when the router is built), else a
    /// random key for this process, which suits one-process deployments (`tuneplane dev`).
    pub fn from_env() -> ConsoleKeys {
        match std::env::var(ENV_CONSOLE_SECRET) {
            Ok(secret) if secret.len() >= 32 => ConsoleKeys {
                session: SessionKey::from_secret(secret.as_bytes()),
            },
            Ok(_) => {
                tracing::warn!(
                    var = ENV_CONSOLE_SECRET,
                    "console secret shorter than 32 bytes ignored; sessions last as long as this process"
                );
                ConsoleKeys::random()
            }
            Err(_) => ConsoleKeys::random(),
        }
    }

    /// A random key: sessions end with the process.
    pub fn random() -> ConsoleKeys {
        ConsoleKeys {
            session: SessionKey::random(),
        }
    }
}

/// The console's routes with the given keys, to be merged into the API router (which adds the
/// state, the body limit and the request-id middleware).
pub fn router_with(keys: ConsoleKeys) -> Router<Arc<AppState>> {
    let pages = Router::new()
        .route("/", get(|| async { Redirect::to("/console/jobs") }))
        .route("/sign-in", get(auth::sign_in_page).post(auth::sign_in))
        .route("/sign-out", post(auth::sign_out))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}", get(jobs::detail))
        .route("/jobs/{id}/stop", post(jobs::stop))
        .route("/jobs/{id}/logs", get(jobs::logs_download))
        .route("/jobs/{id}/outputs/{*path}", get(jobs::output_download))
        .route("/capacity", get(capacity::page_route))
        .route("/usage", get(usage::page_route))
        .route(
            "/playgrounds",
            get(playgrounds::list).post(playgrounds::create),
        )
        .route("/playgrounds/{id}/delete", post(playgrounds::delete))
        .route("/callbacks", get(callbacks::list).post(callbacks::add))
        .route("/callbacks/{id}/delete", post(callbacks::delete))
        .route("/submit", get(submit::page_route).post(submit::submit))
        .route("/submit/validate", post(submit::validate_route))
        .layer(middleware::from_fn(security_headers))
        .route("/assets/{name}", get(assets::serve));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/jobs") }))
        .nest(BASE, pages)
        .layer(Extension(Arc::new(keys)))
}

/// Headers of every page: a strict content security policy (scripts and styles only from this
/// origin), no framing, no sniffing, no referrer to other sites, and no caching of tenant data.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

#[cfg(test)]
mod tests {
    //! Router-level tests of the console: the whole API router over embedded stores, driven with
    //! plain requests (cookies and CSRF tokens handled by hand, as a browser would).

    use std::sync::Arc;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode, header};
    use tower::ServiceExt;
    use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
    use tuneplane_core::job::{EventSource, JobEvent, JobRecord, JobState, Pending, PendingReason};
    use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, new_api_key};

    use crate::config::{Backend, Config};
    use crate::state::AppState;

    mod attempts_outputs;
    mod audit;
    mod callbacks;
    mod revocation;
    mod usage;

    struct Stack {
        app: Router,
        state: Arc<AppState>,
        key_a: String,
        key_b: String,
        _dir: tempfile::TempDir,
    }

    struct Reply {
        status: StatusCode,
        headers: axum::http::HeaderMap,
        body: String,
    }

    impl Reply {
        fn location(&self) -> &str {
            self.headers
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        }
        fn cookies(&self) -> Vec<String> {
            self.headers
                .get_all(header::SET_COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_owned))
                .collect()
        }
        fn cookie(&self, name: &str) -> Option<String> {
            self.cookies().into_iter().find_map(|c| {
                let first = c.split(';').next()?.to_owned();
                let (k, v) = first.split_once('=')?;
                (k == name && !v.is_empty()).then(|| first.clone())
            })
        }
    }

    /// The value of the first hidden `csrf` field of a page.
    fn csrf_of(html: &str) -> String {
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

    async fn stack() -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let submit = tuneplane_core::submit::SubmitConfig {
            scratch_dir: dir.path().join("scratch"),
            ..Default::default()
        };
        std::fs::create_dir_all(&submit.scratch_dir).unwrap();
        let config = Config {
            backend: Backend::Local {
                dir: dir.path().to_path_buf(),
                blob_secret: "test-secret".into(),
                blob_url: "http://127.0.0.1:9/blobs".into(),
            },
            submit,
            webhooks: Default::default(),
            event_senders: Default::default(),
            json_logs: false,
            listen: None,
            playground_pod_networks: Vec::new(),
            rate_per_key: None,
            rate_per_source: None,
            grant_key: None,
        };
        let (jobs, blobs) = crate::runtime::stores(&config).await.unwrap();
        let state = crate::runtime::state_with(&config, jobs, blobs);
        let mut keys = Vec::new();
        for (i, tenant) in ["acme", "globex"].into_iter().enumerate() {
            let scopes = vec![SCOPE_JOBS_READ.to_owned(), SCOPE_JOBS_WRITE.to_owned()];
            let (secret, record) = new_api_key([i as u8 + 1; 20], tenant, scopes, "test", 0);
            state.submit.jobs().put_api_key(&record).await.unwrap();
            keys.push(secret);
        }
        Stack {
            app: crate::router(state.clone()),
            state,
            key_b: keys.remove(1),
            key_a: keys.remove(0),
            _dir: dir,
        }
    }

    impl Stack {
        /// Runs `req` through the router.
        async fn call(&self, req: Request<Body>) -> axum::response::Response {
            match self.app.clone().oneshot(req).await {
                Ok(res) => res,
                Err(never) => match never {},
            }
        }

        async fn send(
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

        async fn get(&self, path: &str, cookie: Option<&str>) -> Reply {
            self.send(Method::GET, path, cookie, None, Vec::new()).await
        }

        async fn post_form(
            &self,
            path: &str,
            cookie: Option<&str>,
            fields: &[(&str, &str)],
        ) -> Reply {
            let body: String = fields
                .iter()
                .map(|(k, v)| format!("{k}={}", super::viewer::encode_component(v)))
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
        async fn sign_in_form(&self, path: &str) -> (String, String) {
            let page = self.get(path, None).await;
            let nonce = page.cookie("tp_signin").expect("no sign-in cookie");
            (nonce, csrf_of(&page.body))
        }

        /// Signs in with `key`; returns the session cookie (`tp_session=...`).
        async fn sign_in(&self, key: &str) -> String {
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
        async fn submit_form(
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
        async fn request_playground(
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
        async fn sign_out(&self, session: &str, csrf: &str) -> Reply {
            self.post_form("/console/sign-out", Some(session), &[("csrf", csrf)])
                .await
        }

        /// The stored job `id`.
        async fn job(&self, id: &str) -> JobRecord {
            let job = self.state.submit.jobs().get_job(id).await;
            job.ok().flatten().expect("job")
        }

        /// The jobs stored for `tenant`.
        async fn stored_jobs(&self, tenant: &str) -> Vec<JobRecord> {
            let jobs = self.state.submit.jobs();
            jobs.list_jobs(tenant, &Default::default())
                .await
                .unwrap()
                .items
        }

        /// Publishes `snap` as the reconciler does.
        async fn publish_capacity(&self, snap: &CapacitySnapshot) {
            let value = serde_json::to_value(snap).unwrap_or_default();
            self.state.submit.jobs().put_capacity(&value).await.unwrap();
        }

        async fn submit_api(&self, key: &str, name: &str) -> String {
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
    fn h200_node(name: &str, used: u32) -> NodeCapacity {
        NodeCapacity {
            name: name.into(),
            series: Some("h200".into()),
            gpus: 8,
            gpus_used: used,
            cpus: 64.0,
            memory_gb: 512.0,
            ready: true,
            ..Default::default()
        }
    }

    /// A tar.gz holding `hello.py`.
    fn archive() -> Vec<u8> {
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

    fn base64_archive() -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(archive())
    }

    fn multipart(fields: &[(&str, &str)], code: Option<&[u8]>) -> (String, Vec<u8>) {
        let boundary = "----tpboundary7MA4YWxkTrZu0gW";
        let mut body = Vec::new();
        for (k, v) in fields {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                )
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

    #[tokio::test]
    async fn a_page_without_a_session_redirects_to_sign_in_and_comes_back() {
        let s = stack().await;
        let res = s.get("/console/jobs?status=QUEUED", None).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER);
        assert_eq!(
            res.location(),
            "/console/sign-in?next=/console/jobs%3Fstatus%3DQUEUED"
        );
    }

    #[tokio::test]
    async fn sign_in_sets_a_strict_secure_httponly_session_that_does_not_hold_the_key() {
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        assert!(!session.contains(&s.key_a));
        let (nonce, csrf) = s.sign_in_form("/console/sign-in").await;
        let res = s
            .post_form(
                "/console/sign-in",
                Some(&nonce),
                &[
                    ("api_key", &s.key_a),
                    ("csrf", &csrf),
                    ("next", "https://evil.example/"),
                ],
            )
            .await;
        assert_eq!(res.location(), "/console/jobs", "no open redirect");
        let set = res
            .cookies()
            .into_iter()
            .find(|c| c.starts_with("tp_session="))
            .unwrap_or_default();
        for attr in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Max-Age=28800",
            "Path=/",
        ] {
            assert!(set.contains(attr), "{attr} missing in {set}");
        }
        let jobs = s.get("/console/jobs", Some(&session)).await;
        assert_eq!(jobs.status, StatusCode::OK);
        assert!(jobs.body.contains("Tenant <strong>acme</strong>"));
    }

    #[tokio::test]
    async fn a_wrong_key_or_a_missing_sign_in_token_gets_no_session() {
        let s = stack().await;
        let (nonce, csrf) = s.sign_in_form("/console/sign-in").await;
        let wrong = s
            .post_form(
                "/console/sign-in",
                Some(&nonce),
                &[("api_key", "tp_0000"), ("csrf", &csrf)],
            )
            .await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
        assert!(wrong.cookie("tp_session").is_none());
        assert!(!wrong.body.contains("tp_0000"), "the key is never echoed");
        let no_nonce = s
            .post_form(
                "/console/sign-in",
                None,
                &[("api_key", &s.key_a), ("csrf", &csrf)],
            )
            .await;
        assert_eq!(no_nonce.status, StatusCode::UNAUTHORIZED);
        assert!(no_nonce.cookie("tp_session").is_none());
        let forged = s
            .get("/console/jobs", Some("tp_session=v1.00.11.99999999999.ab"))
            .await;
        assert_eq!(forged.status, StatusCode::SEE_OTHER);
    }

    #[tokio::test]
    async fn forms_without_the_csrf_token_or_from_another_origin_are_refused() {
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        let id = s.submit_api(&s.key_a, "victim").await;
        let res = s
            .post_form(
                &format!("/console/jobs/{id}/stop"),
                Some(&session),
                &[("csrf", "00")],
            )
            .await;
        assert_eq!(res.status, StatusCode::FORBIDDEN);
        let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
        let csrf = csrf_of(&page.body);
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("/console/jobs/{id}/stop"))
            .header(header::HOST, "127.0.0.1:8080")
            .header(header::ORIGIN, "http://evil.example")
            .header(header::COOKIE, &session)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("csrf={csrf}")))
            .unwrap();
        let res = s.call(req).await;
        assert_eq!(res.status(), StatusCode::FORBIDDEN);
        let job = s.job(&id).await;
        assert!(!job.stop_requested);
        let ok = s
            .post_form(
                &format!("/console/jobs/{id}/stop"),
                Some(&session),
                &[("csrf", &csrf)],
            )
            .await;
        assert_eq!(
            (ok.status, ok.location()),
            (
                StatusCode::SEE_OTHER,
                format!("/console/jobs/{id}?notice=stop-requested").as_str()
            )
        );
        let job = s.job(&id).await;
        assert!(job.stop_requested);
    }

    #[tokio::test]
    async fn a_tenant_sees_only_its_own_jobs() {
        let s = stack().await;
        let id_a = s.submit_api(&s.key_a, "mine").await;
        let session_b = s.sign_in(&s.key_b).await;
        let list = s.get("/console/jobs", Some(&session_b)).await;
        assert!(!list.body.contains(&id_a));
        let detail = s
            .get(&format!("/console/jobs/{id_a}"), Some(&session_b))
            .await;
        assert_eq!(detail.status, StatusCode::NOT_FOUND);
        let session_a = s.sign_in(&s.key_a).await;
        let list = s.get("/console/jobs?status=queued", Some(&session_a)).await;
        assert!(list.body.contains(&id_a));
        let none = s
            .get("/console/jobs?status=RUNNING", Some(&session_a))
            .await;
        assert!(!none.body.contains(&id_a));
    }

    #[tokio::test]
    async fn submit_form_shows_every_spec_problem_inline_and_stores_nothing() {
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        let page = s.get("/console/submit", Some(&session)).await;
        let csrf = csrf_of(&page.body);
        let spec = "name: Bad_Name\nplugin: custom/custom\nimage: x\nentrypoint: run\npools:\n  - {name: main, series: h200, nodes: 1, gpus_per_node: 99}\nbogus: 1\n";
        let res = s.submit_form(&session, &csrf, "console-k1", spec).await;
        assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
        let expected =
            tuneplane_core::spec::validate(spec, None, &s.state.submit.config().defaults)
                .expect_err("invalid");
        assert!(expected.0.len() >= 3);
        for e in &expected.0 {
            assert!(
                res.body.contains(&format!("<code>{}</code>", e.path)),
                "{} missing",
                e.path
            );
        }
        assert!(s.stored_jobs("acme").await.is_empty());
        let inline = s
            .post_form(
                "/console/submit/validate",
                Some(&session),
                &[("csrf", &csrf), ("spec", spec)],
            )
            .await;
        assert_eq!(inline.status, StatusCode::OK);
        assert!(inline.body.contains("problems in the spec"));
    }

    #[tokio::test]
    async fn submit_form_creates_one_job_even_when_sent_twice() {
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        let page = s.get("/console/submit", Some(&session)).await;
        let csrf = csrf_of(&page.body);
        let key_marker = "name=\"idempotency_key\" value=\"";
        let key = page
            .body
            .split(key_marker)
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_owned();
        assert!(key.starts_with("console-"));
        let spec = "name: hello\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";
        let mut locations = Vec::new();
        for _ in 0..2 {
            let res = s.submit_form(&session, &csrf, &key, spec).await;
            assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
            locations.push(
                res.location()
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        assert_eq!(locations[0], locations[1]);
        assert_eq!(s.stored_jobs("acme").await.len(), 1);
    }

    #[tokio::test]
    async fn capacity_page_shows_the_published_snapshot() {
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        let empty = s.get("/console/capacity", Some(&session)).await;
        assert!(empty.body.contains("No capacity snapshot yet"));
        let cordoned = NodeCapacity {
            cordoned: true,
            ..h200_node("h-2", 0)
        };
        let snap = CapacitySnapshot::from_nodes(
            1_000,
            vec![h200_node("h-0", 3), h200_node("h-1", 6), cordoned],
        );
        s.publish_capacity(&snap).await;
        let page = s.get("/console/capacity", Some(&session)).await;
        let c = &snap.series["h200"];
        let attrs = format!(
            "data-series=\"h200\" data-total=\"{}\" data-used=\"{}\" data-free=\"{}\" data-blocked=\"{}\" data-largest=\"{}\" data-nodes=\"3\"",
            c.total_gpus, c.used_gpus, c.free_gpus, c.blocked_gpus, c.largest_free_block
        );
        assert!(page.body.contains(&attrs), "{attrs} not in page");
        assert!(page.body.contains("Cordoned"));
    }

    #[tokio::test]
    async fn pending_job_detail_explains_the_reason_next_to_the_kubernetes_warning() {
        let s = stack().await;
        let id = s.submit_api(&s.key_a, "waiting").await;
        let jobs = s.state.submit.jobs();
        let mut job = s.job(&id).await;
        job.pending = Some(Pending {
            reason: PendingReason::InsufficientGpu,
            message: "pool main: needs 2 nodes with 8 free h200 GPUs, 1 available".into(),
            since_ms: 5,
        });
        jobs.update_job(&job).await.unwrap();
        let warn = |at: i64, key: &str| JobEvent {
            at_ms: at,
            key: key.into(),
            source: EventSource::Kubernetes,
            kind: "Warning".into(),
            reason: "FailedScheduling".into(),
            message: "0/3 nodes are available".into(),
            object: Some("pod/p".into()),
        };
        jobs.append_events(&id, &[warn(10, "e1"), warn(20, "e2")])
            .await
            .unwrap();
        let session = s.sign_in(&s.key_a).await;
        let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
        assert!(page.body.contains("Why is it pending?"));
        assert!(page.body.contains("Waiting for GPUs"));
        assert!(page.body.contains("needs 2 nodes with 8 free h200 GPUs"));
        assert!(
            page.body
                .contains("<strong>FailedScheduling</strong>: 0/3 nodes are available")
        );
        assert!(
            page.body
                .contains("<td class=\"count\" data-label=\"Count\">2</td>"),
            "repeats counted"
        );
        assert_eq!(job.state, JobState::Queued);
    }

    /// The text of the `error` query of a redirect, percent-decoded.
    fn error_of(location: &str) -> String {
        let raw = location.split_once("error=").map_or("", |(_, r)| r);
        let mut out = Vec::new();
        let mut rest = raw.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            let hex = tail
                .get(..2)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match (b, hex) {
                (b'%', Some(v)) => {
                    out.push(v);
                    rest = &tail[2..];
                }
                _ => {
                    out.push(b);
                    rest = tail;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn playgrounds_are_created_and_deleted_through_the_console() {
        use tuneplane_core::store::{PlaygroundState, PlaygroundStatus};
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        let page = s.get("/console/playgrounds", Some(&session)).await;
        let csrf = csrf_of(&page.body);
        let create = |series: &'static str, gpus: &'static str, ttl: &'static str| {
            s.request_playground(&session, &csrf, ["tiny-model", series, gpus, ttl])
        };
        let bad = create("h200", "99", "10").await;
        assert!(
            error_of(bad.location()).contains("gpus: 99 GPUs: at most 16"),
            "{}",
            bad.location()
        );
        // The lifetime is asked in minutes, and the error says minutes.
        let bad = create("h200", "1", "2000").await;
        assert_eq!(
            error_of(bad.location()),
            "lifetime: give between 1 and 1440 minutes"
        );
        let res = create("h200", "1", "10").await;
        assert_eq!(res.location(), "/console/playgrounds");
        let all = s.state.submit.jobs().list_playgrounds().await.unwrap();
        assert_eq!(all.len(), 1);
        let listed = s.get("/console/playgrounds", Some(&session)).await;
        assert!(listed.body.contains("tiny-model") && listed.body.contains("data-countdown-to"));
        assert!(listed.body.contains("data-state=\"Queued\""), "state shown");
        // The reconciler's reason is shown with the scheduler's message and plain words.
        let mut pg = all[0].clone();
        pg.pod_name = Some(pg.id.clone());
        pg.status = Some(PlaygroundStatus {
            state: PlaygroundState::Pending,
            reason: Some("InsufficientGpu".into()),
            message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu".into(),
            since_ms: 1,
            updated_ms: 1,
        });
        s.state.submit.jobs().put_playground(&pg).await.unwrap();
        let listed = s.get("/console/playgrounds", Some(&session)).await;
        assert!(listed.body.contains("data-state=\"Pending\""));
        assert!(
            listed
                .body
                .contains("<span class=\"reason\">InsufficientGpu</span>")
        );
        assert!(
            listed
                .body
                .contains("0/3 nodes are available: 3 Insufficient nvidia.com/gpu")
        );
        assert!(listed.body.contains("Waiting for GPUs"));
        let url = format!("/v1/playgrounds/{}/proxy/", pg.id);
        assert!(listed.body.contains(&url), "{url} not shown");
        let del = s
            .post_form(
                &format!("/console/playgrounds/{}/delete", all[0].id),
                Some(&session),
                &[("csrf", &csrf)],
            )
            .await;
        assert_eq!(del.status, StatusCode::SEE_OTHER);
        let after = s.state.submit.jobs().get_playground(&all[0].id).await;
        let after = after.ok().flatten().expect("pg");
        assert!(after.expires_at_ms <= (s.state.clock)());
        // Deleted: gone from the page at once (the reconciler removes the pod in the background).
        let gone = s.get("/console/playgrounds", Some(&session)).await;
        assert!(
            !gone.body.contains("tiny-model"),
            "deleted playground still listed"
        );
        assert!(gone.body.contains("No playgrounds."));
    }

    #[tokio::test]
    async fn a_playground_the_fleet_cannot_host_is_refused_in_the_console_with_the_known_series() {
        let s = stack().await;
        let node = |name: &str| NodeCapacity {
            name: name.into(),
            series: Some("l40s".into()),
            gpus: 4,
            cpus: 48.0,
            memory_gb: 256.0,
            ready: true,
            ..Default::default()
        };
        let snap = CapacitySnapshot::from_nodes(1_000, vec![node("l-0")]);
        s.publish_capacity(&snap).await;
        let session = s.sign_in(&s.key_a).await;
        let page = s.get("/console/playgrounds", Some(&session)).await;
        assert!(
            page.body.contains("<option value=\"l40s\">"),
            "series offered"
        );
        let csrf = csrf_of(&page.body);
        for (series, gpus, expected) in [
            ("h100", "1", "series: unknown series \"h100\"; known: l40s"),
            (
                "l40s",
                "8",
                "gpus: 8 GPUs, but the largest l40s node has 4; ask for at most 4",
            ),
        ] {
            let res = s
                .request_playground(&session, &csrf, ["m", series, gpus, "10"])
                .await;
            assert_eq!(error_of(res.location()), expected);
            let shown = s.get(res.location(), Some(&session)).await;
            assert!(shown.body.contains("role=\"alert\""), "error shown");
        }
        let none = s.state.submit.jobs().list_playgrounds().await.unwrap();
        assert!(none.is_empty(), "nothing stored for refused requests");
    }

    #[tokio::test]
    async fn pages_forbid_framing_and_caching_and_assets_are_served() {
        let s = stack().await;
        let session = s.sign_in(&s.key_a).await;
        let page = s.get("/console/jobs", Some(&session)).await;
        let csp = page
            .headers
            .get(header::CONTENT_SECURITY_POLICY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        assert_eq!(
            page.headers
                .get(header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok()),
            Some("no-store")
        );
        for asset in ["console.css", "console.js"] {
            assert_eq!(
                s.get(&format!("/console/assets/{asset}"), None)
                    .await
                    .status,
                StatusCode::OK
            );
        }
        let out = s.sign_out(&session, &csrf_of(&page.body)).await;
        assert!(
            out.cookies()
                .iter()
                .any(|c| c.starts_with("tp_session=;") && c.contains("Max-Age=0"))
        );
        assert_eq!(s.get("/", None).await.location(), "/console/jobs");
    }

    #[tokio::test]
    async fn the_jobs_list_pages_newest_first() {
        let s = stack().await;
        let first = s.submit_api(&s.key_a, "first").await;
        let jobs = s.state.submit.jobs();
        let template = s.job(&first).await;
        for i in 0..30 {
            let mut job = template.clone();
            job.id = format!("j-page{i:02}");
            job.version = 0;
            job.submitted_at_ms = template.submitted_at_ms + 1 + i;
            jobs.create_job(&job, None).await.unwrap();
        }
        let session = s.sign_in(&s.key_a).await;
        let page1 = s.get("/console/jobs", Some(&session)).await;
        assert!(page1.body.contains("j-page29"), "newest first");
        assert!(!page1.body.contains(&first));
        let marker = "rel=\"next\" href=\"";
        let next = page1
            .body
            .split(marker)
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("no next page link")
            .replace("&amp;", "&");
        let page2 = s.get(&next, Some(&session)).await;
        assert!(page2.body.contains(&first) && page2.body.contains("j-page00"));
        assert!(!page2.body.contains("j-page29"));
        assert!(page2.body.contains("First page"));
    }

    #[tokio::test]
    async fn archived_logs_are_previewed_and_downloadable_through_a_short_lived_link() {
        let s = stack().await;
        let id = s.submit_api(&s.key_a, "logged").await;
        let lines: String = (0..60).map(|i| format!("step {i}\n")).collect();
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        let mut h = tar::Header::new_gnu();
        h.set_size(lines.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "tp-x-head/ray-head.log", lines.as_bytes())
            .unwrap();
        let bytes = b.into_inner().and_then(|g| g.finish()).unwrap();
        let key = format!("logs/{id}/logs.tar.gz");
        s.state.submit.blobs().put(&key, bytes).await.unwrap();
        let jobs = s.state.submit.jobs();
        let mut job = s.job(&id).await;
        job.logs_key = Some(key.clone());
        jobs.update_job(&job).await.unwrap();
        let session = s.sign_in(&s.key_a).await;
        let page = s.get(&format!("/console/jobs/{id}"), Some(&session)).await;
        assert!(page.body.contains("step 59") && !page.body.contains("step 19\n"));
        assert!(page.body.contains("tp-x-head/ray-head.log"));
        let link = s
            .get(&format!("/console/jobs/{id}/logs"), Some(&session))
            .await;
        assert_eq!(link.status, StatusCode::SEE_OTHER);
        assert!(link.location().contains(&key), "{}", link.location());
        let other = s.sign_in(&s.key_b).await;
        let denied = s
            .get(&format!("/console/jobs/{id}/logs"), Some(&other))
            .await;
        assert_eq!(denied.status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn capacity_page_shows_the_signed_in_tenants_usage_against_its_quota_and_no_one_elses() {
        use tuneplane_core::quota::{Demand, TenantQuota, TenantUsage};
        let s = stack().await;
        let jobs = s.state.submit.jobs();
        let mut quota = TenantQuota::unlimited("acme");
        quota.set_gpu_limit("h200", 16, false);
        jobs.put_quota(&quota).await.unwrap();
        // Before a snapshot the limits show already.
        let session_a = s.sign_in(&s.key_a).await;
        let empty = s.get("/console/capacity", Some(&session_a)).await;
        assert!(empty.body.contains("No capacity snapshot yet"));
        assert!(
            empty.body.contains("0 of 16 GPUs admitted, 0 queued"),
            "{}",
            empty.body
        );

        let mut snap =
            CapacitySnapshot::from_nodes(1_000, vec![h200_node("h-0", 8), h200_node("h-1", 4)]);
        let usage = |series: &str, admitted: u32, queued: u32| TenantUsage {
            admitted: Demand {
                gpus: [(series.to_owned(), admitted)].into(),
                ..Demand::default()
            },
            admitted_jobs: 2,
            queued: Demand {
                gpus: [(series.to_owned(), queued)].into(),
                ..Demand::default()
            },
            queued_jobs: 1,
        };
        snap.tenants.insert("acme".into(), usage("h200", 12, 8));
        snap.tenants.insert("globex".into(), usage("a100", 40, 24));
        s.publish_capacity(&snap).await;

        let page_a = s.get("/console/capacity", Some(&session_a)).await;
        assert_eq!(page_a.status, StatusCode::OK);
        assert!(page_a.body.contains("Your team"), "{}", page_a.body);
        assert!(
            page_a.body.contains(
                "data-quota-series=\"h200\" data-limit=\"16\" data-admitted=\"12\" data-queued=\"8\""
            ),
            "{}",
            page_a.body
        );
        assert!(page_a.body.contains("12 of 16 GPUs admitted, 8 queued"));
        assert!(page_a.body.contains("4 of 16 GPUs free"), "{}", page_a.body);
        // The fleet-wide totals are still there, beside it.
        assert!(
            page_a
                .body
                .contains("data-series=\"h200\" data-total=\"16\"")
        );
        assert!(!page_a.body.contains("a100") && !page_a.body.contains("globex"));

        // globex sees its own a100 usage (unlimited) and nothing of acme's quota or usage.
        let session_b = s.sign_in(&s.key_b).await;
        let page_b = s.get("/console/capacity", Some(&session_b)).await;
        assert!(
            page_b.body.contains("data-quota-series=\"a100\" data-limit=\"unlimited\" data-admitted=\"40\" data-queued=\"24\""),
            "{}",
            page_b.body
        );
        assert!(
            page_b
                .body
                .contains("40 GPUs admitted (unlimited), 24 queued")
        );
        assert!(
            page_b.body.contains(
                "data-quota-series=\"h200\" data-limit=\"unlimited\" data-admitted=\"0\" data-queued=\"0\""
            ),
            "{}",
            page_b.body
        );
        assert!(
            !page_b.body.contains("acme"),
            "acme leaked into globex's page"
        );
        assert!(!page_b.body.contains("12 of 16"));
    }

    #[tokio::test]
    async fn a_job_above_the_quota_is_refused_in_the_submit_form_with_the_reason() {
        use tuneplane_core::quota::{CpuLimit, TenantQuota};
        let s = stack().await;
        let mut quota = TenantQuota::unlimited("acme");
        quota.cpu = Some(CpuLimit {
            cpus: Some(0.5),
            memory_gb: None,
            borrow: false,
        });
        s.state.submit.jobs().put_quota(&quota).await.unwrap();
        let session = s.sign_in(&s.key_a).await;
        let form = s.get("/console/submit", Some(&session)).await;
        let csrf = csrf_of(&form.body);
        let spec = "name: big\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 hello.py\npools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n";
        let res = s.submit_form(&session, &csrf, "console-q", spec).await;
        assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
        assert!(
            res.body
                .contains("quota is 0.5 CPUs for CPU-only jobs; this job needs 1"),
            "{}",
            res.body
        );
        assert!(s.stored_jobs("acme").await.is_empty(), "nothing is stored");
    }
}
