//! Handlers of the `/v1` routes, one module per resource.

pub mod jobs;
pub mod live;
pub mod misc;
pub mod outputs;
pub mod playground_proxy;
pub mod playgrounds;
pub mod quota;
pub mod submission;
