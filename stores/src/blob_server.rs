//! HTTP handler for [`FsBlobStore`] presigned URLs: `GET` and `PUT` on `/{key}`.
//!
//! Every request must carry a valid signature for its method and key and an expiry in the
//! future; otherwise it gets 403 with the reason. Downloads stream from disk; uploads stream into
//! a staging file (bounded by `max_upload_bytes`) and replace the object atomically, like a
//! presigned S3 PUT. A URL signed for one length ([`tuneplane_core::store::BlobStore::presign_upload`])
//! stores only a body of exactly that length, as S3 does with a signed `Content-Length`: a
//! longer body is cut off at the length (413), a shorter one or a `Content-Length` that differs is
//! 400, and the object is left as it was. Mount it under a prefix with `Router::nest` and give the
//! store that prefix in its base URL: the signature covers the key, not the prefix.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tuneplane_core::clock::now_secs;
use tuneplane_core::store::{BlobMeta, PresignMethod, validate_blob_key};

use crate::fs_blob::{Denied, FsBlobStore};

/// Default upload limit: 5 GiB, the size of one S3 PUT.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 5 * 1024 * 1024 * 1024;

struct ServerState {
    store: FsBlobStore,
    max_upload_bytes: u64,
}

/// The router serving `store`'s presigned URLs at `/{key}`.
pub fn router(store: FsBlobStore, max_upload_bytes: u64) -> Router {
    let state = Arc::new(ServerState {
        store,
        max_upload_bytes,
    });
    Router::new()
        .route("/{*key}", get(download).put(upload))
        .with_state(state)
}

/// A refused request: status and a plain-text reason (small, unlike a whole `Response`).
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal(status, message.into())
}

fn check(
    state: &ServerState,
    method: PresignMethod,
    key: &str,
    params: &HashMap<String, String>,
) -> Result<Option<u64>, Refusal> {
    if let Err(e) = validate_blob_key(key) {
        return Err(text(StatusCode::BAD_REQUEST, e.to_string()));
    }
    state
        .store
        .verify(method, key, params, now_secs())
        .map_err(|denied| {
            let reason = match denied {
                Denied::Malformed => "missing or malformed signature parameters",
                Denied::WrongMethod => "URL was signed for another method",
                Denied::BadSignature => "signature does not match",
                Denied::Expired => "URL has expired",
            };
            tracing::info!(key, ?denied, "presigned request refused");
            text(StatusCode::FORBIDDEN, reason)
        })
}

async fn download(
    State(state): State<Arc<ServerState>>,
    Path(key): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = check(&state, PresignMethod::Get, &key, &params) {
        return refused.into_response();
    }
    let store = state.store.clone();
    let k = key.clone();
    let opened = tokio::task::spawn_blocking(move || store.open_object(&k)).await;
    match opened {
        Ok(Ok(Some((file, meta)))) => {
            let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
            let mut response = Body::from_stream(stream).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
            if let Some(sha) = meta.sha256.and_then(|s| HeaderValue::from_str(&s).ok()) {
                headers.insert("x-tuneplane-sha256", sha);
            }
            response
        }
        Ok(Ok(None)) => text(StatusCode::NOT_FOUND, format!("no object at {key}")).into_response(),
        Ok(Err(e)) => internal(&key, &e),
        Err(e) => internal(&key, &e),
    }
}

async fn upload(
    State(state): State<Arc<ServerState>>,
    Path(key): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let signed_length = match check(&state, PresignMethod::Put, &key, &params) {
        Ok(length) => length,
        Err(refused) => return refused.into_response(),
    };
    if let Some(signed) = signed_length {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(declared) = declared
            && declared != signed
        {
            return text(
                StatusCode::BAD_REQUEST,
                format!("Content-Length {declared} differs from the {signed} bytes the URL was signed for"),
            )
            .into_response();
        }
    }
    let staged = state.store.staging_path();
    let written = receive(&staged, body, state.max_upload_bytes, signed_length).await;
    let meta = match written {
        Ok(meta) => meta,
        Err(refusal) => {
            let _ = tokio::fs::remove_file(&staged).await;
            return refusal.into_response();
        }
    };
    let store = state.store.clone();
    let k = key.clone();
    match tokio::task::spawn_blocking(move || store.publish(&k, &staged, &meta, true)).await {
        Ok(Ok(_)) => StatusCode::OK.into_response(),
        Ok(Err(e)) => internal(&key, &e),
        Err(e) => internal(&key, &e),
    }
}

/// Streams the request body into `path`, hashing it and enforcing the size limit and, when the
/// URL was signed for one, the exact length (`signed`).
async fn receive(
    path: &std::path::Path,
    body: Body,
    limit: u64,
    signed: Option<u64>,
) -> Result<BlobMeta, Refusal> {
    let io = |e: std::io::Error| internal_refusal("upload", &e);
    let mut file = tokio::fs::File::create(path).await.map_err(io)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            text(
                StatusCode::BAD_REQUEST,
                format!("reading the body failed: {e}"),
            )
        })?;
        size += chunk.len() as u64;
        if let Some(signed) = signed
            && size > signed
        {
            return Err(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload exceeds the {signed} bytes the URL was signed for"),
            ));
        }
        if size > limit {
            return Err(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload exceeds {limit} bytes"),
            ));
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(io)?;
    }
    if let Some(signed) = signed
        && size != signed
    {
        return Err(text(
            StatusCode::BAD_REQUEST,
            format!("the body has {size} bytes; the URL was signed for exactly {signed}"),
        ));
    }
    file.sync_all().await.map_err(io)?;
    Ok(BlobMeta {
        size,
        sha256: Some(hex::encode(hasher.finalize())),
    })
}

fn internal(key: &str, e: &dyn std::error::Error) -> Response {
    internal_refusal(key, e).into_response()
}

fn internal_refusal(key: &str, e: &dyn std::error::Error) -> Refusal {
    tracing::error!(key, error = %e, "blob server failure");
    text(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
}
