//! The blob-store contract against S3 (moto_server on 127.0.0.1, see `contract::aws_env`).
//!
//! The local endpoint does not check presigned signatures or expiry; the filesystem store's
//! tests cover that behaviour.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract;

use std::sync::Arc;

use contract::aws_env::{sdk_config, unique_name};
use contract::blob_store_contract;
use contract::fixtures::ok;
use tuneplane_core::store::BlobStore;
use tuneplane_stores::S3BlobStore;
use tuneplane_stores::aws::s3_client;
use tuneplane_stores::s3::MIN_PART_SIZE;

async fn make() -> (Arc<dyn BlobStore>, ()) {
    let config = sdk_config().await;
    let client = s3_client(&config, true);
    let bucket = unique_name("tp-blobs");
    ok(
        client.create_bucket().bucket(&bucket).send().await,
        "create bucket",
    );
    // Small parts, so the large-file case exercises the multipart path.
    let store = S3BlobStore::new(client, bucket).with_multipart(MIN_PART_SIZE, MIN_PART_SIZE);
    (Arc::new(store), ())
}

blob_store_contract!(make);

/// A sized upload URL signs `Content-Length`, so S3 refuses a request without it or with another
/// value, and a body that differs from it. The local endpoint does not verify signatures (it
/// stored the right length in the contract case above); what can be checked here is that the
/// length is among the signed headers and in the headers the client must send.
#[tokio::test]
async fn a_sized_upload_url_signs_its_content_length() {
    let (store, ()) = make().await;
    let put = ok(
        store
            .presign_upload(
                "outputs/acme/j-1/w.bin",
                std::time::Duration::from_secs(60),
                4096,
            )
            .await,
        "presign",
    );
    let signed = put
        .url
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("X-Amz-SignedHeaders="))
        .unwrap_or_default()
        .to_owned();
    assert!(
        signed.split("%3B").any(|h| h == "content-length"),
        "{}",
        put.url
    );
    assert!(
        put.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("content-length") && v == "4096"),
        "{:?}",
        put.headers
    );
    // A URL without a size signs no length.
    let plain = ok(
        store
            .presign(
                tuneplane_core::store::PresignMethod::Put,
                "outputs/acme/j-1/w.bin",
                std::time::Duration::from_secs(60),
            )
            .await,
        "presign",
    );
    assert!(!plain.url.contains("content-length"), "{}", plain.url);
}
