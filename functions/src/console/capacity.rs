//! The capacity page: the very snapshot the reconciler published and admission planned against
//! (the value `GET /v1/capacity` returns), per GPU series and per node, with the signed-in
//! tenant's usage against its quota ("Your team", the figures of `GET /v1/quota`). Other
//! tenants' usage is never rendered.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::ids::TenantId;
use tuneplane_core::quota_view::{QuotaView, describe_series, quota_view};

use super::layout::{ConsoleError, Nav, page, respond, table_head, time};
use super::view;
use super::viewer::Viewer;
use crate::state::AppState;

/// The snapshot from the store, decoded; `None` when none was published yet.
pub async fn snapshot(state: &AppState) -> Result<Option<CapacitySnapshot>, ConsoleError> {
    let Some(value) = state.submit.jobs().get_capacity().await? else {
        return Ok(None);
    };
    serde_json::from_value(value).map(Some).map_err(|e| {
        ConsoleError::BadRequest(format!("the stored capacity snapshot does not decode: {e}"))
    })
}

fn node_state(n: &NodeCapacity) -> &'static str {
    match (n.ready, n.cordoned) {
        (true, false) => "Ready",
        (true, true) => "Cordoned",
        (false, false) => "NotReady",
        (false, true) => "NotReady, cordoned",
    }
}

fn bar(used: u32, blocked: u32, total: u32) -> Markup {
    let (u, b) = (view::percent(used, total), view::percent(blocked, total));
    html! {
        div.bar role="img" aria-label=(format!("{used} used, {blocked} blocked of {total} GPUs")) {
            span.used style=(format!("width:{u}%")) {}
            span.blocked style=(format!("width:{b}%")) {}
        }
    }
}

fn limit_text(limit: Option<f64>, unit: &str) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |l| format!("{l:.1} {unit}"))
}

/// "Your team": the tenant's usage against its quota, per series, beside the fleet's totals.
fn team(view: &QuotaView) -> Markup {
    html! {
        section.team aria-labelledby="team-title" data-tenant=(view.tenant) {
            h2 id="team-title" { "Your team" }
            p {
                "Tenant " code { (view.tenant) } " · " (view.admitted_jobs) " admitted job"
                @if view.admitted_jobs != 1 { "s" }
                " · " (view.queued_jobs) " queued"
                @if (view.weight - 1.0).abs() > f64::EPSILON { " · fair-share weight " (view.weight) }
            }
            @if view.series.is_empty() && !view.cpu.is_relevant() {
                p.empty { "No quota: your team may use any free capacity." }
            }
            ul.team-series {
                @for s in &view.series {
                    li data-quota-series=(s.series) data-limit=(s.gpus_limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()))
                        data-admitted=(s.admitted_gpus) data-queued=(s.queued_gpus) {
                        strong { (s.series) } ": " (describe_series(s))
                        span.fleet { " · fleet: " (s.fleet_free_gpus) " of " (s.fleet_total_gpus) " GPUs free" }
                    }
                }
                @if view.cpu.is_relevant() {
                    @let c = &view.cpu;
                    li data-quota-series="cpu" {
                        strong { "CPU-only jobs" } ": "
                        (format!("{:.1} CPUs / {:.1} GiB admitted (limit {} / {}{}), {:.1} CPUs / {:.1} GiB queued",
                            c.admitted_cpus, c.admitted_memory_gb, limit_text(c.cpus_limit, "CPUs"),
                            limit_text(c.memory_gb_limit, "GiB"), if c.borrow { ", may borrow" } else { "" },
                            c.queued_cpus, c.queued_memory_gb))
                    }
                }
            }
        }
    }
}

/// The body of the capacity page for `tenant`.
pub async fn body(state: &AppState, tenant: &TenantId) -> Result<Markup, ConsoleError> {
    let snap = snapshot(state).await?;
    let own = state.submit.jobs().get_quota(tenant).await?;
    let quota = state.submit.config().default_quota.effective(tenant, own);
    let view = quota_view(tenant, quota.as_ref(), snap.as_ref());
    let now = (state.clock)();
    Ok(html! {
        h1 { "Capacity" }
        div data-refresh="10" id="capacity-region" {
        @match &snap {
            None => {
                p.empty role="status" { "No capacity snapshot yet: the reconciler has not published one." }
                (team(&view))
            },
            Some(s) => {
                @let taken = i64::try_from(s.taken_at_ms).unwrap_or(i64::MAX);
                p.snapshot-age {
                    "Snapshot taken " (time(taken, true)) " · age "
                    span id="snapshot-age" data-clock-start=(taken) { (view::duration(now - taken)) }
                    " · the same snapshot admission uses."
                }
                (team(&view))
                h2 { "GPU series" }
                p.legend aria-hidden="true" {
                    span.swatch.used {} " used " span.swatch.blocked {} " blocked (cordoned or NotReady) " span.swatch.free {} " free"
                }
                @if s.series.is_empty() { p.empty { "No GPU nodes." } }
                div.series-list {
                    @for (name, c) in &s.series {
                        section.series aria-labelledby=(format!("series-{name}")) data-series=(name)
                            data-total=(c.total_gpus) data-used=(c.used_gpus) data-free=(c.free_gpus)
                            data-blocked=(c.blocked_gpus) data-largest=(c.largest_free_block) data-nodes=(c.nodes) {
                            h3 id=(format!("series-{name}")) { (name) }
                            (bar(c.used_gpus, c.blocked_gpus, c.total_gpus.max(c.used_gpus + c.blocked_gpus + c.free_gpus)))
                            dl.figures {
                                dt { "Total" } dd.total { (c.total_gpus) }
                                dt { "Used" } dd.used { (c.used_gpus) }
                                dt { "Free" } dd.free { (c.free_gpus) }
                                dt { "Blocked" } dd.blocked { (c.blocked_gpus) }
                                dt { "Largest free block" } dd.largest { (c.largest_free_block) " GPUs on one node" }
                                dt { "Nodes" } dd.nodes { (c.nodes) }
                            }
                        }
                    }
                }
                h2 { "CPU" }
                p { (format!("{} schedulable nodes · {:.1} of {:.1} CPUs free · {:.1} of {:.1} GiB free · largest block {:.1} CPUs / {:.1} GiB",
                    s.cpu.nodes, s.cpu.free_cpus, s.cpu.total_cpus, s.cpu.free_memory_gb, s.cpu.total_memory_gb,
                    s.cpu.largest_free_cpus, s.cpu.largest_free_memory_gb)) }
                h2 { "Nodes" }
                table.nodes.cards {
                    (table_head("Nodes of the fleet", &["Node", "Series", "GPUs used / total", "Free GPUs", "CPUs used / total", "State"]))
                    tbody {
                        @for n in &s.nodes {
                            tr data-node=(n.name) class=(if n.schedulable() { "" } else { "blocked" }) {
                                td data-label="Node" { code { (n.name) } }
                                td data-label="Series" { (n.series.as_deref().unwrap_or("CPU only")) }
                                td data-label="GPUs used / total" { (n.gpus_used) " / " (n.gpus) }
                                td data-label="Free GPUs" { (n.free_gpus()) }
                                td data-label="CPUs used / total" { (format!("{:.1} / {:.1}", n.cpus_used, n.cpus)) }
                                td data-label="State" { (node_state(n)) }
                            }
                        }
                    }
                }
            }
        }
        }
    })
}

/// `GET /console/capacity`.
pub async fn page_route(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
) -> Result<Response, ConsoleError> {
    let body = body(&state, &viewer.principal.tenant).await?;
    Ok(respond(
        StatusCode::OK,
        page("Capacity", Some(&viewer), Nav::Capacity, body),
    ))
}
