//! The embedded store's implementation of each record kind's trait (`tuneplane_core::store`),
//! a file per kind, as in the DynamoDB store.

mod audit;
mod jobs;
mod keys;
mod outbox;
mod playgrounds;
mod quotas;
mod schedules;
mod subscriptions;
