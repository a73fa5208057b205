//! Job-event callbacks: what a job or a tenant subscribes to, the outbox that makes delivery
//! durable, where a delivery may go, and what it carries.
//!
//! The path of an event (docs/design.md §6, "Callbacks"):
//! 1. A state change is written with its platform event (`state-ADMITTED`, `submitted`,
//!    `attempt-1-requeued`, ...). The store derives an [`OutboxEntry`] from each such event
//!    ([`outbox::entries_for`]) and writes it in the same atomic write, so no crash separates a
//!    state change from its notice.
//! 2. The sender (in the reconciler) lists the outbox, fans each new entry out to its targets (the
//!    job's `notify` list and the tenant's subscriptions that want the event), delivers each due
//!    delivery signed with the tenant's callback secret, and records the outcome on the entry.
//!    An entry whose deliveries all ended is deleted.
//! 3. Deliveries of one job to one target go out in the order the job's writes made them; a
//!    failed one is retried with backoff ([`outbox::retry_delay_ms`]) for a day
//!    ([`outbox::GIVE_UP_AFTER_MS`]) and blocks the later ones to that target meanwhile.
//!
//! Delivery is at least once: a sender killed after the receiver answered and before the outcome
//! was written sends again, with the same event id ([`OutboxEntry::id`]), so receivers
//! deduplicate by it.
//!
//! What a callback may name (events, formats, URLs) lives below the job spec in [`crate::spec::notify`];
//! managing a tenant's subscriptions through the store is [`crate::control::subscriptions`].

pub mod outbox;
pub mod payload;
pub mod subscription;

pub use crate::spec::notify::{
    EventKind, Format, MAX_NOTIFY, MAX_URL_BYTES, Notify, event_names, parse_events,
};
pub use crate::spec::notify::{check_ip, check_url, target};
pub use outbox::{Delivery, DeliveryEnd, OutboxEntry, TargetRef};
pub use payload::{SIGNATURE_HEADER, body, sign, signature_header};
pub use subscription::{CallbackSecret, Subscription};
