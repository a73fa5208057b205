//! TunePlane storage adapters: the implementations of `tuneplane_core::store`'s traits.
//!
//! - [`DynamoJobStore`]: DynamoDB single table (production); [`dynamo::table::create_table`].
//! - [`EmbeddedJobStore`]: `redb` in a local directory (`tuneplane dev`, tests).
//! - [`S3BlobStore`]: S3 (production).
//! - [`FsBlobStore`]: files in a local directory, with HMAC-signed presigned URLs served by
//!   [`blob_server::router`].
//!
//! Every adapter returns [`tuneplane_core::store::StoreError`], naming the table or bucket and key.

pub mod aws;
pub mod blob_server;
pub mod blob_tls;
pub mod dynamo;
pub mod embedded;
pub mod fs_blob;
pub mod s3;

pub use dynamo::DynamoJobStore;
pub use embedded::EmbeddedJobStore;
pub use fs_blob::FsBlobStore;
pub use s3::S3BlobStore;

/// The media type of every object body and presigned upload.
pub(crate) const OCTET_STREAM: &str = "application/octet-stream";
