//! `playground create|list|delete`: short-lived vLLM pods reached through the Kubernetes API proxy.
//!
//! `list` shows each live playground's state with the reason the reconciler recorded (and the
//! Kubernetes message under the table) and its API-proxy URL; deleted playgrounds leave it at once.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::output::{age, duration, now_ms, print_table};
use crate::client::{Api, Output};

/// Playground subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Start a playground serving MODEL on a GPU series.
    Create {
        /// Model to serve (a Hugging Face id or a path the image knows).
        model: String,
        /// GPU series.
        #[arg(long)]
        series: String,
        /// GPUs for the pod.
        #[arg(long, default_value_t = 1)]
        gpus: u32,
        /// Lifetime in seconds; the pod is reclaimed afterwards.
        #[arg(long)]
        ttl_seconds: Option<u64>,
    },
    /// List your playgrounds: state and reason, time left, API-proxy URL.
    List,
    /// Delete a playground now (it leaves the list at once; its pod goes within a pass).
    Delete {
        /// Playground id.
        id: String,
    },
}

/// Runs a playground subcommand. A refused request (unknown series, more GPUs than the largest
/// node of the series, ...) is an error: it is printed with every field and the command exits 1.
pub async fn run(api: &Api, out: Output, cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Create {
            model,
            series,
            gpus,
            ttl_seconds,
        } => {
            let mut body = json!({"model": model, "series": series, "gpus": gpus});
            if let Some(t) = ttl_seconds {
                body["ttl_seconds"] = json!(t);
            }
            let created: Value = api.post("/playgrounds", &body, &[]).await?.1;
            if out == Output::Json {
                println!("{created}");
            } else {
                for line in created_lines(&created) {
                    println!("{line}");
                }
            }
        }
        Command::List => {
            let value: Value = api.get("/playgrounds").await?;
            if out == Output::Json {
                println!("{value}");
            } else {
                let items = value["playgrounds"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    println!("no playgrounds");
                } else {
                    print_table(&HEADERS, &rows(&items, now_ms()));
                    for line in reason_lines(&items) {
                        println!("{line}");
                    }
                }
            }
        }
        Command::Delete { id } => {
            let deleted: Value = api.delete(&format!("/playgrounds/{id}")).await?;
            if out == Output::Json {
                println!("{deleted}");
            } else {
                println!(
                    "deleted playground {}",
                    deleted["id"].as_str().unwrap_or(&id)
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Columns of `playground list`.
pub const HEADERS: [&str; 7] = [
    "ID",
    "MODEL",
    "GPUS",
    "STATE",
    "TTL LEFT",
    "PROXY URL",
    "CREATED",
];

fn text<'a>(p: &'a Value, key: &str, or: &'a str) -> &'a str {
    p[key].as_str().unwrap_or(or)
}

/// `Pending (InsufficientGpu)`, `Running`.
pub fn state_of(p: &Value) -> String {
    let state = text(p, "state", "-");
    match p["reason"].as_str() {
        Some(r) => format!("{state} ({r})"),
        None => state.to_owned(),
    }
}

/// The rows of `playground list` at `now`.
pub fn rows(items: &[Value], now: i64) -> Vec<Vec<String>> {
    items
        .iter()
        .map(|p| {
            vec![
                text(p, "id", "-").into(),
                text(p, "model", "-").into(),
                format!("{}×{}", text(p, "series", "-"), p["gpus"]),
                state_of(p),
                p["expires_at_ms"]
                    .as_i64()
                    .map_or("-".into(), |e| duration(e - now)),
                text(p, "proxy_path", "(no pod yet)").into(),
                p["created_at_ms"].as_i64().map_or("-".into(), age),
            ]
        })
        .collect()
}

/// Under the table, why each playground that does not run is in its state (the Kubernetes
/// message verbatim).
pub fn reason_lines(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter(|p| p["state"] != "Running")
        .filter_map(|p| {
            Some(format!(
                "{}: {}",
                text(p, "id", "-"),
                p["message"].as_str()?
            ))
        })
        .collect()
}

/// What `playground create` prints: the id, what was asked, and any note.
pub fn created_lines(p: &Value) -> Vec<String> {
    let id = text(p, "id", "-");
    let mut lines = vec![format!(
        "created playground {id}: {} on {}×{}, {} left",
        text(p, "model", "-"),
        text(p, "series", "-"),
        p["gpus"],
        p["expires_at_ms"]
            .as_i64()
            .zip(p["created_at_ms"].as_i64())
            .map_or("-".into(), |(e, c)| duration(e - c)),
    )];
    for note in p["notes"].as_array().into_iter().flatten() {
        lines.push(format!("note: {}", note.as_str().unwrap_or_default()));
    }
    lines.push("follow it with `tuneplane playground list` (state, reason, proxy URL)".into());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_rows_show_state_reason_and_proxy_url_and_the_messages_follow() {
        let items = vec![
            json!({"id": "pg-1", "model": "qwen", "series": "h200", "gpus": 2,
                   "state": "Pending", "reason": "InsufficientGpu",
                   "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
                   "proxy_path": "/api/v1/namespaces/ns/pods/pg-1:8000/proxy/",
                   "expires_at_ms": 600_000, "created_at_ms": 0}),
            json!({"id": "pg-2", "model": "llama", "series": "l40s", "gpus": 1,
                   "state": "Running", "reason": null, "message": "pod pg-2 runs on node l40s-0",
                   "proxy_path": "/api/v1/namespaces/ns/pods/pg-2:8000/proxy/",
                   "expires_at_ms": 60_000, "created_at_ms": 0}),
            json!({"id": "pg-3", "model": "m", "series": "l40s", "gpus": 1,
                   "state": "Creating", "message": "waiting for the reconciler to create the pod",
                   "proxy_path": null, "expires_at_ms": 60_000, "created_at_ms": 0}),
        ];
        let rows = rows(&items, 0);
        assert_eq!(
            rows[0][..5],
            [
                "pg-1",
                "qwen",
                "h200×2",
                "Pending (InsufficientGpu)",
                "10m00s"
            ]
        );
        assert_eq!(rows[0][5], "/api/v1/namespaces/ns/pods/pg-1:8000/proxy/");
        assert_eq!(rows[1][3], "Running");
        assert_eq!(rows[2][5], "(no pod yet)");
        assert_eq!(
            reason_lines(&items),
            [
                "pg-1: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
                "pg-3: waiting for the reconciler to create the pod"
            ]
        );
    }

    #[test]
    fn create_says_what_was_made_and_passes_notes_on() {
        let p = json!({"id": "pg-1", "model": "qwen", "series": "h200", "gpus": 1,
                       "created_at_ms": 0, "expires_at_ms": 3_600_000,
                       "notes": ["fleet fit not checked: no capacity snapshot yet"]});
        let lines = created_lines(&p);
        assert_eq!(
            lines[0],
            "created playground pg-1: qwen on h200×1, 1h00m left"
        );
        assert_eq!(
            lines[1],
            "note: fleet fit not checked: no capacity snapshot yet"
        );
    }
}
