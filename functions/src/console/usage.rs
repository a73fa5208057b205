//! The usage page: what the signed-in tenant held over the last days, per UTC day (a bar each)
//! and per series, with the figures `GET /v1/usage` answers (the same computation over the same
//! job records). Other tenants' usage is never rendered.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;
use tuneplane_core::usage::{GroupBy, Row, report, tenant_slices};

use super::layout::{ConsoleError, Nav, page, respond, table_head};
use super::viewer::Viewer;
use crate::state::AppState;

/// Days shown without `?days=`.
pub const DEFAULT_DAYS: u32 = 7;
/// The most days one page shows.
pub const MAX_DAYS: u32 = 90;

/// Query of `GET /console/usage`.
#[derive(Debug, Deserialize)]
pub struct UsageQuery {
    /// How many days back from now (1..=90).
    pub days: Option<u32>,
}

fn hours(v: f64) -> String {
    format!("{v:.2}")
}

/// One bar per day, as wide as its GPU-hours against the busiest day's.
fn chart(days: &[(String, f64)]) -> Markup {
    let most = days.iter().map(|(_, h)| *h).fold(0.0_f64, f64::max);
    html! {
        table.usage-chart {
            (table_head("GPU-hours per UTC day", &["Day", "GPU-hours", ""]))
            tbody {
                @for (day, h) in days {
                    @let width = if most > 0.0 { (h / most * 100.0).round() as u32 } else { 0 };
                    tr data-day=(day) data-gpu-hours=(hours(*h)) {
                        td { (day) }
                        td.num { (hours(*h)) }
                        td {
                            div.bar role="img" aria-label=(format!("{} GPU-hours on {day}", hours(*h))) {
                                span.used style=(format!("width:{width}%")) {}
                            }
                        }
                    }
                }
            }
        }
    }
}

fn series_table(rows: &[Row]) -> Markup {
    let priced = rows.iter().any(|r| r.cost.is_some());
    html! {
        table.series-usage {
            (table_head("Usage per series", &["Series", "GPU-hours", "CPU-hours", "GiB-hours", if priced { "Cost" } else { "" }]))
            tbody {
                @for r in rows {
                    tr data-series=(r.series) data-gpu-hours=(hours(r.gpu_hours)) {
                        td { code { (r.series) } }
                        td.num { (hours(r.gpu_hours)) }
                        td.num { (hours(r.cpu_seconds / 3600.0)) }
                        td.num { (hours(r.memory_gb_seconds / 3600.0)) }
                        td.num { @if let Some(c) = r.cost { (format!("{c:.2}")) } }
                    }
                }
            }
        }
    }
}

/// `GET /console/usage?days=N`.
pub async fn page_route(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(q): Query<UsageQuery>,
) -> Result<Response, ConsoleError> {
    let days = q.days.unwrap_or(DEFAULT_DAYS);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(ConsoleError::BadRequest(format!(
            "days: {days} is out of range; give 1 to {MAX_DAYS}"
        )));
    }
    let now = (state.clock)();
    let from = now - i64::from(days) * 86_400_000;
    let tenant = &viewer.principal.tenant;
    let slices = tenant_slices(state.submit.jobs().as_ref(), tenant, from, now, now)
        .await
        .map_err(crate::error::ApiError::from)?;
    let prices = &state.submit.config().gpu_prices;
    let by_series = report(&slices, GroupBy::Series, prices);
    let mut per_day: BTreeMap<String, f64> = BTreeMap::new();
    // Every day of the window gets a bar, an idle one too.
    for d in 0..=days {
        let at = from + i64::from(d) * 86_400_000;
        if at <= now {
            per_day.insert(
                tuneplane_core::usage::day_name(at.div_euclid(86_400_000) * 86_400_000),
                0.0,
            );
        }
    }
    for r in report(&slices, GroupBy::Day, prices) {
        *per_day.entry(r.day.unwrap_or_default()).or_default() += r.gpu_hours;
    }
    let per_day: Vec<(String, f64)> = per_day.into_iter().collect();
    let total: f64 = by_series.iter().map(|r| r.gpu_hours).sum();
    let body = html! {
        h1 { "Usage" }
        p {
            "Tenant " code { (tenant) } ": " strong.total-gpu-hours { (hours(total)) } " GPU-hours over the last "
            (days) " day" @if days != 1 { "s" } ". Every attempt counts from its admission to its end, failed and requeued ones too. "
            a href="/console/usage?days=30" { "30 days" } " · " a href="/console/usage?days=7" { "7 days" } " · "
            a href="/console/usage?days=1" { "1 day" }
        }
        (chart(&per_day))
        @if by_series.is_empty() {
            p { "No usage in this window." }
        } @else {
            (series_table(&by_series))
        }
        p.legend { "The same figures: " code { "tuneplane usage --since " (days) "d" } " or " code { "GET /v1/usage?from=" (days) "d" } "." }
    };
    Ok(respond(
        StatusCode::OK,
        page("Usage", Some(&viewer), Nav::Usage, body),
    ))
}
