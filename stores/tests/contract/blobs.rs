//! Contract cases for `BlobStore`.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tuneplane_core::store::{BlobStore, PresignMethod, PresignedRequest, PutOutcome, StoreError};

use super::fixtures::ok;

type Store = Arc<dyn BlobStore>;

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Sends a presigned request with plain HTTP; returns status and body.
pub async fn send(req: &PresignedRequest, body: Option<Vec<u8>>) -> (u16, Vec<u8>) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut builder = match req.method {
        PresignMethod::Get => client.get(&req.url),
        PresignMethod::Put => client.put(&req.url),
    };
    for (name, value) in &req.headers {
        builder = builder.header(name, value);
    }
    if let Some(body) = body {
        builder = builder.body(body);
    }
    let response = ok(builder.send().await, "send presigned request");
    let status = response.status().as_u16();
    let bytes = ok(response.bytes().await, "read body").to_vec();
    (status, bytes)
}

pub async fn put_if_absent_never_rewrites_an_object(store: Store) {
    let key = "capsules/sha256/abc/capsule.zip";
    assert_eq!(
        ok(
            store.put_if_absent(key, b"first".to_vec()).await,
            "first put"
        ),
        PutOutcome::Created
    );
    assert_eq!(
        ok(
            store.put_if_absent(key, b"second".to_vec()).await,
            "second put"
        ),
        PutOutcome::AlreadyExists
    );
    assert_eq!(ok(store.get(key).await, "get"), Some(b"first".to_vec()));
    let meta = ok(store.head(key).await, "head").expect("head found nothing");
    assert_eq!((meta.size, meta.sha256), (5, Some(sha(b"first"))));

    // Racing writers of one key: exactly one creates it.
    let mut tasks = Vec::new();
    for n in 0..6 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            store.put_if_absent("race/key.bin", vec![n; 1024]).await
        }));
    }
    let mut created = 0;
    for task in tasks {
        if ok(ok(task.await, "join"), "racing put") == PutOutcome::Created {
            created += 1;
        }
    }
    assert_eq!(created, 1);
}

pub async fn missing_objects_read_as_absent(store: Store) {
    assert_eq!(ok(store.get("nothing/here").await, "get"), None);
    assert_eq!(ok(store.head("nothing/here").await, "head"), None);
    ok(
        store.delete("nothing/here").await,
        "delete of an absent object",
    );
    let dir = ok(tempfile::tempdir(), "tempdir");
    let err = store
        .get_to_file("nothing/here", &dir.path().join("out"))
        .await
        .err();
    assert!(
        matches!(err, Some(StoreError::BlobNotFound { ref key, .. }) if key == "nothing/here"),
        "{err:?}"
    );
}

pub async fn put_replaces_and_delete_removes(store: Store) {
    ok(
        store.put("logs/j-1/logs.tar.gz", b"one".to_vec()).await,
        "put",
    );
    ok(
        store.put("logs/j-1/logs.tar.gz", b"two!".to_vec()).await,
        "replace",
    );
    assert_eq!(
        ok(store.get("logs/j-1/logs.tar.gz").await, "get"),
        Some(b"two!".to_vec())
    );
    let meta = ok(store.head("logs/j-1/logs.tar.gz").await, "head");
    assert_eq!(
        meta.map(|m| (m.size, m.sha256)),
        Some((4, Some(sha(b"two!"))))
    );
    ok(store.delete("logs/j-1/logs.tar.gz").await, "delete");
    assert_eq!(ok(store.get("logs/j-1/logs.tar.gz").await, "get"), None);
}

pub async fn large_file_streams_in_and_out(store: Store) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    // Larger than two 5 MiB parts, so the S3 store uploads in three parts.
    let content: Vec<u8> = (0..11 * 1024 * 1024 + 17)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let src = dir.path().join("big.bin");
    ok(std::fs::write(&src, &content), "write source");
    let key = "uploads/big.bin";
    assert_eq!(
        ok(store.put_file_if_absent(key, &src).await, "upload"),
        PutOutcome::Created
    );
    assert_eq!(
        ok(store.put_file_if_absent(key, &src).await, "upload again"),
        PutOutcome::AlreadyExists
    );
    let out = dir.path().join("out.bin");
    let meta = ok(store.get_to_file(key, &out).await, "download");
    assert_eq!(meta.size, content.len() as u64);
    let downloaded = ok(std::fs::read(&out), "read download");
    assert!(downloaded == content, "downloaded bytes differ");
    let head = ok(store.head(key).await, "head");
    assert_eq!(head.and_then(|m| m.sha256), Some(sha(&content)));
}

/// `put_file` replaces whatever is at the key, from a file: a large one (in parts on S3, whose
/// contract store uses 5 MiB parts), then a small one over it, each read back whole with its
/// SHA-256.
pub async fn put_file_replaces_an_object_from_a_file_large_or_small(store: Store) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let large: Vec<u8> = (0..11 * 1024 * 1024 + 5)
        .map(|i: u32| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    let key = "logs/j-big/logs.tar.gz";
    ok(store.put(key, b"an older archive".to_vec()).await, "put");
    let src = dir.path().join("large.tar.gz");
    ok(std::fs::write(&src, &large), "write large");
    ok(store.put_file(key, &src).await, "put_file large");
    let out = dir.path().join("out");
    let meta = ok(store.get_to_file(key, &out).await, "download");
    assert_eq!(meta.size, large.len() as u64);
    assert!(
        ok(std::fs::read(&out), "read") == large,
        "stored bytes differ"
    );
    let head = ok(store.head(key).await, "head");
    assert_eq!(head.and_then(|m| m.sha256), Some(sha(&large)));
    let small = dir.path().join("small.tar.gz");
    ok(std::fs::write(&small, b"a newer archive"), "write small");
    ok(store.put_file(key, &small).await, "put_file small");
    assert_eq!(
        ok(store.get(key).await, "get"),
        Some(b"a newer archive".to_vec())
    );
    let head = ok(store.head(key).await, "head");
    assert_eq!(
        head.map(|m| (m.size, m.sha256)),
        Some((15, Some(sha(b"a newer archive"))))
    );
    // A bad key is refused before anything is read.
    let err = store.put_file("../escape", &small).await.err();
    assert!(
        matches!(err, Some(StoreError::InvalidKey { .. })),
        "{err:?}"
    );
}

/// A download bounded by a size stops at the limit: an object one byte too large is not written
/// (and nothing is left behind); one exactly at the limit arrives whole.
pub async fn a_bounded_download_refuses_an_object_above_its_limit(store: Store) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let content = vec![7u8; 300_000];
    let key = "uploads/u-big/code.tar.gz";
    ok(store.put(key, content.clone()).await, "put");
    let out = dir.path().join("code.archive");
    let refused = ok(
        store.get_to_file_within(key, &out, 299_999).await,
        "bounded download",
    );
    assert!(refused.is_none(), "{refused:?}");
    assert!(!out.exists(), "a refused download left a file");
    let leftovers = ok(std::fs::read_dir(dir.path()), "list").count();
    assert_eq!(leftovers, 0);
    let meta = ok(
        store.get_to_file_within(key, &out, 300_000).await,
        "download at the limit",
    );
    assert_eq!(meta.map(|m| m.size), Some(300_000));
    assert_eq!(ok(std::fs::read(&out), "read").len(), 300_000);
}

pub async fn presigned_put_then_get_round_trips_over_plain_http(store: Store) {
    let key = "uploads/u-1/code.tar.gz";
    let put = ok(
        store
            .presign(PresignMethod::Put, key, Duration::from_secs(600))
            .await,
        "presign put",
    );
    let (status, body) = send(&put, Some(b"uploaded bytes".to_vec())).await;
    assert_eq!(status, 200, "PUT: {}", String::from_utf8_lossy(&body));
    assert_eq!(
        ok(store.get(key).await, "get"),
        Some(b"uploaded bytes".to_vec())
    );

    ok(
        store
            .put_if_absent("capsules/sha256/ff/capsule.zip", b"zip bytes".to_vec())
            .await,
        "put",
    );
    let get = ok(
        store
            .presign(
                PresignMethod::Get,
                "capsules/sha256/ff/capsule.zip",
                Duration::from_secs(600),
            )
            .await,
        "presign get",
    );
    assert!(
        get.url
            .split('?')
            .next()
            .is_some_and(|path| path.ends_with(".zip")),
        "Ray needs the path to end in .zip: {}",
        get.url
    );
    assert!(get.expires_at > 0);
    let (status, body) = send(&get, None).await;
    assert_eq!((status, body), (200, b"zip bytes".to_vec()));
}

/// A URL presigned for one upload length names it in the headers the client must send and
/// stores a body of that length. (That a body of another length is refused is shown on the
/// filesystem store; S3 refuses one because `Content-Length` is a signed header, which the local
/// endpoint does not verify: the S3 tests check that it is signed.)
pub async fn a_sized_upload_url_names_its_length_and_stores_a_body_of_it(store: Store) {
    let key = "outputs/acme/j-1/model/w.bin";
    let put = ok(
        store
            .presign_upload(key, Duration::from_secs(600), 11)
            .await,
        "presign sized put",
    );
    assert_eq!(put.method, PresignMethod::Put);
    assert!(
        put.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("content-length") && v == "11"),
        "{:?}",
        put.headers
    );
    let (status, body) = send(&put, Some(b"eleven byte".to_vec())).await;
    assert_eq!(status, 200, "PUT: {}", String::from_utf8_lossy(&body));
    assert_eq!(
        ok(store.get(key).await, "get"),
        Some(b"eleven byte".to_vec())
    );
}

/// Names people give files (spaces, `+`, parentheses) are stored as they are, and a presigned URL
/// reaches the same object: `+` is not read back as a space, nor a space as `+`.
pub async fn keys_with_spaces_and_plus_round_trip(store: Store) {
    let spaced = "inbox/acme/my job (v2).zip";
    let plussed = "inbox/acme/my+job.zip";
    ok(store.put(spaced, b"spaced".to_vec()).await, "put spaced");
    ok(store.put(plussed, b"plussed".to_vec()).await, "put plussed");
    assert_eq!(ok(store.get(spaced).await, "get"), Some(b"spaced".to_vec()));
    assert_eq!(
        ok(store.get(plussed).await, "get"),
        Some(b"plussed".to_vec())
    );
    for (key, want) in [(spaced, &b"spaced"[..]), (plussed, &b"plussed"[..])] {
        let get = ok(
            store
                .presign(PresignMethod::Get, key, Duration::from_secs(600))
                .await,
            "presign get",
        );
        let (status, body) = send(&get, None).await;
        assert_eq!((status, body.as_slice()), (200, want), "{key}: {}", get.url);
    }
}

pub async fn keys_that_escape_the_namespace_are_rejected(store: Store) {
    for key in [
        "../etc/passwd",
        "a//b",
        "/abs",
        "a/./b",
        "",
        "a?b",
        "50%.zip",
    ] {
        let err = store.put_if_absent(key, b"x".to_vec()).await.err();
        assert!(
            matches!(err, Some(StoreError::InvalidKey { .. })),
            "{key:?}: {err:?}"
        );
    }
}

pub async fn listing_a_folder_names_its_objects_sorted_and_bounded(store: Store) {
    for (key, body) in [
        ("outputs/acme/j1/model/weights.bin", &b"12345"[..]),
        ("outputs/acme/j1/metrics.json", b"{}"),
        ("outputs/acme/j10/other.txt", b"x"),
        ("outputs/acme/j2/x", b"y"),
    ] {
        ok(store.put(key, body.to_vec()).await, "put");
    }
    let all = ok(store.list("outputs/acme/j1/", 100).await, "list");
    assert_eq!(
        all,
        vec![
            ("outputs/acme/j1/metrics.json".to_owned(), 2),
            ("outputs/acme/j1/model/weights.bin".to_owned(), 5),
        ],
        "a folder prefix lists only that folder (not j10), nested keys included, sorted"
    );
    let first = ok(store.list("outputs/acme/j1/", 1).await, "list");
    assert_eq!(first.len(), 1);
    assert!(ok(store.list("outputs/none/", 10).await, "list").is_empty());
}
