//! The blob-store contract against the filesystem store and its presigned-URL server, plus the
//! signature and expiry checks that the local S3 endpoint cannot show.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract;

use std::sync::Arc;
use std::time::Duration;

use contract::blob_store_contract;
use contract::blobs::send;
use contract::fixtures::ok;
use tuneplane_core::store::{BlobStore, PresignMethod};
use tuneplane_stores::FsBlobStore;
use tuneplane_stores::blob_server::{DEFAULT_MAX_UPLOAD_BYTES, router};

/// Keeps the directory and the server alive for one test.
struct Served {
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(max_upload: u64) -> (FsBlobStore, Served) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let listener = ok(tokio::net::TcpListener::bind("127.0.0.1:0").await, "bind");
    let addr = ok(listener.local_addr(), "local addr");
    let store = ok(
        FsBlobStore::open(
            dir.path().join("blobs"),
            b"test-secret".to_vec(),
            format!("http://{addr}/blobs"),
        ),
        "open",
    );
    let app = axum::Router::new().nest("/blobs", router(store.clone(), max_upload));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (store, Served { _dir: dir, server })
}

async fn make() -> (Arc<dyn BlobStore>, Served) {
    let (store, served) = serve(DEFAULT_MAX_UPLOAD_BYTES).await;
    (Arc::new(store), served)
}

blob_store_contract!(make);

fn replace_param(url: &str, name: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let params: Vec<String> = query
        .split('&')
        .map(|kv| {
            if kv.starts_with(&format!("{name}=")) {
                format!("{name}={value}")
            } else {
                kv.to_owned()
            }
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

#[tokio::test]
async fn expired_presigned_url_is_refused() {
    let (store, _served) = serve(DEFAULT_MAX_UPLOAD_BYTES).await;
    ok(store.put("a/b.zip", b"data".to_vec()).await, "put");
    let get = ok(
        store
            .presign(PresignMethod::Get, "a/b.zip", Duration::from_secs(1))
            .await,
        "presign",
    );
    assert_eq!(send(&get, None).await.0, 200, "fresh URL works");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let (status, body) = send(&get, None).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).as_ref()),
        (403, "URL has expired")
    );
}

#[tokio::test]
async fn tampered_presigned_urls_are_refused() {
    let (store, _served) = serve(DEFAULT_MAX_UPLOAD_BYTES).await;
    ok(store.put("a/b.zip", b"data".to_vec()).await, "put");
    ok(store.put("a/c.zip", b"secret".to_vec()).await, "put");
    let get = ok(
        store
            .presign(PresignMethod::Get, "a/b.zip", Duration::from_secs(60))
            .await,
        "presign",
    );
    let far_future = (get.expires_at + 86_400).to_string();
    let tampered = [
        get.url.replace("a/b.zip", "a/c.zip"),
        replace_param(&get.url, "tp-expires", &far_future),
        replace_param(&get.url, "tp-signature", &"0".repeat(64)),
        replace_param(&get.url, "tp-method", "PUT"),
    ];
    for url in tampered {
        let (status, body) = send(
            &tuneplane_core::store::PresignedRequest {
                url: url.clone(),
                ..get.clone()
            },
            None,
        )
        .await;
        assert_eq!(
            (status, String::from_utf8_lossy(&body).as_ref()),
            (403, "signature does not match"),
            "{url}"
        );
    }
    let unsigned = get.url.split('?').next().unwrap_or_default().to_owned();
    let (status, _) = send(
        &tuneplane_core::store::PresignedRequest {
            url: unsigned,
            ..get.clone()
        },
        None,
    )
    .await;
    assert_eq!(status, 403);
    // A download URL used for an upload is refused and changes nothing.
    let as_put = tuneplane_core::store::PresignedRequest {
        method: PresignMethod::Put,
        ..get.clone()
    };
    let (status, body) = send(&as_put, Some(b"overwrite".to_vec())).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).as_ref()),
        (403, "URL was signed for another method")
    );
    assert_eq!(
        ok(store.get("a/b.zip").await, "get"),
        Some(b"data".to_vec())
    );
}

#[tokio::test]
async fn upload_over_the_limit_is_refused_and_leaves_nothing() {
    let (store, _served) = serve(1024).await;
    let put = ok(
        store
            .presign(PresignMethod::Put, "uploads/big", Duration::from_secs(60))
            .await,
        "presign",
    );
    let (status, _) = send(&put, Some(vec![7; 4096])).await;
    assert_eq!(status, 413);
    assert_eq!(ok(store.head("uploads/big").await, "head"), None);
    let staged = ok(std::fs::read_dir(store.root().join("tmp")), "tmp dir").count();
    assert_eq!(staged, 0, "no staging files are left behind");
}

/// Sends `PUT url` over a plain TCP connection with `body` in HTTP/1.1 chunks (no
/// `Content-Length`, as a streaming client sends it); returns the status.
async fn put_chunked(url: &str, body: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut conn = tokio::net::TcpStream::connect(host).await.unwrap();
    let mut request = format!(
        "PUT /{path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for chunk in body.chunks(4) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    conn.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_sized_upload_url_stores_only_a_body_of_its_length_and_its_length_cannot_be_changed() {
    let (store, _served) = serve(DEFAULT_MAX_UPLOAD_BYTES).await;
    let key = "checkpoints/acme/j-1/step-1/w.bin";
    let put = ok(
        store.presign_upload(key, Duration::from_secs(60), 11).await,
        "presign",
    );
    assert!(put.url.contains("tp-length=11"), "{}", put.url);
    // The body as the client sends it, without the presigned headers (its own length).
    let bare = |url: String| tuneplane_core::store::PresignedRequest {
        url,
        headers: Vec::new(),
        ..put.clone()
    };
    for (body, status, reason) in [
        (
            &b"twelve bytes"[..],
            400,
            "Content-Length 12 differs from the 11 bytes",
        ),
        (
            b"ten bytes!",
            400,
            "Content-Length 10 differs from the 11 bytes",
        ),
    ] {
        let (got, text) = send(&bare(put.url.clone()), Some(body.to_vec())).await;
        let text = String::from_utf8_lossy(&text).into_owned();
        assert_eq!(got, status, "{text}");
        assert!(text.starts_with(reason), "{text}");
    }
    // Streamed without a length: cut off past the signed length, or refused when short.
    assert_eq!(put_chunked(&put.url, b"twelve bytes").await, 413);
    assert_eq!(put_chunked(&put.url, b"ten bytes!").await, 400);
    // The length is signed: changed or dropped, the URL is no longer valid.
    for url in [
        replace_param(&put.url, "tp-length", "12"),
        put.url.replace("&tp-length=11", ""),
    ] {
        let (got, text) = send(&bare(url.clone()), Some(b"twelve bytes".to_vec())).await;
        assert_eq!(
            (got, String::from_utf8_lossy(&text).as_ref()),
            (403, "signature does not match"),
            "{url}"
        );
    }
    assert_eq!(
        ok(store.head(key).await, "head"),
        None,
        "nothing was stored"
    );
    let staged = ok(std::fs::read_dir(store.root().join("tmp")), "tmp dir").count();
    assert_eq!(staged, 0, "no staging files are left behind");
    // A URL signed without a length cannot gain one either.
    let plain = ok(
        store
            .presign(PresignMethod::Put, key, Duration::from_secs(60))
            .await,
        "presign",
    );
    let (got, _) = send(
        &bare(format!("{}&tp-length=5", plain.url)),
        Some(b"12345".to_vec()),
    )
    .await;
    assert_eq!(got, 403);
    // The exact length is stored, streamed or not.
    assert_eq!(put_chunked(&put.url, b"eleven byte").await, 200);
    assert_eq!(
        ok(store.get(key).await, "get"),
        Some(b"eleven byte".to_vec())
    );
}

/// A CA and a certificate it signed for IP 127.0.0.1 (`openssl`, as `scripts/k8s-up.sh` makes
/// them): `(ca.pem, cert.pem, key.pem)` in `dir`.
fn local_ca(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    let [ca, ca_key, cert, key, csr, ext] = [
        "ca.pem", "ca.key", "cert.pem", "key.pem", "c.csr", "ext.cnf",
    ]
    .map(|n| dir.join(n));
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n").unwrap();
    let run = |args: Vec<&std::ffi::OsStr>| {
        let out = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl is needed (scripts/test.sh installs it)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    run(vec![
        os("req"),
        os("-x509"),
        os("-newkey"),
        os("rsa:2048"),
        os("-nodes"),
        os("-days"),
        os("2"),
        os("-subj"),
        os("/CN=blob-test-ca"),
        os("-keyout"),
        ca_key.as_os_str(),
        os("-out"),
        ca.as_os_str(),
    ]);
    run(vec![
        os("req"),
        os("-newkey"),
        os("rsa:2048"),
        os("-nodes"),
        os("-subj"),
        os("/CN=127.0.0.1"),
        os("-keyout"),
        key.as_os_str(),
        os("-out"),
        csr.as_os_str(),
    ]);
    run(vec![
        os("x509"),
        os("-req"),
        os("-in"),
        csr.as_os_str(),
        os("-CA"),
        ca.as_os_str(),
        os("-CAkey"),
        ca_key.as_os_str(),
        os("-CAcreateserial"),
        os("-days"),
        os("2"),
        os("-extfile"),
        ext.as_os_str(),
        os("-out"),
        cert.as_os_str(),
    ]);
    [ca, cert, key]
}

#[tokio::test]
async fn presigned_urls_are_served_over_https_to_clients_that_trust_the_ca_only() {
    use tuneplane_stores::blob_tls::{TlsListener, server_config};
    let dir = tempfile::tempdir().unwrap();
    let [ca, cert, key] = local_ca(dir.path());
    // Clear errors for unusable files.
    let wrong = server_config(&ca, &dir.path().join("missing.pem")).unwrap_err();
    assert!(wrong.contains("missing.pem"), "{wrong}");
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let store = FsBlobStore::open(
        dir.path().join("blobs"),
        b"test-secret".to_vec(),
        format!("https://{addr}/blobs"),
    )
    .unwrap();
    store
        .put("capsules/x.zip", b"zip bytes".to_vec())
        .await
        .unwrap();
    let app = axum::Router::new().nest("/blobs", router(store.clone(), DEFAULT_MAX_UPLOAD_BYTES));
    let listener = TlsListener::new(tcp, server_config(&cert, &key).unwrap()).unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let url = store
        .presign(
            PresignMethod::Get,
            "capsules/x.zip",
            Duration::from_secs(60),
        )
        .await
        .unwrap()
        .url;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    // A client without the CA refuses the certificate; it does not hold up the next client.
    let stranger = reqwest::Client::builder().build().unwrap();
    let refused = stranger.get(&url).send().await.unwrap_err();
    assert!(refused.is_connect() || refused.is_request(), "{refused:?}");
    let pem = std::fs::read(&ca).unwrap();
    let trusting = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .build()
        .unwrap();
    let got = trusting.get(&url).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"zip bytes");
    // The signature still rules over TLS.
    let forged = replace_param(&url, "tp-signature", &"0".repeat(64));
    assert_eq!(trusting.get(&forged).send().await.unwrap().status(), 403);
    server.abort();
}
