//! Job-event callbacks, the whole feature in one place: what a callback may name
//! ([`events`]: events and formats, below the job spec's `notify` list), where it may go
//! ([`target`]), a tenant's subscriptions and secret ([`subscription`]) and the rules every door
//! changes them by ([`subscription_changes`]), the outbox that makes delivery durable
//! ([`outbox`]), and what a delivery carries ([`payload`]). The sender that delivers them is the
//! reconciler's `callback_sender`.
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

pub mod events;
pub mod outbox;
pub mod payload;
pub mod subscription;
pub mod subscription_changes;
pub mod target;

pub use events::{EventKind, Format, MAX_NOTIFY, MAX_URL_BYTES, Notify, event_names, parse_events};
pub use outbox::{Delivery, DeliveryEnd, OutboxEntry, TargetRef};
pub use payload::{SIGNATURE_HEADER, body, sign, signature_header};
pub use subscription::{CallbackSecret, Subscription};
pub use target::{check_ip, check_url};
