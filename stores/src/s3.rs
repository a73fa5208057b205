//! S3 blob store.
//!
//! Put-if-absent is `PutObject` with `If-None-Match: *` (S3 answers 412 when the key exists), so
//! content-addressed capsules are never rewritten even by racing writers. Every object carries its
//! SHA-256 twice: as the `x-amz-checksum-sha256` S3 verifies on upload and as `sha256` metadata
//! (hex) that [`BlobStore::head`] returns. Files above `multipart_threshold` upload in parts, each
//! streamed from the file (memory stays bounded whatever the size). A bounded upload URL
//! ([`BlobStore::presign_upload`]) signs `Content-Length`.

use std::path::Path;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use base64::Engine;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tuneplane_core::store::{
    BlobMeta, BlobStore, BoxError, PresignMethod, PutOutcome, Result, SignRequest, StoreError,
    validate_blob_key,
};

use crate::OCTET_STREAM;

/// The request builder of S3 operation `$op` on object `$key` of `$store`'s bucket:
/// `$store.client.$op().bucket(&$store.bucket).key($key)`. A macro because every operation's
/// fluent builder is its own type.
macro_rules! object_request {
    ($store:expr, $op:ident, $key:expr) => {
        $store.client.$op().bucket(&$store.bucket).key($key)
    };
}

/// Smallest part S3 accepts (except the last).
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// [`BlobStore`] on one S3 bucket.
#[derive(Debug, Clone)]
pub struct S3BlobStore {
    client: Client,
    bucket: String,
    multipart_threshold: u64,
    part_size: u64,
}

impl S3BlobStore {
    /// Streams `key` into `path` (beside it first, then renamed: a reader never sees a partial
    /// file), stopping with `None` and no file once it is larger than `max_bytes`.
    async fn download(&self, key: &str, path: &Path, max_bytes: u64) -> Result<Option<BlobMeta>> {
        let Some(mut out) = self.get_object(key).await? else {
            return Err(StoreError::BlobNotFound {
                bucket: self.bucket.clone(),
                key: key.to_owned(),
            });
        };
        let declared = out.content_length.and_then(|n| u64::try_from(n).ok());
        if declared.is_some_and(|n| n > max_bytes) {
            return Ok(None);
        }
        let sha256 = out.metadata.as_ref().and_then(|m| m.get("sha256")).cloned();
        let partial = path.with_extension("partial");
        let io = |e: std::io::Error| self.backend("write download", key, e);
        let mut file = tokio::fs::File::create(&partial).await.map_err(io)?;
        let mut size = 0u64;
        while let Some(chunk) = out.body.next().await {
            let chunk = chunk.map_err(|e| self.backend("GetObject", key, e))?;
            size += chunk.len() as u64;
            if size > max_bytes {
                drop(file);
                let _ = tokio::fs::remove_file(&partial).await;
                return Ok(None);
            }
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.sync_all().await.map_err(io)?;
        tokio::fs::rename(&partial, path).await.map_err(io)?;
        Ok(Some(BlobMeta { size, sha256 }))
    }
    /// A store on `bucket`; files above 64 MiB upload in 16 MiB parts.
    pub fn new(client: Client, bucket: impl Into<String>) -> S3BlobStore {
        S3BlobStore {
            client,
            bucket: bucket.into(),
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
        }
    }

    /// Changes when and how files upload in parts (`part_size` is raised to S3's 5 MiB minimum).
    pub fn with_multipart(mut self, threshold: u64, part_size: u64) -> S3BlobStore {
        self.multipart_threshold = threshold;
        self.part_size = part_size.max(MIN_PART_SIZE);
        self
    }

    /// The S3 bucket every blob key is an object of.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// `GetObject` of a checked key; a missing object is `None`.
    async fn get_object(
        &self,
        key: &str,
    ) -> Result<Option<aws_sdk_s3::operation::get_object::GetObjectOutput>> {
        validate_blob_key(key)?;
        let got = object_request!(self, get_object, key).send().await;
        self.found("GetObject", key, got, |e| e.is_no_such_key())
    }

    /// The answer of a read, `None` when `missing` says the object does not exist, any other
    /// failure as a backend error of `op` on `key`.
    fn found<T, E>(
        &self,
        op: &'static str,
        key: &str,
        answer: std::result::Result<T, SdkError<E, HttpResponse>>,
        missing: impl FnOnce(&E) -> bool,
    ) -> Result<Option<T>>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        match answer {
            Ok(out) => Ok(Some(out)),
            Err(e) if e.as_service_error().is_some_and(missing) => Ok(None),
            Err(e) => Err(self.backend(op, key, e)),
        }
    }

    /// Creates the bucket if it does not exist yet (local stacks and tests; production buckets
    /// come from `template.yaml`).
    pub async fn ensure_bucket(&self) -> Result<()> {
        if self.bucket_exists().await {
            return Ok(());
        }
        match self
            .client
            .create_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            // A concurrent creator won: the bucket exists, which is all we need.
            Err(e) if self.bucket_exists().await => {
                tracing::debug!(error = %e, bucket = %self.bucket, "bucket created concurrently");
                Ok(())
            }
            Err(e) => Err(self.backend("create_bucket", "", e)),
        }
    }

    /// Whether `HeadBucket` on the bucket succeeds.
    async fn bucket_exists(&self) -> bool {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .is_ok()
    }

    /// A [`StoreError::Backend`] of `op` on `key` of this bucket.
    fn backend(&self, op: &'static str, key: &str, e: impl Into<BoxError>) -> StoreError {
        StoreError::backend(op, &self.bucket, key, e)
    }

    /// A `PutObject` of `body` whose SHA-256 is `sha256`: S3 checks the checksum, and the hex
    /// digest is kept as metadata for [`BlobStore::head`].
    fn put_object(&self, key: &str, sha256: &[u8], body: ByteStream) -> PutObjectFluentBuilder {
        object_request!(self, put_object, key)
            .content_type(OCTET_STREAM)
            .checksum_sha256(base64::engine::general_purpose::STANDARD.encode(sha256))
            .metadata("sha256", hex::encode(sha256))
            .body(body)
    }

    async fn put_bytes(&self, key: &str, bytes: Vec<u8>, if_absent: bool) -> Result<PutOutcome> {
        validate_blob_key(key)?;
        let digest = Sha256::digest(&bytes);
        let mut put = self.put_object(key, &digest, ByteStream::from(bytes));
        if if_absent {
            put = put.if_none_match("*");
        }
        match put.send().await {
            Ok(_) => Ok(PutOutcome::Created),
            Err(e) => self.absent_or_error("PutObject", key, e).await,
        }
    }

    /// Maps a failed conditional write: 412 means the key exists; 409 (a concurrent conditional
    /// write) resolves by looking.
    async fn absent_or_error<E>(
        &self,
        op: &'static str,
        key: &str,
        e: SdkError<E, HttpResponse>,
    ) -> Result<PutOutcome>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        match e.raw_response().map(|r| r.status().as_u16()) {
            Some(412) => Ok(PutOutcome::AlreadyExists),
            Some(409) if self.head(key).await?.is_some() => Ok(PutOutcome::AlreadyExists),
            _ => Err(self.backend(op, key, e)),
        }
    }

    /// Uploads the file at `path` (of `size` bytes, SHA-256 `sha_hex`) in parts, each streamed
    /// from the file: memory stays bounded whatever the part size. `if_absent`: the upload
    /// completes only if no object exists at `key`; otherwise it replaces one.
    async fn put_multipart(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        sha_hex: &str,
        if_absent: bool,
    ) -> Result<PutOutcome> {
        let created = object_request!(self, create_multipart_upload, key)
            .content_type(OCTET_STREAM)
            .metadata("sha256", sha_hex)
            .send()
            .await
            .map_err(|e| self.backend("CreateMultipartUpload", key, e))?;
        let upload_id = created.upload_id.unwrap_or_default();
        let result = self.upload_parts(key, path, size, &upload_id).await;
        let outcome = match result {
            Ok(parts) => {
                let done = CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build();
                let mut complete = object_request!(self, complete_multipart_upload, key)
                    .upload_id(&upload_id)
                    .multipart_upload(done);
                if if_absent {
                    complete = complete.if_none_match("*");
                }
                let complete = complete.send().await;
                match complete {
                    Ok(_) => return Ok(PutOutcome::Created),
                    // A 2xx whose body does not parse (moto 5.2 names the XML root wrongly): the
                    // upload completed if the object now carries this upload's checksum.
                    Err(e) if e.raw_response().is_some_and(|r| r.status().is_success()) => {
                        match self.head(key).await? {
                            Some(meta) if meta.sha256.as_deref() == Some(sha_hex) => {
                                return Ok(PutOutcome::Created);
                            }
                            _ => Err(self.backend("CompleteMultipartUpload", key, e)),
                        }
                    }
                    Err(e) => {
                        self.absent_or_error("CompleteMultipartUpload", key, e)
                            .await
                    }
                }
            }
            Err(e) => Err(e),
        };
        // Whatever went wrong, do not leave billed parts behind.
        let _ = object_request!(self, abort_multipart_upload, key)
            .upload_id(&upload_id)
            .send()
            .await;
        outcome
    }

    /// Uploads the parts of the file at `path` (`size` bytes): each part is hashed in a
    /// streaming pass over its range, then sent as a body read from the file (so a retried
    /// request reads it again), never held in memory whole.
    async fn upload_parts(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        upload_id: &str,
    ) -> Result<Vec<CompletedPart>> {
        let io = |e: std::io::Error| self.backend("read source file", key, e);
        let mut parts = Vec::new();
        let mut offset = 0u64;
        for number in 1.. {
            let len = self.part_size.min(size - offset);
            if len == 0 && number > 1 {
                break;
            }
            let digest = hash_range(path, offset, len).await.map_err(io)?;
            let body = ByteStream::read_from()
                .path(path)
                .offset(offset)
                .length(Length::Exact(len))
                .build()
                .await
                .map_err(|e| self.backend("read source file", key, e))?;
            let out = object_request!(self, upload_part, key)
                .upload_id(upload_id)
                .part_number(number)
                .checksum_sha256(base64::engine::general_purpose::STANDARD.encode(digest))
                .body(body)
                .send()
                .await
                .map_err(|e| self.backend("UploadPart", key, e))?;
            let part = CompletedPart::builder()
                .set_e_tag(out.e_tag)
                .set_checksum_sha256(out.checksum_sha256)
                .part_number(number);
            parts.push(part.build());
            offset += len;
        }
        Ok(parts)
    }

    /// Streams the file at `path` to `key`: in parts above the multipart threshold, else in one
    /// `PutObject` read from the file; only if absent, or replacing.
    async fn put_path(&self, key: &str, path: &Path, if_absent: bool) -> Result<PutOutcome> {
        let (sha_hex, size) = hash_file(path)
            .await
            .map_err(|e| self.backend("read source file", key, e))?;
        if size > self.multipart_threshold {
            return self
                .put_multipart(key, path, size, &sha_hex, if_absent)
                .await;
        }
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| self.backend("read source file", key, e))?;
        let sha = hex::decode(&sha_hex).unwrap_or_default();
        let mut put = self.put_object(key, &sha, body);
        if if_absent {
            put = put.if_none_match("*");
        }
        match put.send().await {
            Ok(_) => Ok(PutOutcome::Created),
            Err(e) => self.absent_or_error("PutObject", key, e).await,
        }
    }
}

/// SHA-256 of `len` bytes of the file at `path` from `offset`, read in a streaming pass.
async fn hash_range(path: &Path, offset: u64, len: u64) -> std::io::Result<[u8; 32]> {
    let mut file = tokio::fs::File::open(path).await?;
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let mut range = file.take(len);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut read = 0u64;
    loop {
        let n = range.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        read += n as u64;
    }
    if read != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "the file ended at byte {} of a part ending at byte {}",
                offset + read,
                offset + len
            ),
        ));
    }
    Ok(hasher.finalize().into())
}

/// SHA-256 (hex) and size of a file, read in a streaming pass.
async fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = tokio::fs::File::open(path).await?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok((hex::encode(hasher.finalize()), size));
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
}

#[async_trait::async_trait]
impl BlobStore for S3BlobStore {
    #[tracing::instrument(skip_all, fields(bucket = %self.bucket, key), err)]
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome> {
        self.put_bytes(key, bytes, true).await
    }

    #[tracing::instrument(skip_all, fields(bucket = %self.bucket, key), err)]
    async fn put_file_if_absent(&self, key: &str, path: &Path) -> Result<PutOutcome> {
        validate_blob_key(key)?;
        if self.head(key).await?.is_some() {
            return Ok(PutOutcome::AlreadyExists);
        }
        self.put_path(key, path, true).await
    }

    #[tracing::instrument(skip_all, fields(bucket = %self.bucket, key), err)]
    async fn put_file(&self, key: &str, path: &Path) -> Result<()> {
        validate_blob_key(key)?;
        self.put_path(key, path, false).await.map(drop)
    }

    #[tracing::instrument(skip_all, fields(bucket = %self.bucket, key), err)]
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        self.put_bytes(key, bytes, false).await.map(drop)
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let Some(out) = self.get_object(key).await? else {
            return Ok(None);
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| self.backend("GetObject", key, e))?;
        Ok(Some(bytes.to_vec()))
    }

    #[tracing::instrument(skip_all, fields(bucket = %self.bucket, key), err)]
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<BlobMeta> {
        let meta = self.download(key, path, u64::MAX).await?;
        // Nothing is larger than u64::MAX bytes.
        meta.ok_or_else(|| self.backend("GetObject", key, "object larger than 2^64 bytes"))
    }

    #[tracing::instrument(skip_all, fields(bucket = %self.bucket, key, max_bytes), err)]
    async fn get_to_file_within(
        &self,
        key: &str,
        path: &Path,
        max_bytes: u64,
    ) -> Result<Option<BlobMeta>> {
        self.download(key, path, max_bytes).await
    }

    async fn head(&self, key: &str) -> Result<Option<BlobMeta>> {
        validate_blob_key(key)?;
        let answer = object_request!(self, head_object, key).send().await;
        let Some(out) = self.found("HeadObject", key, answer, |e| e.is_not_found())? else {
            return Ok(None);
        };
        let size = out
            .content_length
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0);
        let sha256 = out.metadata.and_then(|mut m| m.remove("sha256"));
        Ok(Some(BlobMeta { size, sha256 }))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(String, u64)>> {
        validate_blob_key(prefix.trim_end_matches('/'))?;
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        while found.len() < limit {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .max_keys(i32::try_from((limit - found.len()).min(1000)).unwrap_or(1000))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| self.backend("ListObjectsV2", prefix, e))?;
            for object in page.contents() {
                if let Some(key) = object.key() {
                    let size = object
                        .size()
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or(0);
                    found.push((key.to_owned(), size));
                }
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
                _ => break,
            }
        }
        found.sort();
        found.truncate(limit);
        Ok(found)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        validate_blob_key(key)?;
        object_request!(self, delete_object, key)
            .send()
            .await
            .map_err(|e| self.backend("DeleteObject", key, e))?;
        Ok(())
    }

    async fn sign(&self, request: &SignRequest<'_>) -> Result<(String, Vec<(String, String)>)> {
        let key = request.key;
        let config = PresigningConfig::expires_in(request.expires_in)
            .map_err(|e| self.backend("presign", key, e))?;
        let presigned = match request.method {
            PresignMethod::Get => {
                let get = object_request!(self, get_object, key);
                get.presigned(config)
                    .await
                    .map_err(|e| self.backend("presign", key, e))?
            }
            PresignMethod::Put => {
                let mut put = object_request!(self, put_object, key).content_type(OCTET_STREAM);
                // A set length is a signed header: S3 refuses a request without it or with
                // another value, and a body that differs from it.
                if let Some(length) = request.content_length {
                    let length =
                        i64::try_from(length).map_err(|e| self.backend("presign", key, e))?;
                    put = put.content_length(length);
                }
                put.presigned(config)
                    .await
                    .map_err(|e| self.backend("presign", key, e))?
            }
        };
        let headers = presigned
            .headers()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Ok((presigned.uri().to_owned(), headers))
    }
}
