//! What a projector feeds: the [`Projection`] trait and its batch hooks.

use async_trait::async_trait;

use crate::{EventFilter, EventReference, StoredEvent};

/// The error a projection reports; the projector hands it back unchanged.
pub type ProjectionError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A read model built from events, batch by batch.
///
/// For every batch the projector calls [`Projection::before_batch`], then
/// [`Projection::handle`] for each event in order, then [`Projection::after_batch`] with the
/// batch's last reference, and only then writes the bookmark. `after_batch` is where a
/// projection that writes to its own store commits, so that the bookmark never gets ahead of
/// what was committed. When a hook or `handle` fails, the projector calls
/// [`Projection::cancel_batch`] and moves its cursor back to the batch start: the next run
/// handles the batch again (at-least-once). A run dropped inside a batch (a caller's timeout
/// or `select!` around it) counts as a failed batch: the next run of the same projector calls
/// `cancel_batch` before anything else.
#[async_trait]
pub trait Projection: Send {
    /// The events this projection reads; all events by default.
    fn filter(&self) -> EventFilter {
        EventFilter::match_all()
    }

    /// Called before the first event of a batch, e.g. to open a transaction.
    ///
    /// # Errors
    /// Any error cancels the batch.
    async fn before_batch(&mut self) -> Result<(), ProjectionError> {
        Ok(())
    }

    /// Applies one event.
    ///
    /// # Errors
    /// Any error cancels the batch.
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError>;

    /// Called after the last event of a batch with its reference, before the bookmark is
    /// written: commit here.
    ///
    /// # Errors
    /// Any error cancels the batch and no bookmark is written.
    async fn after_batch(&mut self, last: &EventReference) -> Result<(), ProjectionError> {
        let _ = last;
        Ok(())
    }

    /// Called when the batch failed before `after_batch` returned, or at the start of the
    /// next run when a run was dropped before then: undo what the batch did.
    async fn cancel_batch(&mut self) {}
}
