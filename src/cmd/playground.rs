//! `playground create|list|delete`: short-lived vLLM pods reached through the Kubernetes API proxy.

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
    /// List your playgrounds.
    List,
    /// Delete a playground now.
    Delete {
        /// Playground id.
        id: String,
    },
}

/// Runs a playground subcommand.
pub async fn run(api: &Api, out: Output, cmd: Command) -> anyhow::Result<ExitCode> {
    let value: Value = match cmd {
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
            api.post("/playgrounds", &body, &[]).await?.1
        }
        Command::List => api.get("/playgrounds").await?,
        Command::Delete { id } => api.delete(&format!("/playgrounds/{id}")).await?,
    };
    if out == Output::Json {
        println!("{value}");
        return Ok(ExitCode::SUCCESS);
    }
    let items: Vec<Value> = match value.get("playgrounds") {
        Some(Value::Array(list)) => list.clone(),
        _ => vec![value],
    };
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|p| {
            let left = p["expires_at_ms"]
                .as_i64()
                .map_or("-".into(), |e| duration(e - now_ms()));
            vec![
                p["id"].as_str().unwrap_or("-").into(),
                p["model"].as_str().unwrap_or("-").into(),
                format!("{}×{}", p["series"].as_str().unwrap_or("-"), p["gpus"]),
                p["pod_name"].as_str().unwrap_or("(starting)").into(),
                left,
                p["created_at_ms"].as_i64().map_or("-".into(), age),
            ]
        })
        .collect();
    print_table(
        &["ID", "MODEL", "GPUS", "POD", "TTL LEFT", "CREATED"],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}
