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
