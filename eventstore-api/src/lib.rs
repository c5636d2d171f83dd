//! The event model and the storage SPI with leases: what every backend implements.
//!
//! - **Model**: [`EventToStore`], [`StoredEvent`], [`EventReference`], [`Tags`],
//!   [`EventStreamId`], DCB queries ([`EventFilter`]) and conditional appends ([`AppendCriteria`]).
//! - **SPI**: the [`EventStorage`] trait every backend implements, [`Capability`] for what is
//!   optional, and the one error type [`EventStorageError`].
//! - **Leases**: [`LeaseRequest`], [`LeaseResponse`], [`Lease`], [`FencingToken`] and
//!   [`Fence`], for leader election where exactly one instance processes a stream.
//! - **Built on the SPI**, in the `eventstore` crate that applications depend on: the typed
//!   facade, projectors with bookmarks, the leader and partition electors.
//! - **For backend authors**: the input rules and the order calls are answered in
//!   ([`admission`], [`validate`]), the idempotency rule ([`idempotency`]) and the lease rules
//!   for in-process backends ([`in_process`]).
//!
//! # Leases in one call
//!
//! Every instance sends the same request on a timer; the answer says whether it leads.
//!
//! ```
//! # use std::time::Duration;
//! # use eventstore_api::*;
//! # async fn tick(storage: &dyn EventStorage) -> Result<(), EventStorageError> {
//! let response = storage
//!     .request_lease(LeaseRequest::new("order-dispatcher", "pod-7f3a9", 0, Duration::from_secs(30)))
//!     .await?;
//! match response.status {
//!     LeaseStatus::Leader => { /* process, stamping writes with response.fencing_token */ }
//!     LeaseStatus::LeaderStepDownRequested => {
//!         /* finish the current unit of work, then hand over */
//!         storage.release_lease("order-dispatcher", "pod-7f3a9").await?;
//!     }
//!     LeaseStatus::Standby => { /* someone else leads; keep requesting */ }
//! }
//! # Ok(()) }
//! ```

// Library code proves its failures impossible instead of unwrapping; tests may unwrap.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod admission;
pub mod append_hints;
mod bookmark;
mod capability;
pub mod decorator;
mod error;
mod event;
pub mod event_stream;
mod filter;
pub mod idempotency;
pub mod in_process;
mod lease;
pub mod lease_changes;
mod lease_selection;
mod read;
mod reference;
mod storage;
mod storage_ext;
mod stream;
mod subscription;
mod tag;
pub mod telemetry;
pub mod validate;

pub use append_hints::{AppendHint, AppendHints, AppendNotice};
pub use bookmark::Bookmark;
pub use capability::Capability;
pub use error::{report_chain, EventStorageError};
pub use event::{EventId, EventToStore, EventType, RawStoredEvent, StoredEvent};
pub use event_stream::{EventStream, RawEventStream, ReadStream};
pub use filter::{AppendCondition, AppendCriteria, Direction, EventFilter, FilterItem, Limit};
pub use lease::{
    Fence, FencingToken, Lease, LeaseContender, LeaseOutcome, LeaseRequest, LeaseResponse,
    LeaseStatus, ReleaseOutcome,
};
pub use lease_changes::{LeaseChange, LeaseChangeKind, LeaseChanges, LeaseNotice, LeaseScope};
pub use lease_selection::LeaseSelection;
pub use read::{Delivery, Payloads, ReadEvent, ReadRequest};
pub use reference::EventReference;
pub use storage::{EventStorage, StorageResult};
pub use storage_ext::EventStorageExt;
pub use stream::EventStreamId;
pub use subscription::{Subscribed, Subscription};
pub use tag::{Tag, Tags};
