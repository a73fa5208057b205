//! `tuneplane subscriptions add|list|delete|secret`: the tenant's standing job-event callbacks
//! and the secret their deliveries are signed with (through the API).

use std::process::ExitCode;

use serde_json::{Value, json};

use super::output::print_table;
use crate::client::{Api, Output};

/// Subscription subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Send every job's events to URL (https://, a public address).
    Add {
        /// Where deliveries go.
        url: String,
        /// Comma-separated events: queued, admitted, running, succeeded, failed, stopped,
        /// requeued, or terminal (the three ends). Default: every event.
        #[arg(long, value_delimiter = ',')]
        events: Vec<String>,
        /// Body shape: json, or slack for a Slack incoming webhook.
        #[arg(long, default_value = "json")]
        format: String,
    },
    /// List your tenant's subscriptions.
    List,
    /// Delete a subscription.
    Delete {
        /// Subscription id (`sub_…`).
        id: String,
    },
    /// Print the secret deliveries are signed with, and how to check a signature.
    Secret {
        /// Replace it first (receivers must switch to the new one).
        #[arg(long)]
        rotate: bool,
    },
}

/// Runs a subscriptions subcommand. A refused request is an error naming each field.
pub async fn run(api: &Api, out: Output, cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Add {
            url,
            events,
            format,
        } => {
            let body = json!({"url": url, "events": events, "format": format});
            let (_, made): (_, Value) = api.post("/subscriptions", &body, &[]).await?;
            if out == Output::Json {
                println!("{made}");
            } else {
                println!(
                    "subscription {} sends {} to {} as {}",
                    made["id"].as_str().unwrap_or("?"),
                    list(&made["events"]),
                    made["url"].as_str().unwrap_or("?"),
                    made["format"].as_str().unwrap_or("json"),
                );
                if let Some(note) = made["note"].as_str() {
                    println!("note: {note}");
                }
            }
        }
        Command::List => {
            let Some(body) = api.get_or_print("/subscriptions", out).await? else {
                return Ok(ExitCode::SUCCESS);
            };
            let subs = body["subscriptions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if subs.is_empty() {
                println!("no subscriptions (tuneplane subscriptions add URL)");
            } else {
                let rows: Vec<Vec<String>> = subs
                    .iter()
                    .map(|s| {
                        vec![
                            s["id"].as_str().unwrap_or("").to_owned(),
                            s["url"].as_str().unwrap_or("").to_owned(),
                            list(&s["events"]),
                            s["format"].as_str().unwrap_or("").to_owned(),
                        ]
                    })
                    .collect();
                print_table(&["ID", "URL", "EVENTS", "FORMAT"], &rows);
                println!(
                    "{} of at most {}",
                    subs.len(),
                    body["limit"].as_u64().unwrap_or(0)
                );
            }
        }
        Command::Delete { id } => {
            let done: Value = api.delete(&format!("/subscriptions/{id}")).await?;
            if out == Output::Json {
                println!("{done}");
            } else {
                println!("subscription {id} deleted");
            }
        }
        Command::Secret { rotate } => {
            let secret: Value = if rotate {
                api.post("/subscriptions/secret/rotate", &json!({}), &[])
                    .await?
                    .1
            } else {
                api.get("/subscriptions/secret").await?
            };
            if out == Output::Json {
                println!("{secret}");
            } else {
                println!("{}", secret["secret"].as_str().unwrap_or(""));
                eprintln!("{}", secret["scheme"].as_str().unwrap_or(""));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A JSON list of names as `a, b, c`.
fn list(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}
