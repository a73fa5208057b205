//! Human output: aligned tables, relative ages, clock durations.

use std::process::ExitCode;

use anyhow::Context;
use serde::de::DeserializeOwned;
use tuneplane_core::job::JobState;
use tuneplane_core::spec::JobSpec;

pub use crate::term::colour;

/// Exit code for a finished job.
pub fn exit_for(state: JobState) -> ExitCode {
    match state {
        JobState::Succeeded => ExitCode::SUCCESS,
        JobState::Stopped => ExitCode::from(4),
        _ => ExitCode::from(3),
    }
}

/// Whether stdout gets colour.
pub fn stdout_colour() -> bool {
    use std::io::IsTerminal;
    colour(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR"),
    )
}

/// `text` (already padded) in the colour of the job state it starts with: green SUCCEEDED, red
/// FAILED, yellow QUEUED/ADMITTED, blue RUNNING, dim STOPPED; unchanged without `on`.
pub fn paint_status(text: &str, on: bool) -> String {
    let code = match text.split_whitespace().next().unwrap_or_default() {
        "SUCCEEDED" => "32",
        "FAILED" => "31",
        "QUEUED" | "ADMITTED" => "33",
        "RUNNING" => "34",
        "STOPPED" => "2",
        _ => return text.to_owned(),
    };
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// One table row per item of the list under `key` of an API answer; `what` is the error's
/// context when the list does not parse (`unexpected job list`).
pub fn rows_of<T: DeserializeOwned>(
    answer: &serde_json::Value,
    key: &str,
    what: &'static str,
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<Vec<Vec<String>>> {
    let items: Vec<T> = serde_json::from_value(answer[key].clone()).context(what)?;
    Ok(items.iter().map(row).collect())
}

/// Prints rows under headers with columns padded to their widest cell.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    print_table_coloured(headers, rows, None);
}

/// [`print_table`], with the job states of column `status` coloured on a terminal.
pub fn print_table_coloured(headers: &[&str], rows: &[Vec<String>], status: Option<usize>) {
    let paint = status.is_some() && stdout_colour();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>, body: bool| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let padded = format!("{c:<w$}", w = widths[i]);
                if body && Some(i) == status {
                    paint_status(&padded, paint)
                } else {
                    padded
                }
            })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(headers.to_vec(), false);
    for row in rows {
        line(row.iter().map(String::as_str).collect(), true);
    }
}

pub use tuneplane_core::clock::now_ms;

/// Ends the process quietly when stdout is a closed pipe (`tuneplane logs -f J | head`), like
/// the `println!` panic hook in `main`; other write errors are ignored.
pub fn written(result: std::io::Result<()>) {
    if let Err(e) = result
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// `0.4s`, `42s`, `3m10s`, `2h05m`, `3d04h`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        // A short run is not `0s`.
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `12s ago`.
pub fn age(at_ms: i64) -> String {
    format!("{} ago", duration(now_ms() - at_ms))
}

/// Length of a clock that started at `from` and stopped at `to` (or runs until now); `-` if it never started.
pub fn clock(from: Option<i64>, to: Option<i64>) -> String {
    match from {
        None => "-".into(),
        Some(f) => duration(to.unwrap_or_else(now_ms) - f),
    }
}

/// `h200x2x8+l40sx1x4`, `cpu x1 (2 CPU, 4 GiB)`.
pub fn pools_of(spec: &JobSpec) -> String {
    let parts: Vec<String> = spec
        .pools
        .iter()
        .map(|p| match &p.series {
            Some(s) => format!("{s}×{}×{}", p.nodes, p.gpus_per_node),
            None => format!("cpu×{} ({} CPU, {} GiB)", p.nodes, p.cpus, p.memory_gb),
        })
        .collect();
    parts.join(" + ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_painted_only_when_asked() {
        assert_eq!(
            paint_status("FAILED (EntrypointFailed)", true),
            "\x1b[31mFAILED (EntrypointFailed)\x1b[0m"
        );
        assert_eq!(paint_status("RUNNING  ", false), "RUNNING  ");
        assert_eq!(paint_status("ready", true), "ready");
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
        assert!(colour(true, Some("".into())));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(4_000), "4s");
        assert_eq!(duration(190_000), "3m10s");
        assert_eq!(duration(7_500_000), "2h05m");
        assert_eq!(duration(-5), "0.0s");
        assert_eq!(duration(420), "0.4s");
        assert_eq!(clock(None, None), "-");
        assert_eq!(clock(Some(1_000), Some(61_000)), "1m00s");
    }
}
