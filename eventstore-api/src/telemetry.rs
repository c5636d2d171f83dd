//! The metric names and log fields every backend reports under, so that the runtime's
//! metrics (the `eventstore` crate's `telemetry`) and the backends' agree.
//!
//! This crate records nothing itself and depends on no metrics library: a backend records
//! these through the `metrics` facade, as the backends of this workspace do.
//!
//! | metric | kind | labels | counts or measures |
//! |---|---|---|---|
//! | [`FENCED_REFUSALS`] | counter | `lease` | a fenced write refused because its token is not the live holder's |
//! | [`APPEND_SECONDS`] | histogram | `backend` | how long an append (fenced or not) took, answered with success or not |
//!
//! # Tracing
//!
//! Every backend of this workspace opens a `debug` span per storage operation, named after the
//! [`EventStorage`](crate::EventStorage) method, with the backend and what the operation is
//! about as fields: `stream`, `lease` (and `owner`), `reader`, `id`; never a payload.

/// Counter: fenced writes refused, labelled `lease`.
pub const FENCED_REFUSALS: &str = "eventstore_fenced_refusals_total";
/// Histogram: seconds an append took, labelled `backend`.
pub const APPEND_SECONDS: &str = "eventstore_append_seconds";

/// The lease names of a batch of requests for a span or log field: the one name, or the first
/// and how many more, so that a batch of a thousand partitions stays one short field.
#[derive(Debug, Clone, Copy)]
pub struct LeaseNames<'a>(pub &'a [crate::LeaseRequest]);

impl std::fmt::Display for LeaseNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            [] => Ok(()),
            [one] => f.write_str(&one.lease_name),
            [first, rest @ ..] => write!(f, "{} (+{} more)", first.lease_name, rest.len()),
        }
    }
}
