//! Typed configuration of the function binaries, parsed once at startup from `TUNEPLANE_*`
//! variables (docs/design.md §9). A bad value fails startup with the variable's name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tuneplane_core::capsule::Limits;
use tuneplane_core::spec::Defaults;
use tuneplane_core::submit::SubmitConfig;

pub use crate::secret::Secret;
pub use crate::webhook_sources::{SignatureScheme, WebhookSource};

/// DynamoDB table name; when set, the functions use DynamoDB and S3 (production).
pub const ENV_TABLE: &str = "TUNEPLANE_TABLE";
/// S3 bucket for capsules, uploads, inbox and logs (required with [`ENV_TABLE`]).
pub const ENV_BUCKET: &str = "TUNEPLANE_BUCKET";
/// Local data directory (embedded job store + filesystem blobs) when [`ENV_TABLE`] is unset.
pub const ENV_DATA_DIR: &str = "TUNEPLANE_DATA_DIR";
/// Secret signing the filesystem blob store's URLs (local mode).
pub const ENV_BLOB_SECRET: &str = "TUNEPLANE_BLOB_SECRET";
/// Base URL of the local blob server (local mode), e.g. `http://127.0.0.1:8089/blobs`.
pub const ENV_BLOB_URL: &str = "TUNEPLANE_BLOB_URL";
/// Webhook sources as JSON: `{"<source>": {"secret": "...", "tenant": "...", "scheme":
/// "tuneplane" | "hub", "template": "..."}}` (see [`crate::webhook_sources`]).
pub const ENV_WEBHOOKS: &str = "TUNEPLANE_WEBHOOKS";
/// Namespace filled into specs that name none.
pub const ENV_NAMESPACE: &str = "TUNEPLANE_NAMESPACE";
/// Tenants with a namespace of their own, as JSON: `{"acme": "ml-acme"}`; others use
/// `TUNEPLANE_NAMESPACE`. A spec naming any namespace but its tenant's is refused.
pub const ENV_TENANT_NAMESPACES: &str = "TUNEPLANE_TENANT_NAMESPACES";
/// The quota of tenants without their own, as a quota's JSON without `tenant` (set the same value
/// on the reconciler); unset: such tenants are unlimited.
pub const ENV_DEFAULT_QUOTA: &str = "TUNEPLANE_DEFAULT_QUOTA";
/// Most live playgrounds a tenant may have at once (default 2).
pub const ENV_PLAYGROUND_LIMIT: &str = "TUNEPLANE_PLAYGROUND_LIMIT";
/// Largest file a job may upload to its outputs or checkpoints, bytes or a quantity such as
/// `100Gi` (default 100 GiB); every upload URL is signed for the size the runner names.
pub const ENV_OUTPUT_OBJECT_MAX_BYTES: &str = "TUNEPLANE_OUTPUT_OBJECT_MAX_BYTES";
/// Most a tenant's outputs and checkpoints may hold together, bytes or a quantity such as `10Ti`
/// (default 10 TiB), or `off`.
pub const ENV_TENANT_STORAGE_BYTES: &str = "TUNEPLANE_TENANT_STORAGE_BYTES";
/// Most callback subscriptions a tenant may keep (default 10, 1 to 100).
pub const ENV_SUBSCRIPTION_LIMIT: &str = "TUNEPLANE_SUBSCRIPTION_LIMIT";
/// `1`: job callbacks and subscriptions may name loopback receivers, over http too (`tuneplane
/// dev` sets it; default 0). The reconciler's sender reads the same variable.
pub const ENV_CALLBACKS_ALLOW_LOOPBACK: &str = "TUNEPLANE_CALLBACKS_ALLOW_LOOPBACK";
/// Price of a GPU-hour per series for usage reports' cost column, JSON: `{"h200": 4.5}`.
pub const ENV_GPU_PRICES: &str = "TUNEPLANE_GPU_PRICES";
/// Pod networks the API's playground proxy may forward to, comma-separated CIDRs
/// (`10.244.0.0/16`); unset: the proxy answers 503.
pub const ENV_PLAYGROUND_POD_CIDRS: &str = "TUNEPLANE_PLAYGROUND_POD_CIDRS";
/// Hex key (at least 32 bytes) jobs' attempt grants are checked with; the reconciler's must be
/// the same. Unset: jobs cannot write outputs or checkpoints (503 `grants_unavailable`).
pub const ENV_GRANT_KEY: &str = "TUNEPLANE_GRANT_KEY";
/// Rate limit per API key, `RATE/BURST` requests per second (default `20/40`) or `off`.
pub const ENV_RATE_LIMIT_PER_KEY: &str = "TUNEPLANE_RATE_LIMIT_PER_KEY";
/// Rate limit per source address, `RATE/BURST` (default `50/100`) or `off`.
pub const ENV_RATE_LIMIT_PER_SOURCE: &str = "TUNEPLANE_RATE_LIMIT_PER_SOURCE";
/// Default pre-running deadline, seconds.
pub const ENV_PRE_RUNNING: &str = "TUNEPLANE_PRE_RUNNING_DEADLINE_SECONDS";
/// Default run deadline, seconds.
pub const ENV_RUN: &str = "TUNEPLANE_RUN_DEADLINE_SECONDS";
/// Scratch folder for staging code and building capsules (Lambda: `/tmp`).
pub const ENV_SCRATCH: &str = "TUNEPLANE_SCRATCH_DIR";
/// `json` for JSON logs, anything else for plain text.
pub const ENV_LOG_FORMAT: &str = "TUNEPLANE_LOG_FORMAT";
/// Address for plain HTTP serving of the API binary outside Lambda (e.g. `127.0.0.1:8080`).
pub const ENV_LISTEN: &str = "TUNEPLANE_LISTEN";
/// AWS accounts allowed to put "TunePlane Job Submission" events, each mapped to the tenant its
/// jobs belong to: `{"111122223333": "acme"}`. Unset: no account may.
pub const ENV_EVENT_SENDERS: &str = "TUNEPLANE_EVENT_SENDERS";
/// The console's signing secret (at least [`MIN_CONSOLE_SECRET_BYTES`]); several processes serving
/// one console (Lambda instances) must share it. Unset: a random key per process.
pub const ENV_CONSOLE_SECRET: &str = "TUNEPLANE_CONSOLE_SECRET";
/// Shortest accepted [`ENV_CONSOLE_SECRET`], bytes.
pub const MIN_CONSOLE_SECRET_BYTES: usize = 32;

/// Largest inline code archive (decoded), bytes: keeps requests within API Gateway and Lambda limits.
pub const MAX_INLINE_CODE_BYTES: usize = 4 * 1024 * 1024;
/// Largest request body (base64 of the inline limit plus the spec), bytes; Lambda allows 6 MB.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;

/// A configuration problem, naming the variable.
#[derive(Debug, thiserror::Error)]
#[error("{var}: {message}")]
pub struct ConfigError {
    /// Name of the environment variable at fault (one of the `ENV_*` constants).
    pub var: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// Where jobs and blobs live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// DynamoDB table + S3 bucket.
    Aws {
        /// DynamoDB table of jobs, events and keys ([`ENV_TABLE`]).
        table: String,
        /// S3 bucket of capsules, uploads, inbox and logs ([`ENV_BUCKET`]).
        bucket: String,
    },
    /// Embedded store and filesystem blobs under a directory.
    Local {
        /// Root of the embedded job store and the blob files ([`ENV_DATA_DIR`]).
        dir: PathBuf,
        /// Blob URL signing secret (redacted in `Debug`).
        blob_secret: Secret,
        /// Base URL that presigned blob URLs point at ([`ENV_BLOB_URL`]).
        blob_url: String,
    },
}

/// Configuration of every function binary.
#[derive(Debug, Clone)]
pub struct Config {
    /// AWS when [`ENV_TABLE`] is set, else local files under [`ENV_DATA_DIR`].
    pub backend: Backend,
    /// Spec defaults (namespace, deadlines), code limits and scratch directory for the submission
    /// service.
    pub submit: SubmitConfig,
    /// Webhook sources by name.
    pub webhooks: BTreeMap<String, WebhookSource>,
    /// Tenant of each AWS account that may put submission events.
    pub event_senders: BTreeMap<String, tuneplane_core::ids::TenantId>,
    /// Whether logs are JSON lines (`TUNEPLANE_LOG_FORMAT=json`) rather than text.
    pub json_logs: bool,
    /// Plain-HTTP listen address (API binary outside Lambda).
    pub listen: Option<String>,
    /// Pod networks the playground proxy may forward to ([`ENV_PLAYGROUND_POD_CIDRS`]).
    pub playground_pod_networks: Vec<crate::pod_network::Cidr>,
    /// Limit per API key ([`ENV_RATE_LIMIT_PER_KEY`]); `None`: off.
    pub rate_per_key: Option<crate::rate::Rate>,
    /// Limit per source address ([`ENV_RATE_LIMIT_PER_SOURCE`]); `None`: off.
    pub rate_per_source: Option<crate::rate::Rate>,
    /// The key attempts' grants are checked with ([`ENV_GRANT_KEY`]).
    pub grant_key: Option<tuneplane_core::grant::GrantKey>,
    /// The console's session-signing secret ([`ENV_CONSOLE_SECRET`]); `None`: random per process.
    pub console_secret: Option<Secret>,
}

/// Parses a rate variable, `default` when unset.
fn rate_value(
    var: &'static str,
    value: Option<String>,
    default: &str,
) -> Result<Option<crate::rate::Rate>, ConfigError> {
    crate::rate::Rate::parse(value.as_deref().unwrap_or(default))
        .map_err(|message| ConfigError { var, message })
}

impl Config {
    /// Parses the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Parses variables supplied by `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let non_empty = |var: &'static str| get(var).filter(|v| !v.trim().is_empty());
        let backend = match non_empty(ENV_TABLE) {
            Some(table) => Backend::Aws {
                table,
                bucket: non_empty(ENV_BUCKET).ok_or(ConfigError {
                    var: ENV_BUCKET,
                    message: format!("required when {ENV_TABLE} is set"),
                })?,
            },
            None => Backend::Local {
                dir: PathBuf::from(non_empty(ENV_DATA_DIR).ok_or(ConfigError {
                    var: ENV_DATA_DIR,
                    message: format!("set it (local stores) or set {ENV_TABLE} and {ENV_BUCKET}"),
                })?),
                blob_secret: non_empty(ENV_BLOB_SECRET)
                    .map(Secret::new)
                    .ok_or(ConfigError {
                        var: ENV_BLOB_SECRET,
                        message: "required with local stores (shared by every process)".into(),
                    })?,
                blob_url: non_empty(ENV_BLOB_URL)
                    .unwrap_or_else(|| "http://127.0.0.1:8089/blobs".into()),
            },
        };
        let number = |var: &'static str, default: u64| -> Result<u64, ConfigError> {
            match non_empty(var) {
                None => Ok(default),
                Some(v) => v.trim().parse().map_err(|_| ConfigError {
                    var,
                    message: format!("{v:?} is not a whole number of seconds"),
                }),
            }
        };
        let base = Defaults::default();
        let defaults = Defaults {
            pre_running_seconds: number(ENV_PRE_RUNNING, base.pre_running_seconds)?,
            run_seconds: number(ENV_RUN, base.run_seconds)?,
            namespace: match non_empty(ENV_NAMESPACE) {
                None => base.namespace,
                Some(ns) => namespace_value(ENV_NAMESPACE, ns)?,
            },
            tenant_namespaces: match non_empty(ENV_TENANT_NAMESPACES) {
                None => BTreeMap::new(),
                Some(json) => parse_tenant_namespaces(&json)?,
            },
            allow_loopback_callbacks: match non_empty(ENV_CALLBACKS_ALLOW_LOOPBACK).as_deref() {
                None | Some("0" | "false") => false,
                Some("1" | "true") => true,
                Some(other) => {
                    return Err(ConfigError {
                        var: ENV_CALLBACKS_ALLOW_LOOPBACK,
                        message: format!("{other:?}: use 1 or 0"),
                    });
                }
            },
        };
        let webhooks = match non_empty(ENV_WEBHOOKS) {
            None => BTreeMap::new(),
            Some(json) => parse_webhooks(&json)?,
        };
        let event_senders = match non_empty(ENV_EVENT_SENDERS) {
            None => BTreeMap::new(),
            Some(json) => parse_event_senders(&json)?,
        };
        let submit = SubmitConfig {
            defaults,
            limits: Limits::default(),
            scratch_dir: non_empty(ENV_SCRATCH)
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir),
            idempotency_ttl_seconds: 24 * 3600,
            playground_limit: per_tenant_limit(
                ENV_PLAYGROUND_LIMIT,
                non_empty(ENV_PLAYGROUND_LIMIT),
                2,
            )?,
            subscription_limit: per_tenant_limit(
                ENV_SUBSCRIPTION_LIMIT,
                non_empty(ENV_SUBSCRIPTION_LIMIT),
                tuneplane_core::callback::subscription::DEFAULT_SUBSCRIPTION_LIMIT as u32,
            )?,
            gpu_prices: match non_empty(ENV_GPU_PRICES) {
                None => BTreeMap::new(),
                Some(json) => parse_gpu_prices(&json)?,
            },
            storage: storage_limits(
                non_empty(ENV_OUTPUT_OBJECT_MAX_BYTES),
                non_empty(ENV_TENANT_STORAGE_BYTES),
            )?,
            default_quota: match non_empty(ENV_DEFAULT_QUOTA) {
                None => Default::default(),
                Some(json) => {
                    tuneplane_core::quota::DefaultQuota::parse(&json).map_err(|message| {
                        ConfigError {
                            var: ENV_DEFAULT_QUOTA,
                            message,
                        }
                    })?
                }
            },
        };
        Ok(Config {
            backend,
            submit,
            webhooks,
            event_senders,
            json_logs: non_empty(ENV_LOG_FORMAT).is_some_and(|v| v.eq_ignore_ascii_case("json")),
            listen: non_empty(ENV_LISTEN),
            rate_per_key: rate_value(
                ENV_RATE_LIMIT_PER_KEY,
                non_empty(ENV_RATE_LIMIT_PER_KEY),
                "20/40",
            )?,
            rate_per_source: rate_value(
                ENV_RATE_LIMIT_PER_SOURCE,
                non_empty(ENV_RATE_LIMIT_PER_SOURCE),
                "50/100",
            )?,
            console_secret: match non_empty(ENV_CONSOLE_SECRET) {
                None => None,
                Some(v) if v.len() >= MIN_CONSOLE_SECRET_BYTES => Some(Secret::new(v)),
                Some(v) => {
                    return Err(ConfigError {
                        var: ENV_CONSOLE_SECRET,
                        message: format!(
                            "{} bytes: use at least {MIN_CONSOLE_SECRET_BYTES} (e.g. openssl rand -hex 32)",
                            v.len()
                        ),
                    });
                }
            },
            grant_key: match non_empty(ENV_GRANT_KEY) {
                None => None,
                Some(v) => Some(
                    tuneplane_core::grant::GrantKey::parse(&v).map_err(|message| ConfigError {
                        var: ENV_GRANT_KEY,
                        message,
                    })?,
                ),
            },
            playground_pod_networks: match non_empty(ENV_PLAYGROUND_POD_CIDRS) {
                None => Vec::new(),
                Some(v) => {
                    crate::pod_network::parse_networks(&v).map_err(|message| ConfigError {
                        var: ENV_PLAYGROUND_POD_CIDRS,
                        message,
                    })?
                }
            },
        })
    }
}

fn parse_webhooks(json: &str) -> Result<BTreeMap<String, WebhookSource>, ConfigError> {
    crate::webhook_sources::parse_sources(json).map_err(|message| ConfigError {
        var: ENV_WEBHOOKS,
        message,
    })
}

fn namespace_value(var: &'static str, ns: String) -> Result<String, ConfigError> {
    if tuneplane_core::spec::is_dns_label(&ns, 63) {
        Ok(ns)
    } else {
        Err(ConfigError {
            var,
            message: format!(
                "namespace {ns:?} must be a DNS label of at most 63 characters (lowercase letters, digits, '-')"
            ),
        })
    }
}

fn parse_tenant_namespaces(json: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let fail = |message: String| ConfigError {
        var: ENV_TENANT_NAMESPACES,
        message,
    };
    let map: BTreeMap<String, String> = serde_json::from_str(json).map_err(|e| {
        fail(format!(
            "expected a JSON object of tenant to namespace, e.g. {{\"acme\": \"ml-acme\"}}: {e}"
        ))
    })?;
    for (tenant, ns) in &map {
        if let Err(e) = tuneplane_core::ids::TenantId::parse(tenant.as_str()) {
            return Err(fail(format!("tenant {tenant:?} must be {}", e.rule)));
        }
        namespace_value(ENV_TENANT_NAMESPACES, ns.clone())
            .map_err(|e| fail(format!("tenant {tenant}: {}", e.message)))?;
    }
    Ok(map)
}

/// `TUNEPLANE_GPU_PRICES`: a JSON object of series (label values) to a price per GPU-hour
/// (finite, 0 or more).
pub fn parse_gpu_prices(json: &str) -> Result<BTreeMap<String, f64>, ConfigError> {
    let err = |message: String| ConfigError {
        var: ENV_GPU_PRICES,
        message,
    };
    let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(json).map_err(|e| {
        err(format!(
            "expected a JSON object of series to the price of a GPU-hour, e.g. {{\"h200\": 4.5}}: {e}"
        ))
    })?;
    map.into_iter()
        .map(|(series, v)| {
            if !tuneplane_core::ids::is_dns_label(&series, 63) {
                return Err(err(format!(
                    "series {series:?}: use the series' node label value (lower-case letters, digits and '-')"
                )));
            }
            match v.as_f64() {
                Some(p) if p.is_finite() && p >= 0.0 => Ok((series, p)),
                _ => Err(err(format!(
                    "series {series}: the price {v} is not a number of 0 or more"
                ))),
            }
        })
        .collect()
}

fn parse_event_senders(
    json: &str,
) -> Result<BTreeMap<String, tuneplane_core::ids::TenantId>, ConfigError> {
    let fail = |message: String| ConfigError {
        var: ENV_EVENT_SENDERS,
        message,
    };
    let map: BTreeMap<String, String> = serde_json::from_str(json).map_err(|e| {
        fail(format!(
            "expected a JSON object of account id to tenant, e.g. {{\"111122223333\": \"acme\"}}: {e}"
        ))
    })?;
    let mut senders = BTreeMap::new();
    for (account, tenant) in map {
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(format!(
                "{account:?} is not an AWS account id (12 digits)"
            )));
        }
        match tuneplane_core::ids::TenantId::parse(tenant.as_str()) {
            Ok(id) => senders.insert(account, id),
            Err(e) => {
                return Err(fail(format!(
                    "tenant {tenant:?} of account {account} must be {}",
                    e.rule
                )));
            }
        };
    }
    Ok(senders)
}

/// The storage limits from [`ENV_OUTPUT_OBJECT_MAX_BYTES`] (`object`) and
/// [`ENV_TENANT_STORAGE_BYTES`] (`tenant`, `off` for none); unset: the defaults.
fn storage_limits(
    object: Option<String>,
    tenant: Option<String>,
) -> Result<tuneplane_core::storage::StorageLimits, ConfigError> {
    use tuneplane_core::storage::{StorageLimits, parse_bytes};
    let mut limits = StorageLimits::default();
    if let Some(v) = object {
        limits.object_max_bytes = parse_bytes(v.trim()).map_err(|message| ConfigError {
            var: ENV_OUTPUT_OBJECT_MAX_BYTES,
            message,
        })?;
    }
    match tenant.as_deref().map(str::trim) {
        None => {}
        Some(v) if v.eq_ignore_ascii_case("off") => limits.tenant_bytes = None,
        Some(v) => {
            limits.tenant_bytes = Some(parse_bytes(v).map_err(|message| ConfigError {
                var: ENV_TENANT_STORAGE_BYTES,
                message: format!("{message}, or off"),
            })?);
        }
    }
    Ok(limits)
}

/// A per-tenant limit from `var` (`raw`, unset: `default`): a whole number from 1 to 100.
fn per_tenant_limit(
    var: &'static str,
    raw: Option<String>,
    default: u32,
) -> Result<u32, ConfigError> {
    match raw {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| ConfigError {
                var,
                message: format!("{v:?} is not a whole number from 1 to 100"),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn storage_limits_parse_sizes_and_off_and_bad_values_name_the_variable() {
        let base = [(ENV_TABLE, "t"), (ENV_BUCKET, "b")];
        let limits = parse(&base).unwrap().submit.storage;
        assert_eq!(limits, tuneplane_core::storage::StorageLimits::default());
        let mut vars = base.to_vec();
        vars.push((ENV_OUTPUT_OBJECT_MAX_BYTES, "5Gi"));
        vars.push((ENV_TENANT_STORAGE_BYTES, "off"));
        let limits = parse(&vars).unwrap().submit.storage;
        assert_eq!(
            (limits.object_max_bytes, limits.tenant_bytes),
            (5 << 30, None)
        );
        let mut vars = base.to_vec();
        vars.push((ENV_TENANT_STORAGE_BYTES, "1000000"));
        assert_eq!(
            parse(&vars).unwrap().submit.storage.tenant_bytes,
            Some(1_000_000)
        );
        for (var, bad) in [
            (ENV_OUTPUT_OBJECT_MAX_BYTES, "big"),
            (ENV_OUTPUT_OBJECT_MAX_BYTES, "0"),
            (ENV_TENANT_STORAGE_BYTES, "-1Ti"),
        ] {
            let mut vars = base.to_vec();
            vars.push((var, bad));
            let err = parse(&vars).err();
            assert_eq!(err.as_ref().map(|e| e.var), Some(var), "{bad}");
            assert!(err.is_some_and(|e| e.to_string().contains(bad)), "{bad}");
        }
    }

    #[test]
    fn table_without_bucket_names_the_missing_variable() {
        let err = parse(&[(ENV_TABLE, "jobs")]).err().map(|e| e.var);
        assert_eq!(err, Some(ENV_BUCKET));
    }

    #[test]
    fn a_console_secret_is_kept_secret_and_a_short_one_names_the_variable() {
        let base = [(ENV_TABLE, "t"), (ENV_BUCKET, "b")];
        assert!(parse(&base).map(|c| c.console_secret).ok() == Some(None));
        let long = "s".repeat(MIN_CONSOLE_SECRET_BYTES);
        let set = parse(&[base[0], base[1], (ENV_CONSOLE_SECRET, long.as_str())]).ok();
        let secret = set.and_then(|c| c.console_secret);
        assert_eq!(secret.as_ref().map(Secret::expose), Some(long.as_str()));
        assert!(!format!("{secret:?}").contains(&long), "redacted in Debug");
        let err = parse(&[base[0], base[1], (ENV_CONSOLE_SECRET, "short")]).err();
        assert_eq!(err.map(|e| e.var), Some(ENV_CONSOLE_SECRET));
    }

    #[test]
    fn bad_deadline_names_the_variable() {
        let vars = [
            (ENV_DATA_DIR, "/tmp/x"),
            (ENV_BLOB_SECRET, "s"),
            (ENV_RUN, "soon"),
        ];
        assert_eq!(parse(&vars).err().map(|e| e.var), Some(ENV_RUN));
    }

    #[test]
    fn webhook_sources_parse_and_short_secrets_are_refused() {
        let ok = r#"{"github": {"secret": "0123456789abcdef", "tenant": "acme", "scheme": "hub"}}"#;
        let vars = [(ENV_TABLE, "t"), (ENV_BUCKET, "b"), (ENV_WEBHOOKS, ok)];
        let config = parse(&vars).unwrap();
        assert_eq!(config.webhooks["github"].tenant, "acme");
        let short = r#"{"github": {"secret": "x", "tenant": "acme", "scheme": "hub"}}"#;
        let vars = [(ENV_TABLE, "t"), (ENV_BUCKET, "b"), (ENV_WEBHOOKS, short)];
        assert_eq!(parse(&vars).err().map(|e| e.var), Some(ENV_WEBHOOKS));
    }

    #[test]
    fn event_senders_map_accounts_to_tenants_and_bad_entries_name_the_fix() {
        let vars = [
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_EVENT_SENDERS, r#"{"111122223333": "acme"}"#),
        ];
        let config = parse(&vars).unwrap();
        assert_eq!(config.event_senders["111122223333"], "acme");
        for (bad, needle) in [
            (r#"{"1111": "acme"}"#, "12 digits"),
            (r#"{"111122223333": "Acme"}"#, "1-40 lower-case"),
            (r#"["acme"]"#, "account id to tenant"),
        ] {
            let vars = [
                (ENV_TABLE, "t"),
                (ENV_BUCKET, "b"),
                (ENV_EVENT_SENDERS, bad),
            ];
            let err = parse(&vars).err();
            assert_eq!(
                err.as_ref().map(|e| e.var),
                Some(ENV_EVENT_SENDERS),
                "{bad}"
            );
            let message = err.map(|e| e.message).unwrap_or_default();
            assert!(message.contains(needle), "{bad}: {message}");
        }
    }

    #[test]
    fn gpu_prices_parse_and_bad_entries_name_the_series_and_the_fix() {
        let base = [(ENV_TABLE, "t"), (ENV_BUCKET, "b")];
        let mut vars = base.to_vec();
        vars.push((ENV_GPU_PRICES, r#"{"h200": 4.5, "l40s": 0}"#));
        let prices = parse(&vars).unwrap().submit.gpu_prices;
        assert_eq!(prices.get("h200"), Some(&4.5));
        assert_eq!(prices.get("l40s"), Some(&0.0));
        assert!(parse(&base).unwrap().submit.gpu_prices.is_empty());
        for (bad, needle) in [
            (
                r#"{"h200": -1}"#,
                "series h200: the price -1 is not a number of 0 or more",
            ),
            (r#"{"h200": "cheap"}"#, "series h200"),
            (
                r#"{"H200": 1}"#,
                "series \"H200\": use the series' node label value",
            ),
            (
                r#"[4.5]"#,
                "JSON object of series to the price of a GPU-hour",
            ),
        ] {
            let mut vars = base.to_vec();
            vars.push((ENV_GPU_PRICES, bad));
            let err = parse(&vars).err();
            assert_eq!(err.as_ref().map(|e| e.var), Some(ENV_GPU_PRICES), "{bad}");
            let message = err.map(|e| e.message).unwrap_or_default();
            assert!(message.contains(needle), "{bad}: {message}");
        }
    }

    #[test]
    fn tenant_namespaces_parse_and_bad_entries_name_the_fix() {
        let base = [(ENV_TABLE, "t"), (ENV_BUCKET, "b")];
        let mut vars = base.to_vec();
        vars.push((ENV_TENANT_NAMESPACES, r#"{"acme": "ml-acme"}"#));
        vars.push((ENV_NAMESPACE, "shared-jobs"));
        let config = parse(&vars).unwrap();
        let defaults = &config.submit.defaults;
        assert_eq!(defaults.namespace_for("acme"), "ml-acme");
        assert_eq!(defaults.namespace_for("other"), "shared-jobs");
        for (bad, needle) in [
            (
                r#"{"acme": "ML_Acme"}"#,
                "tenant acme: namespace \"ML_Acme\" must be a DNS label",
            ),
            (r#"{"Acme": "ml"}"#, "1-40 lower-case"),
            (r#"["acme"]"#, "tenant to namespace"),
        ] {
            let mut vars = base.to_vec();
            vars.push((ENV_TENANT_NAMESPACES, bad));
            let err = parse(&vars).err();
            assert_eq!(
                err.as_ref().map(|e| e.var),
                Some(ENV_TENANT_NAMESPACES),
                "{bad}"
            );
            let message = err.map(|e| e.message).unwrap_or_default();
            assert!(message.contains(needle), "{bad}: {message}");
        }
        let mut vars = base.to_vec();
        vars.push((ENV_NAMESPACE, "Jobs!"));
        assert_eq!(parse(&vars).err().map(|e| e.var), Some(ENV_NAMESPACE));
    }

    const BLOB_SECRET: &str = "BLOBSECRET-aaaaaaaaaaaaaaaa";
    const HOOK_SECRET: &str = "HOOKSECRET-bbbbbbbbbbbbbbbb";

    fn assert_clean(what: &str, text: &str) {
        for secret in [BLOB_SECRET, HOOK_SECRET, "BLOBSECRET", "HOOKSECRET"] {
            assert!(!text.contains(secret), "{what} shows a secret: {text}");
        }
    }

    #[tokio::test]
    async fn no_config_type_error_or_state_shows_a_secret() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().display().to_string();
        let hooks = format!(
            r#"{{"github": {{"secret": "{HOOK_SECRET}", "tenant": "acme", "scheme": "hub"}}}}"#
        );
        let vars = [
            (ENV_DATA_DIR, data.as_str()),
            (ENV_BLOB_SECRET, BLOB_SECRET),
            (ENV_WEBHOOKS, hooks.as_str()),
        ];
        let config = parse(&vars).unwrap();
        assert_eq!(config.webhooks["github"].secret.expose(), HOOK_SECRET);
        assert_clean("Config", &format!("{config:?} {config:#?}"));
        assert_clean("Backend", &format!("{:?}", config.backend));
        assert_clean("WebhookSource", &format!("{:?}", config.webhooks["github"]));
        assert_clean("SubmitConfig", &format!("{:?}", config.submit));

        // Wrongly shaped sources: the startup error names the source, never the secret.
        for bad in [
            format!(r#"{{"github": "{HOOK_SECRET}"}}"#),
            format!(
                r#"{{"github": {{"secret": "{HOOK_SECRET}", "tenant": "{HOOK_SECRET}", "scheme": "hub"}}}}"#
            ),
            format!(
                r#"{{"github": {{"secret": {{"v": "{HOOK_SECRET}"}}, "tenant": "acme", "scheme": "hub"}}}}"#
            ),
            format!(r#""{HOOK_SECRET}""#),
            format!(r#"{{"github": {{"secret": "{HOOK_SECRET}"#),
        ] {
            let vars = [
                (ENV_DATA_DIR, data.as_str()),
                (ENV_BLOB_SECRET, BLOB_SECRET),
                (ENV_WEBHOOKS, bad.as_str()),
            ];
            let err = parse(&vars).err().unwrap_or_else(|| panic!("{bad} parsed"));
            assert_eq!(err.var, ENV_WEBHOOKS);
            assert_clean("ConfigError", &format!("{err} {err:?}"));
        }

        let (jobs, blobs) = crate::runtime::stores(&config).await.unwrap();
        let state = crate::runtime::state_with(&config, jobs, blobs);
        assert_clean("AppState", &format!("{state:?} {state:#?}"));
    }
}
