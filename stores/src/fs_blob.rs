//! Filesystem blob store: objects as files under a root directory, written atomically.
//!
//! Layout: `<root>/data/<key>` holds the bytes, `<root>/meta/<key>` a small JSON [`BlobMeta`],
//! `<root>/tmp/` staging files. Every write goes to a staging file first; put-if-absent publishes
//! it with a hard link (which fails if the key exists, so two racing writers cannot both win) and
//! a replacing put with a rename.
//!
//! Presigned URLs carry `tp-method`, `tp-expires` and `tp-signature`: an HMAC-SHA256 over the
//! method, key and expiry with the store's secret. A bounded upload
//! ([`BlobStore::presign_upload`]) also carries `tp-length`, which the signature covers too, and
//! [`crate::blob_server::router`] stores only a body of exactly that length. The server checks
//! them all.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tuneplane_core::store::{
    BlobMeta, BlobStore, PresignMethod, PutOutcome, Result, SignRequest, StoreError,
    encode_blob_key_path, validate_blob_key,
};

use crate::OCTET_STREAM;

/// Query parameter carrying the signed method.
pub const METHOD_PARAM: &str = "tp-method";
/// Query parameter carrying the expiry (Unix seconds).
pub const EXPIRES_PARAM: &str = "tp-expires";
/// Query parameter carrying the hex HMAC-SHA256 signature.
pub const SIGNATURE_PARAM: &str = "tp-signature";
/// Query parameter carrying the one body length a bounded upload accepts (signed).
pub const LENGTH_PARAM: &str = "tp-length";

/// [`BlobStore`] on a local directory; see the module docs.
#[derive(Clone)]
pub struct FsBlobStore {
    root: PathBuf,
    secret: Vec<u8>,
    base_url: String,
}

impl std::fmt::Debug for FsBlobStore {
    // The secret stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsBlobStore")
            .field("root", &self.root)
            .field("base_url", &self.base_url)
            .finish()
    }
}

/// Why a presigned request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// A signature parameter is missing or malformed.
    Malformed,
    /// The URL was signed for another method.
    WrongMethod,
    /// The signature does not match (tampered key, expiry or method, or another secret).
    BadSignature,
    /// The expiry has passed.
    Expired,
}

impl FsBlobStore {
    /// Opens (creating) a store under `root`. `base_url` is where [`crate::blob_server::router`]
    /// is reachable (e.g. `http://127.0.0.1:8089/blobs`); `secret` signs presigned URLs.
    pub fn open(
        root: impl AsRef<Path>,
        secret: impl Into<Vec<u8>>,
        base_url: impl Into<String>,
    ) -> Result<FsBlobStore> {
        let root = root.as_ref().to_path_buf();
        for sub in ["data", "meta", "tmp"] {
            std::fs::create_dir_all(root.join(sub))
                .map_err(|e| io_err("create directory", &root, sub, e))?;
        }
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        Ok(FsBlobStore {
            root,
            secret: secret.into(),
            base_url,
        })
    }

    /// The folder that holds the blobs (one file per key, with its metadata beside it).
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn data_path(&self, key: &str) -> PathBuf {
        self.root.join("data").join(key)
    }

    fn meta_path(&self, key: &str) -> PathBuf {
        self.root.join("meta").join(key)
    }

    fn err(&self, op: &'static str, key: &str, e: std::io::Error) -> StoreError {
        io_err(op, &self.root, key, e)
    }

    /// The MAC of a URL. A bounded upload's length is a fourth line, so a URL signed without
    /// one cannot gain one and a signed length cannot be dropped or changed (keys hold no
    /// newline).
    fn signature(
        &self,
        method: PresignMethod,
        key: &str,
        expires: i64,
        length: Option<u64>,
    ) -> Result<Hmac<Sha256>> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.secret).map_err(|e| StoreError::InvalidKey {
                key: key.to_owned(),
                reason: format!("signing secret: {e}"),
            })?;
        mac.update(format!("{}\n{key}\n{expires}", method_name(method)).as_bytes());
        if let Some(length) = length {
            mac.update(format!("\n{length}").as_bytes());
        }
        Ok(mac)
    }

    /// Checks a presigned request for `key` at `now` (Unix seconds), in constant time; the
    /// body length the URL binds, if it binds one.
    pub fn verify(
        &self,
        method: PresignMethod,
        key: &str,
        params: &std::collections::HashMap<String, String>,
        now: i64,
    ) -> std::result::Result<Option<u64>, Denied> {
        let (Some(m), Some(exp), Some(sig)) = (
            params.get(METHOD_PARAM),
            params.get(EXPIRES_PARAM),
            params.get(SIGNATURE_PARAM),
        ) else {
            return Err(Denied::Malformed);
        };
        let expires: i64 = exp.parse().map_err(|_| Denied::Malformed)?;
        let sig = hex::decode(sig).map_err(|_| Denied::Malformed)?;
        let length = params
            .get(LENGTH_PARAM)
            .map(|l| l.parse::<u64>().map_err(|_| Denied::Malformed))
            .transpose()?;
        let signed_method = match m.as_str() {
            "GET" => PresignMethod::Get,
            "PUT" => PresignMethod::Put,
            _ => return Err(Denied::Malformed),
        };
        let mac = self
            .signature(signed_method, key, expires, length)
            .map_err(|_| Denied::BadSignature)?;
        mac.verify_slice(&sig).map_err(|_| Denied::BadSignature)?;
        // Only a genuine URL gets to learn that it expired or was used with the wrong method.
        if signed_method != method {
            return Err(Denied::WrongMethod);
        }
        if now > expires {
            return Err(Denied::Expired);
        }
        Ok(length)
    }

    /// A fresh staging file path (unique in this process; the pid keeps processes apart).
    pub(crate) fn staging_path(&self) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.root
            .join("tmp")
            .join(format!("{}-{n}", std::process::id()))
    }

    /// Copies `reader` into a staging file, returning its path and metadata.
    pub(crate) fn stage(&self, key: &str, reader: &mut dyn Read) -> Result<(PathBuf, BlobMeta)> {
        let path = self.staging_path();
        let result = (|| {
            let mut file = std::fs::File::create(&path)?;
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 256 * 1024];
            let mut size = 0u64;
            loop {
                let n = reader.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                file.write_all(&buf[..n])?;
                size += n as u64;
            }
            file.sync_all()?;
            Ok(BlobMeta {
                size,
                sha256: Some(hex::encode(hasher.finalize())),
            })
        })();
        match result {
            Ok(meta) => Ok((path, meta)),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(self.err("write staging file", key, e))
            }
        }
    }

    /// Publishes a staged file at `key`: only if absent, or replacing.
    pub(crate) fn publish(
        &self,
        key: &str,
        staged: &Path,
        meta: &BlobMeta,
        replace: bool,
    ) -> Result<PutOutcome> {
        let dest = self.data_path(key);
        let result = (|| {
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)?;
            }
            if replace {
                std::fs::rename(staged, &dest)?;
                return Ok(PutOutcome::Created);
            }
            match std::fs::hard_link(staged, &dest) {
                Ok(()) => Ok(PutOutcome::Created),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Ok(PutOutcome::AlreadyExists)
                }
                Err(e) => Err(e),
            }
        })();
        let _ = std::fs::remove_file(staged);
        let outcome = result.map_err(|e| self.err("publish blob", key, e))?;
        if outcome == PutOutcome::Created {
            self.write_meta(key, meta)?;
        }
        Ok(outcome)
    }

    fn write_meta(&self, key: &str, meta: &BlobMeta) -> Result<()> {
        let path = self.meta_path(key);
        let staged = self.staging_path();
        let json = serde_json::to_vec(meta).map_err(|e| self.err("encode meta", key, e.into()))?;
        let result = (|| {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&staged, json)?;
            std::fs::rename(&staged, &path)
        })();
        result.map_err(|e| {
            let _ = std::fs::remove_file(&staged);
            self.err("write meta", key, e)
        })
    }

    fn head_sync(&self, key: &str) -> Result<Option<BlobMeta>> {
        let size = match std::fs::metadata(self.data_path(key)) {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.err("stat blob", key, e)),
        };
        let sha256 = std::fs::read(self.meta_path(key))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<BlobMeta>(&bytes).ok())
            .and_then(|m| m.sha256);
        Ok(Some(BlobMeta { size, sha256 }))
    }

    /// Opens the object for reading with its metadata; `None` if absent.
    pub(crate) fn open_object(&self, key: &str) -> Result<Option<(std::fs::File, BlobMeta)>> {
        let Some(meta) = self.head_sync(key)? else {
            return Ok(None);
        };
        match std::fs::File::open(self.data_path(key)) {
            Ok(file) => Ok(Some((file, meta))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("open blob", key, e)),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        key: &str,
        f: impl FnOnce(FsBlobStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        validate_blob_key(key)?;
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(store))
            .await
            .map_err(|e| io_err("blocking task", &self.root, key, std::io::Error::other(e)))?
    }
}

fn method_name(method: PresignMethod) -> &'static str {
    match method {
        PresignMethod::Get => "GET",
        PresignMethod::Put => "PUT",
    }
}

fn io_err(op: &'static str, root: &Path, key: &str, e: std::io::Error) -> StoreError {
    StoreError::backend(op, &root.display().to_string(), key, e)
}

#[async_trait::async_trait]
impl BlobStore for FsBlobStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome> {
        let k = key.to_owned();
        self.blocking(key, move |s| {
            let (staged, meta) = s.stage(&k, &mut bytes.as_slice())?;
            s.publish(&k, &staged, &meta, false)
        })
        .await
    }

    async fn put_file_if_absent(&self, key: &str, path: &Path) -> Result<PutOutcome> {
        let (k, path) = (key.to_owned(), path.to_path_buf());
        self.blocking(key, move |s| {
            if s.head_sync(&k)?.is_some() {
                return Ok(PutOutcome::AlreadyExists);
            }
            let mut file =
                std::fs::File::open(&path).map_err(|e| s.err("open source file", &k, e))?;
            let (staged, meta) = s.stage(&k, &mut file)?;
            s.publish(&k, &staged, &meta, false)
        })
        .await
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let k = key.to_owned();
        self.blocking(key, move |s| {
            let (staged, meta) = s.stage(&k, &mut bytes.as_slice())?;
            s.publish(&k, &staged, &meta, true).map(drop)
        })
        .await
    }

    async fn put_file(&self, key: &str, path: &Path) -> Result<()> {
        let (k, path) = (key.to_owned(), path.to_path_buf());
        self.blocking(key, move |s| {
            let mut file =
                std::fs::File::open(&path).map_err(|e| s.err("open source file", &k, e))?;
            let (staged, meta) = s.stage(&k, &mut file)?;
            s.publish(&k, &staged, &meta, true).map(drop)
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let k = key.to_owned();
        self.blocking(key, move |s| match std::fs::read(s.data_path(&k)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(s.err("read blob", &k, e)),
        })
        .await
    }

    async fn get_to_file(&self, key: &str, path: &Path) -> Result<BlobMeta> {
        let (k, dest) = (key.to_owned(), path.to_path_buf());
        self.blocking(key, move |s| {
            let Some((mut file, meta)) = s.open_object(&k)? else {
                return Err(StoreError::BlobNotFound {
                    bucket: s.root.display().to_string(),
                    key: k,
                });
            };
            let (staged, _) = s.stage(&k, &mut file)?;
            std::fs::rename(&staged, &dest).map_err(|e| {
                let _ = std::fs::remove_file(&staged);
                s.err("move download into place", &k, e)
            })?;
            Ok(meta)
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<Option<BlobMeta>> {
        let k = key.to_owned();
        self.blocking(key, move |s| s.head_sync(&k)).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(String, u64)>> {
        let folder = prefix.trim_end_matches('/').to_owned();
        self.blocking(&folder.clone(), move |s| {
            let mut found = Vec::new();
            let mut todo = vec![s.data_path(&folder)];
            while let Some(dir) = todo.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(s.err("list blobs", &folder, e)),
                };
                for entry in entries {
                    let entry = entry.map_err(|e| s.err("list blobs", &folder, e))?;
                    let meta = entry
                        .metadata()
                        .map_err(|e| s.err("list blobs", &folder, e))?;
                    let path = entry.path();
                    if meta.is_dir() {
                        todo.push(path);
                    } else if let Ok(rel) = path.strip_prefix(s.root.join("data")) {
                        let key = rel.to_string_lossy().replace('\\', "/");
                        found.push((key, meta.len()));
                    }
                }
            }
            found.sort();
            found.truncate(limit);
            Ok(found)
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let k = key.to_owned();
        self.blocking(key, move |s| {
            for path in [s.data_path(&k), s.meta_path(&k)] {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(s.err("delete blob", &k, e)),
                }
            }
            Ok(())
        })
        .await
    }

    async fn sign(&self, request: &SignRequest<'_>) -> Result<(String, Vec<(String, String)>)> {
        let (method, key, expires_at) = (request.method, request.key, request.expires_at);
        // Only an upload is bounded by a length.
        let length = request
            .content_length
            .filter(|_| method == PresignMethod::Put);
        let sig = hex::encode(
            self.signature(method, key, expires_at, length)?
                .finalize()
                .into_bytes(),
        );
        let name = method_name(method);
        let mut url = format!(
            "{}/{}?{METHOD_PARAM}={name}&{EXPIRES_PARAM}={expires_at}&{SIGNATURE_PARAM}={sig}",
            self.base_url,
            encode_blob_key_path(key)
        );
        let mut headers = match method {
            PresignMethod::Put => vec![("content-type".to_owned(), OCTET_STREAM.to_owned())],
            PresignMethod::Get => Vec::new(),
        };
        if let Some(length) = length {
            url.push_str(&format!("&{LENGTH_PARAM}={length}"));
            headers.push(("content-length".to_owned(), length.to_string()));
        }
        Ok((url, headers))
    }
}
