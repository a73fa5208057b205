//! The process's own settings, read with the rest of the [`Config`](super::Config): where jobs and
//! blobs live and how log lines look (the binary's `main` builds the stores and the log
//! subscriber from them, reading no variable itself).

use std::path::PathBuf;

use crate::error::{Error, Result};

/// DynamoDB table name (with [`ENV_BUCKET`]: the AWS stores).
pub const ENV_TABLE: &str = "TUNEPLANE_TABLE";
/// S3 bucket name.
pub const ENV_BUCKET: &str = "TUNEPLANE_BUCKET";
/// Embedded store directory (one-machine stack, as in `tuneplane dev`).
pub const ENV_DATA_DIR: &str = "TUNEPLANE_DATA_DIR";
/// Signing secret of the filesystem blob store.
pub const ENV_BLOB_SECRET: &str = "TUNEPLANE_BLOB_SECRET";
/// Base URL of the filesystem blob server.
pub const ENV_BLOB_URL: &str = "TUNEPLANE_BLOB_URL";
/// The AWS SDK's endpoint override (a local S3 and DynamoDB): when set, S3 is addressed
/// path-style. The SDK reads the endpoint itself; this only says whether one is set.
pub const ENV_AWS_ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
/// `json` (default) or `text` log lines.
pub const ENV_LOG_FORMAT: &str = "TUNEPLANE_LOG_FORMAT";

/// Where jobs and blobs live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSettings {
    /// DynamoDB + S3 (region and credentials from the SDK's chain).
    Aws {
        /// DynamoDB table ([`ENV_TABLE`]).
        table: String,
        /// S3 bucket ([`ENV_BUCKET`]).
        bucket: String,
        /// Address S3 path-style: an endpoint override is set ([`ENV_AWS_ENDPOINT_URL`]).
        path_style: bool,
    },
    /// The embedded store and filesystem blobs under one directory.
    Embedded {
        /// The directory ([`ENV_DATA_DIR`]); blobs in its `blobs` folder.
        dir: PathBuf,
        /// Blob URL signing secret ([`ENV_BLOB_SECRET`]).
        blob_secret: String,
        /// Base URL of the blob server ([`ENV_BLOB_URL`]).
        blob_url: String,
    },
}

fn missing(var: &'static str, with: &str) -> Error {
    Error::Config {
        var,
        message: format!("must be set with {with}"),
    }
}

/// The stores `get` names: `None` when neither [`ENV_TABLE`] nor [`ENV_DATA_DIR`] is set (the
/// binary refuses to start then; tests build their stores themselves). Empty counts as unset.
pub fn stores(get: &impl Fn(&str) -> Option<String>) -> Result<Option<StoreSettings>> {
    let var = |k: &str| get(k).filter(|v| !v.is_empty());
    if let Some(table) = var(ENV_TABLE) {
        let bucket = var(ENV_BUCKET).ok_or_else(|| missing(ENV_BUCKET, ENV_TABLE))?;
        return Ok(Some(StoreSettings::Aws {
            table,
            bucket,
            path_style: get(ENV_AWS_ENDPOINT_URL).is_some(),
        }));
    }
    let Some(dir) = var(ENV_DATA_DIR) else {
        return Ok(None);
    };
    let blob_secret = var(ENV_BLOB_SECRET).ok_or_else(|| missing(ENV_BLOB_SECRET, ENV_DATA_DIR))?;
    let blob_url = var(ENV_BLOB_URL).ok_or_else(|| missing(ENV_BLOB_URL, ENV_DATA_DIR))?;
    Ok(Some(StoreSettings::Embedded {
        dir: dir.into(),
        blob_secret,
        blob_url,
    }))
}

/// Whether log lines are JSON: `json` or unset (the default), `text` for plain lines.
pub fn json_logs(get: &impl Fn(&str) -> Option<String>) -> Result<bool> {
    match get(ENV_LOG_FORMAT).as_deref().map(str::trim) {
        None | Some("" | "json") => Ok(true),
        Some("text") => Ok(false),
        Some(other) => Err(Error::Config {
            var: ENV_LOG_FORMAT,
            message: format!("{other:?}: use json or text"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_stores_come_from_the_table_and_bucket_or_the_data_dir_and_a_missing_partner_is_named() {
        let aws = stores(&lookup(&[(ENV_TABLE, "t"), (ENV_BUCKET, "b")])).unwrap();
        assert_eq!(
            aws,
            Some(StoreSettings::Aws {
                table: "t".into(),
                bucket: "b".into(),
                path_style: false
            })
        );
        let local = lookup(&[
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_AWS_ENDPOINT_URL, "http://127.0.0.1:5000"),
        ]);
        assert!(matches!(
            stores(&local).unwrap(),
            Some(StoreSettings::Aws {
                path_style: true,
                ..
            })
        ));
        let err = stores(&lookup(&[(ENV_TABLE, "t")])).unwrap_err();
        assert!(err.to_string().contains(ENV_BUCKET), "{err}");
        let embedded = lookup(&[
            (ENV_DATA_DIR, "/d"),
            (ENV_BLOB_SECRET, "s"),
            (ENV_BLOB_URL, "http://127.0.0.1:1"),
        ]);
        assert!(matches!(
            stores(&embedded).unwrap(),
            Some(StoreSettings::Embedded { .. })
        ));
        let err = stores(&lookup(&[(ENV_DATA_DIR, "/d"), (ENV_BLOB_SECRET, "s")])).unwrap_err();
        assert!(err.to_string().contains(ENV_BLOB_URL), "{err}");
        assert_eq!(
            stores(&lookup(&[(ENV_TABLE, "")])).unwrap(),
            None,
            "empty is unset"
        );
    }

    #[test]
    fn log_lines_are_json_unless_text_is_asked_for_and_a_typo_is_named() {
        assert!(json_logs(&lookup(&[])).unwrap());
        assert!(json_logs(&lookup(&[(ENV_LOG_FORMAT, "json")])).unwrap());
        assert!(!json_logs(&lookup(&[(ENV_LOG_FORMAT, "text")])).unwrap());
        let err = json_logs(&lookup(&[(ENV_LOG_FORMAT, "txt")])).unwrap_err();
        assert!(err.to_string().contains(ENV_LOG_FORMAT), "{err}");
    }
}
