//! The agent's kubelet endpoint: an HTTP/1.1 server on 127.0.0.1 (HTTPS with the given certificate
//! and key; no client certificate is required) answering the API server's
//! `GET /containerLogs/{namespace}/{pod}/{container}` from the agent's logs, honouring `tailLines`,
//! `limitBytes` and `follow` (other parameters are accepted and ignored); like a kubelet it
//! answers 400 for a container that has not run yet and 404 for unknown pods and containers, in
//! plain text. A followed log streams what the container prints until it terminated or its pod
//! was deleted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{AgentError, AgentLogs, LogLookupError, TlsFiles};

/// A bound kubelet endpoint, not serving yet.
pub(crate) struct Endpoint {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    addr: SocketAddr,
}

impl Endpoint {
    /// Loads the TLS files (if any) and binds 127.0.0.1:`port`.
    pub(crate) async fn bind(port: u16, tls: Option<&TlsFiles>) -> Result<Self, AgentError> {
        let tls = tls.map(acceptor).transpose()?;
        let want = SocketAddr::from(([127, 0, 0, 1], port));
        let bind_err = |source| AgentError::Bind {
            addr: want.to_string(),
            source,
        };
        let listener = TcpListener::bind(want).await.map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        Ok(Self {
            listener,
            tls,
            addr,
        })
    }

    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves connections until `stop` turns true; open connections end with it.
    pub(crate) async fn serve(self, logs: Arc<AgentLogs>, mut stop: watch::Receiver<bool>) {
        let mut connections = JoinSet::new();
        tracing::info!(addr = %self.addr, tls = self.tls.is_some(), "kubelet endpoint listening");
        loop {
            let accepted = tokio::select! {
                _ = stop.changed() => break,
                a = self.listener.accept() => a,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "kubelet endpoint accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (tls, logs) = (self.tls.clone(), logs.clone());
            connections.spawn(async move {
                match tls {
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(s) => serve_connection(s, logs).await,
                        Err(e) => {
                            tracing::debug!(error = %e, %peer, "kubelet TLS handshake failed")
                        }
                    },
                    None => serve_connection(stream, logs).await,
                }
            });
        }
    }
}

/// A TLS acceptor with the certificate chain and key (aws-lc-rs, HTTP/1.1 only).
fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, AgentError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| {
            AgentError::Tls(format!(
                "reading certificates from {}: {e}",
                files.cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(AgentError::Tls(format!(
            "no certificate in {}",
            files.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        AgentError::Tls(format!(
            "reading the private key {}: {e}",
            files.key.display()
        ))
    })?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AgentError::Tls(format!("protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            AgentError::Tls(format!(
                "certificate {} with key {}: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

async fn serve_connection<S>(stream: S, logs: Arc<AgentLogs>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let logs = logs.clone();
        async move { Ok::<_, Infallible>(handle(&req, &logs)) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "kubelet endpoint connection ended with an error");
    }
}

/// The endpoint's answers: whole texts, or a followed log's stream.
type Body = BoxBody<Bytes, Infallible>;

fn text(code: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Parses a URL query into its parameters (no percent-decoding: the kubelet's parameters are
/// numbers and booleans).
fn query_params(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv.to_string(), String::new()),
        })
        .collect()
}

/// How long a follower waits for a change before it looks again (a pod whose logs expired ends
/// its stream).
const FOLLOW_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// A followed log from byte `offset` on: what is appended, until the container's log ended.
fn follow(logs: Arc<AgentLogs>, key: [String; 3], offset: u64) -> Body {
    let changes = logs.subscribe();
    let stream = futures_util::stream::unfold(
        (logs, changes, offset, key),
        |(logs, mut changes, offset, key)| async move {
            loop {
                let [ns, pod, container] = &key;
                let since = logs.since(ns, pod, container, offset).ok()?;
                if !since.text.is_empty() {
                    let chunk = Frame::data(Bytes::from(since.text));
                    return Some((Ok(chunk), (logs, changes, since.next, key)));
                }
                if since.ended {
                    return None;
                }
                changes.mark_unchanged();
                let _ = tokio::time::timeout(FOLLOW_RECHECK, changes.changed()).await;
            }
        },
    );
    StreamBody::new(stream).boxed()
}

/// Answers one request of the kubelet endpoint.
fn handle<B>(req: &Request<B>, logs: &Arc<AgentLogs>) -> Response<Body> {
    let path = req.uri().path();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok".into());
    }
    let Some(rest) = path.strip_prefix("/containerLogs/") else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {} not allowed\n", req.method()),
        );
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, pod, container] = parts[..] else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    if container.is_empty() {
        return text(StatusCode::BAD_REQUEST, "missing container name\n".into());
    }
    match logs.since(ns, pod, container, 0) {
        Ok(log) => {
            let query = query_params(req.uri().query());
            let part = crate::logs::requested_part(&log.text, &query).to_string();
            if query.get("follow").is_some_and(|f| f == "true") {
                let key = [ns.to_string(), pod.to_string(), container.to_string()];
                let first = futures_util::stream::once(async move {
                    Ok::<_, Infallible>(Frame::data(Bytes::from(part)))
                });
                let rest = follow(logs.clone(), key, log.next).into_data_stream();
                let rest = futures_util::StreamExt::map(rest, |d| d.map(Frame::data));
                let body = StreamBody::new(futures_util::StreamExt::chain(first, rest)).boxed();
                let mut resp = text(StatusCode::OK, String::new());
                *resp.body_mut() = body;
                return resp;
            }
            text(StatusCode::OK, part)
        }
        Err(e @ LogLookupError::NotStarted(_)) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        Err(e) => text(StatusCode::NOT_FOUND, format!("{e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running_pod() -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "main", "image": "i"}]},
            "status": {"containerStatuses": [{"name": "main", "state": {"running": {}}}]},
        })
    }

    fn get(logs: &Arc<AgentLogs>, uri: &str) -> (StatusCode, String) {
        let req = Request::get(uri).body(()).expect("request");
        let resp = handle(&req, logs);
        let status = resp.status();
        let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(
            resp.into_body(),
        ))
        .and_then(Result::ok)
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
        (status, body)
    }

    /// The next piece of a followed log's body as text (`None` at its end), within 5 s.
    async fn next_chunk(
        body: &mut (impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Unpin),
    ) -> Option<String> {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            futures_util::StreamExt::next(body),
        )
        .await
        .expect("a chunk or the end within 5 s")
        .map(|c| String::from_utf8_lossy(&c.expect("chunk")).into_owned())
    }

    #[tokio::test]
    async fn a_followed_log_streams_what_comes_until_the_container_terminates() {
        let logs = Arc::new(AgentLogs::default());
        logs.observe("u", &running_pod());
        logs.append("u", "main", "one\ntwo\n");
        let req = Request::get("/containerLogs/ns/p/main?tailLines=1&follow=true")
            .body(())
            .expect("request");
        let resp = handle(&req, &logs);
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body().into_data_stream();
        let mut next = async || next_chunk(&mut body).await;
        assert_eq!(next().await.as_deref(), Some("two\n"));
        // What the container prints later reaches the follower (its grace-time lines too).
        logs.append("u", "main", "SIGTERM: saving\n");
        assert_eq!(next().await.as_deref(), Some("SIGTERM: saving\n"));
        let mut ended = running_pod();
        ended["status"]["containerStatuses"][0]["state"] =
            serde_json::json!({"terminated": {"exitCode": 143}});
        logs.append("u", "main", "saved\n");
        logs.observe("u", &ended);
        // Everything printed before the end, then the end.
        assert_eq!(next().await.as_deref(), Some("saved\n"));
        assert_eq!(next().await, None);
    }

    #[tokio::test]
    async fn a_followed_log_ends_when_the_pods_containers_stopped_though_finalizers_keep_it() {
        let logs = Arc::new(AgentLogs::default());
        logs.observe("u", &running_pod());
        logs.append("u", "main", "one\n");
        let req = Request::get("/containerLogs/ns/p/main?follow=true")
            .body(())
            .expect("request");
        let mut body = handle(&req, &logs).into_body().into_data_stream();
        let mut next = async || next_chunk(&mut body).await;
        assert_eq!(next().await.as_deref(), Some("one\n"));
        // The deletion is confirmed; the object stays (a finalizer), its status unchanged.
        logs.containers_stopped("u");
        assert_eq!(next().await, None);
        assert_eq!(logs.read("ns", "p", "main").as_deref(), Ok("one\n"));
    }

    #[test]
    fn container_logs_are_served_with_tail_and_limit() {
        let logs = Arc::new(AgentLogs::default());
        logs.observe("u", &running_pod());
        logs.append("u", "main", "one\ntwo\nthree\n");
        assert_eq!(
            get(&logs, "/containerLogs/ns/p/main"),
            (StatusCode::OK, "one\ntwo\nthree\n".into())
        );
        assert_eq!(
            get(
                &logs,
                "/containerLogs/ns/p/main?tailLines=2&timestamps=false"
            )
            .1,
            "two\nthree\n"
        );
        assert_eq!(
            get(&logs, "/containerLogs/ns/p/main?limitBytes=5").1,
            "one\nt"
        );
        assert_eq!(
            get(&logs, "/containerLogs/ns/q/main"),
            (StatusCode::NOT_FOUND, "pod \"q\" does not exist\n".into())
        );
        assert_eq!(
            get(&logs, "/containerLogs/ns/p/side"),
            (
                StatusCode::NOT_FOUND,
                "container \"side\" not found in pod \"p\"\n".into()
            )
        );
        assert_eq!(get(&logs, "/pods").0, StatusCode::NOT_FOUND);
        assert_eq!(get(&logs, "/healthz").0, StatusCode::OK);
    }

    #[tokio::test]
    async fn the_endpoint_serves_over_a_socket_and_stops() {
        let logs = Arc::new(AgentLogs::default());
        logs.observe("u", &running_pod());
        logs.append("u", "main", "hello\n");
        let endpoint = Endpoint::bind(0, None).await.expect("bind");
        let addr = endpoint.addr();
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(endpoint.serve(logs, stop_rx));
        let body = reqwest::get(format!("http://{addr}/containerLogs/ns/p/main"))
            .await
            .expect("get")
            .text()
            .await
            .expect("body");
        assert_eq!(body, "hello\n");
        let _ = stop.send(true);
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("endpoint did not stop")
            .expect("endpoint task");
    }

    #[tokio::test]
    async fn the_endpoint_speaks_https_with_a_pem_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("k.crt"), dir.path().join("k.key"));
        let made = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=kubelet",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output();
        if !made.is_ok_and(|o| o.status.success()) {
            println!("skipped: openssl could not make a test certificate");
            return;
        }
        let logs = Arc::new(AgentLogs::default());
        logs.observe("u", &running_pod());
        logs.append("u", "main", "over tls\n");
        let files = TlsFiles { cert, key };
        let endpoint = Endpoint::bind(0, Some(&files)).await.expect("bind");
        let addr = endpoint.addr();
        let (_stop, stop_rx) = watch::channel(false);
        tokio::spawn(endpoint.serve(logs, stop_rx));
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .expect("client");
        let resp = client
            .get(format!(
                "https://{addr}/containerLogs/ns/p/main?follow=false"
            ))
            .send()
            .await
            .expect("get");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap_or_default(), "over tls\n");
    }

    #[test]
    fn missing_tls_files_are_reported_with_their_path() {
        let files = TlsFiles {
            cert: "/nonexistent/kubelet.crt".into(),
            key: "/nonexistent/kubelet.key".into(),
        };
        let err = acceptor(&files)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("/nonexistent/kubelet.crt"), "{err}");
    }
}
