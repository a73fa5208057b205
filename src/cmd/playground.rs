//! `playground create|list|chat|delete`: short-lived vLLM servers, admitted like jobs and reached
//! through TunePlane's own proxy with the user's API key.
//!
//! `list` shows each live playground's state with the reason recorded (the quota or capacity it
//! waits for, or the Kubernetes message, under the table) and its proxy path; deleted
//! playgrounds leave it at once. `chat` sends one message through the proxy.

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
    /// List your playgrounds: state and reason, time left, proxy path.
    List,
    /// Send one chat message to a running playground (through the API's proxy) and print the
    /// answer.
    Chat {
        /// Playground id.
        id: String,
        /// The message.
        message: String,
    },
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
        Command::Chat { id, message } => {
            let body = json!({"messages": [{"role": "user", "content": message}]});
            let path = format!("/playgrounds/{id}/proxy/v1/chat/completions");
            let answer: Value = api.post(&path, &body, &[]).await?.1;
            if out == Output::Json {
                println!("{answer}");
            } else {
                println!("{}", answer_text(&answer));
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
    "PROXY PATH",
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
                text(p, "proxy_path", "(not running yet)").into(),
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

/// The text of a chat completion's first choice, or the whole answer when it has none.
pub fn answer_text(answer: &Value) -> String {
    match answer["choices"][0]["message"]["content"].as_str() {
        Some(text) => text.to_owned(),
        None => answer.to_string(),
    }
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
    lines.push(
        "follow it with `tuneplane playground list` (state, reason, proxy path); once Running, `tuneplane playground chat ID \"hello\"`".into(),
    );
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
                   "proxy_path": "/v1/playgrounds/pg-1/proxy/",
                   "expires_at_ms": 600_000, "created_at_ms": 0}),
            json!({"id": "pg-2", "model": "llama", "series": "l40s", "gpus": 1,
                   "state": "Running", "reason": null, "message": "pod pg-2 runs on node l40s-0",
                   "proxy_path": "/v1/playgrounds/pg-2/proxy/",
                   "expires_at_ms": 60_000, "created_at_ms": 0}),
            json!({"id": "pg-3", "model": "m", "series": "l40s", "gpus": 1,
                   "state": "Queued", "reason": "QuotaExceeded",
                   "message": "tenant acme uses 8 of 8 h200 GPUs; this playground needs 8",
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
        assert_eq!(rows[0][5], "/v1/playgrounds/pg-1/proxy/");
        assert_eq!(rows[1][3], "Running");
        assert_eq!(rows[2][3], "Queued (QuotaExceeded)");
        assert_eq!(rows[2][5], "(not running yet)");
        assert_eq!(
            reason_lines(&items),
            [
                "pg-1: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
                "pg-3: tenant acme uses 8 of 8 h200 GPUs; this playground needs 8"
            ]
        );
    }

    #[test]
    fn chat_prints_the_first_choice_or_the_whole_answer() {
        let answer =
            json!({"choices": [{"message": {"role": "assistant", "content": "hi there"}}]});
        assert_eq!(answer_text(&answer), "hi there");
        let odd = json!({"object": "error"});
        assert_eq!(answer_text(&odd), odd.to_string());
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
