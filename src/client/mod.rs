//! A small typed client of the TunePlane HTTP API (`/v1`), used by the CLI's client commands.

pub mod pack;

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Where the API is and who calls it.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientArgs {
    /// Base URL of the API (the `tuneplane dev` banner prints it).
    #[arg(
        long,
        env = "TUNEPLANE_API",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub api: String,
    /// API key (`Authorization: Bearer ...`).
    #[arg(long, env = "TUNEPLANE_API_KEY", hide_env_values = true, global = true)]
    pub key: Option<String>,
    /// Output format: human tables or JSON for scripts.
    #[arg(long, short = 'o', value_enum, default_value = "table", global = true)]
    pub output: Output,
}

/// Output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Human-readable tables.
    Table,
    /// JSON, one document per command.
    Json,
    /// CSV with a header line (`usage`, `admin usage`); the other commands print their table.
    Csv,
}

/// An error reply of the TunePlane API, as the server described it (status, code, message).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.plain())]
pub struct ErrorReply {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code.
    pub code: String,
    /// What to fix.
    pub message: String,
    /// Field errors and the like, pre-formatted (empty when none).
    pub details: String,
}

impl ErrorReply {
    /// What the user reads: a refused key in plain words (what to check), anything else as the
    /// server said it with its status and code for scripts and bug reports.
    fn plain(&self) -> String {
        if self.status == StatusCode::UNAUTHORIZED && self.code == "unauthenticated" {
            return "the API did not accept the API key (unknown, revoked or mistyped): check \
                    --key / TUNEPLANE_API_KEY (`tuneplane dev` prints its key)"
                .to_owned();
        }
        format!(
            "{} ({}, {}){}",
            self.message, self.status, self.code, self.details
        )
    }
}

/// Checks `--api` before anything is sent: an absolute `http://` or `https://` URL.
pub fn check_api_url(api: &str) -> anyhow::Result<()> {
    let hint = |why: &str| {
        let bare = api.trim_start_matches("//");
        anyhow::anyhow!(
            "--api / TUNEPLANE_API {api:?} {why}: give the whole URL, like http://{bare}"
        )
    };
    if !api.contains("://") {
        return Err(hint("has no http:// or https:// scheme"));
    }
    match reqwest::Url::parse(api) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => {
            Err(hint("is neither http:// nor https://"))
        }
        Ok(url) if url.host().is_none() => Err(hint("names no host")),
        Ok(_) => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "--api / TUNEPLANE_API {api:?} is not a URL ({e}): give one like http://127.0.0.1:8080"
        )),
    }
}

/// A client of one API base URL (`…/v1`) with one API key; cheap to clone (one connection pool).
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Api {
    /// A client for `args`.
    pub fn new(args: &ClientArgs) -> anyhow::Result<Self> {
        check_api_url(&args.api)?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?;
        let base = args.api.trim_end_matches('/').to_string();
        let base = if base.ends_with("/v1") {
            base
        } else {
            format!("{base}/v1")
        };
        Ok(Self {
            http,
            base,
            key: args.key.clone(),
        })
    }

    /// The API key, or what to do without one.
    pub fn require_key(&self) -> anyhow::Result<&str> {
        match self.key.as_deref().map(str::trim) {
            Some(key) if !key.is_empty() => Ok(key),
            _ => {
                bail!("no API key: pass --key or set TUNEPLANE_API_KEY (tuneplane dev prints one)")
            }
        }
    }

    fn request(&self, method: Method, path: &str) -> anyhow::Result<reqwest::RequestBuilder> {
        let key = self.require_key()?;
        Ok(self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key))
    }

    /// Sends a request and decodes the JSON answer, turning error bodies into [`ErrorReply`].
    pub async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> anyhow::Result<(StatusCode, T)> {
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .context("the API closed the connection")?;
        if !status.is_success() {
            return Err(api_error(status, &bytes).into());
        }
        let value = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "unexpected answer from the API ({status}): {}",
                String::from_utf8_lossy(&bytes)
            )
        })?;
        Ok((status, value))
    }

    /// Why a request got no answer, with what to check.
    fn unreachable(&self, e: &reqwest::Error) -> anyhow::Error {
        let why = if e.is_connect() {
            "nothing answered (connection refused or no route)"
        } else if e.is_timeout() {
            "it did not answer in time"
        } else {
            "the connection failed"
        };
        anyhow::anyhow!(
            "cannot reach the API at {}: {why}; is `tuneplane dev` running? check TUNEPLANE_API (or --api)",
            self.base.trim_end_matches("/v1")
        )
    }

    /// GET `path` (relative to `/v1`) and decode the JSON answer; an error answer becomes an
    /// [`ErrorReply`], no key a message saying how to pass one.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Ok(self.send(self.request(Method::GET, path)?).await?.1)
    }

    /// GET `path` for a command that prints it: with `-o json` the answer is printed as it came and
    /// `None` returned (the command is done); otherwise the answer, for a table.
    pub async fn get_or_print(&self, path: &str, out: Output) -> anyhow::Result<Option<Value>> {
        let body: Value = self.get(path).await?;
        if out == Output::Json {
            println!("{body}");
            return Ok(None);
        }
        Ok(Some(body))
    }

    /// POST a JSON body to `path`; returns status and answer.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(StatusCode, T)> {
        let mut req = self
            .request(Method::POST, path)?
            .header("content-type", "application/json")
            .body(body.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req).await
    }

    /// DELETE `path` (relative to `/v1`) and decode the JSON answer, as [`Api::get`].
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Ok(self.send(self.request(Method::DELETE, path)?).await?.1)
    }

    /// A plain HTTP request outside the API (presigned URLs carry their own authorisation).
    pub fn raw(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        self.http.request(method, url)
    }
}

fn api_error(status: StatusCode, body: &[u8]) -> ErrorReply {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let e = &v["error"];
    let message = e["message"].as_str().map_or_else(
        || String::from_utf8_lossy(body).trim().to_string(),
        str::to_string,
    );
    let details = match &e["details"] {
        Value::Array(items) if !items.is_empty() => {
            let lines: Vec<String> = items
                .iter()
                .map(|d| match (d["path"].as_str(), d["message"].as_str()) {
                    (Some(p), Some(m)) if !p.is_empty() => format!("\n  {p}: {m}"),
                    (_, Some(m)) => format!("\n  {m}"),
                    _ => format!("\n  {d}"),
                })
                .collect();
            lines.concat()
        }
        _ => String::new(),
    };
    ErrorReply {
        status,
        code: e["code"].as_str().unwrap_or("error").to_string(),
        message,
        details,
    }
}
