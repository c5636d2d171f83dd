//! Projectors: run a [`Projection`] over a stream in batches, bookmarking progress.
//!
//! A [`Projector`] reads the events after its cursor in batches (500 by default), feeds each
//! batch to its projection, and after each batch places the bookmark of its reader at the
//! batch's last event. Before each run it reads the bookmark back ([`BookmarkReading`]), so
//! that whichever instance runs it next resumes where the last one stopped. While a full
//! batch is projected and bookmarked the next one is read, so that a replay waits for the
//! storage only where reading takes longer than projecting.
//!
//! Processing is at-least-once: a batch whose bookmark did not land is handled again.
//!
//! # Exactly-once against your own store
//!
//! A projection that writes into its own transactional store can keep its position there, in
//! the same transaction as the data: commit both in [`Projection::after_batch`], build the
//! projector with [`BookmarkReading::OnRequest`], and before each run [`Projector::seek`] to
//! the position the store holds. A batch is then either committed with its position or not at
//! all, whatever happens to the bookmark (which remains useful for monitoring). Commit only if
//! the position stored is still the one the batch started from: a leader paused past its ttl
//! may wake inside a batch that its successor has already committed, and only that check,
//! made in the store's own transaction, keeps it from committing the batch twice.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use eventstore::projector::{BookmarkReading, Projection, ProjectionError, Projector};
//! use eventstore::{EventReference, EventStorage, EventStreamId, StoredEvent};
//!
//! /// The projection's own store: its data and its position, committed together.
//! #[derive(Default)]
//! struct OwnStore { count: u64, position: Option<EventReference> }
//!
//! /// `from`: the position this instance's batches continue from.
//! struct Counter { store: Arc<Mutex<OwnStore>>, pending: u64, from: Option<EventReference> }
//!
//! #[async_trait::async_trait]
//! impl Projection for Counter {
//!     async fn handle(&mut self, _event: &StoredEvent) -> Result<(), ProjectionError> {
//!         self.pending += 1;
//!         Ok(())
//!     }
//!     async fn after_batch(&mut self, last: &EventReference) -> Result<(), ProjectionError> {
//!         // one transaction: the batch's effect and the position after it, if no other
//!         // instance moved the position meanwhile
//!         let mut store = self.store.lock().unwrap();
//!         if store.position != self.from {
//!             return Err("another instance committed this batch; stopping".into());
//!         }
//!         store.count += std::mem::take(&mut self.pending);
//!         store.position = Some(*last);
//!         self.from = Some(*last);
//!         Ok(())
//!     }
//!     async fn cancel_batch(&mut self) { self.pending = 0; }
//! }
//!
//! /// One run, on whichever instance: it starts where the own store says.
//! async fn run(storage: Arc<dyn EventStorage>, store: Arc<Mutex<OwnStore>>) {
//!     let position = store.lock().unwrap().position;
//!     let counter = Counter { store: store.clone(), pending: 0, from: position };
//!     let mut projector = Projector::builder(storage, counter)
//!         .stream(EventStreamId::for_context("clicks"))
//!         .bookmark_reading(BookmarkReading::OnRequest)
//!         .build()
//!         .unwrap();
//!     projector.seek(position);
//!     projector.run().await.unwrap();
//! }
//! ```
//!
//! # Fences
//!
//! Given a [`Fence`](crate::Fence), the projector bookmarks with
//! [`EventStorage::bookmark_fenced`](crate::EventStorage::bookmark_fenced): a
//! superseded leader that wakes up cannot move the bookmark, forwards or backwards.
//! See [`crate::guide`] for running a projector on the one elected instance, and
//! [`PartitionedProjector`] for one projector per partition of a [`crate::PartitionElector`].

mod builder;
mod elected;
mod error;
mod failure_pause;
mod partitioned;
mod projection;
mod runner;

pub use builder::ProjectorBuilder;
pub use elected::{ElectedProjector, DEFAULT_POLL_INTERVAL};
pub use error::ProjectorError;
pub use partitioned::PartitionedProjector;
pub use projection::{Projection, ProjectionError};
pub use runner::{Projector, ProjectorRun};

use runner::unless_stopped;

/// The batch size of a projector unless set otherwise.
pub const DEFAULT_BATCH_SIZE: u64 = 500;

/// When a projector reads its bookmark back from the storage.
///
/// Whatever the choice, an [`ElectedProjector`] or a [`PartitionedProjector`] also reads it at
/// the start of every tenure: another instance may have moved it meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BookmarkReading {
    /// Before every run (the default): correct when other instances move the bookmark too.
    #[default]
    BeforeEachRun,
    /// Before the first run only: for a projector that is the bookmark's only writer.
    Once,
    /// Only on [`Projector::read_bookmark`].
    OnRequest,
}
