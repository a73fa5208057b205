//! TunePlane storage adapters: the implementations of `tuneplane_core::store`'s traits.
//!
//! - [`EmbeddedJobStore`]: `redb` in a local directory (`tuneplane dev`, tests).
//! - [`FsBlobStore`]: files in a local directory, with HMAC-signed presigned URLs served by
//!   [`blob_server::router`].
//!
//! Every adapter returns [`tuneplane_core::store::StoreError`], naming the table or bucket and key.

pub mod blob_server;
pub mod embedded;
pub mod fs_blob;

pub use embedded::EmbeddedJobStore;
pub use fs_blob::FsBlobStore;
