//! Handlers of the `/v1` routes, one module per resource.

pub mod audit;
pub mod jobs;
pub mod live;
pub mod misc;
pub mod outputs;
pub mod pipelines;
pub mod playground_proxy;
pub mod playgrounds;
pub mod quota;
pub mod submission;
pub mod subscriptions;
pub mod usage;

use tuneplane_core::audit::{Actor, AuditSource};
use tuneplane_core::submit::Principal;

/// The caller of an API request as the actor of the changes it makes (the audit trail).
pub fn api_actor(principal: &Principal) -> Actor {
    principal.actor(AuditSource::Api, &crate::error::current_request_id())
}
