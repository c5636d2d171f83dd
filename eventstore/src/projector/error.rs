//! What goes wrong in a projector run, and which failures a later run may get past.

use crate::{EventReference, EventStorageError};

use super::ProjectionError;

/// What went wrong in a projector run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectorError {
    /// The storage failed or refused, e.g. [`EventStorageError::Fenced`] for a stale fence.
    #[error(transparent)]
    Storage(#[from] EventStorageError),

    /// The projection failed; the batch was cancelled and the cursor moved back to its start.
    #[error("projection failed in the batch after {}", display_start(.batch_start))]
    Projection {
        /// The cursor when the batch started (`None`: from the beginning).
        batch_start: Option<EventReference>,
        /// The projection's error.
        #[source]
        source: ProjectionError,
    },
}

impl ProjectorError {
    /// Whether the storage refused a write because the fence is stale: this instance no
    /// longer leads.
    ///
    /// The projection's own errors count too: a refused fenced append in
    /// [`Projection::after_batch`](super::Projection::after_batch) says the same, wherever it sits in the error's chain, as
    /// the storage's error or as the typed facade's
    /// ([`TypedStream::fenced`](crate::store::TypedStream::fenced)), which shows the storage's
    /// as its own.
    pub fn is_fenced(&self) -> bool {
        let fenced = |error: &(dyn std::error::Error + 'static)| {
            let storage = error.downcast_ref::<EventStorageError>().or_else(|| {
                match error.downcast_ref::<crate::store::EventStoreError>() {
                    Some(crate::store::EventStoreError::Storage(storage)) => Some(storage),
                    _ => None,
                }
            });
            matches!(storage, Some(EventStorageError::Fenced { .. }))
        };
        match self {
            ProjectorError::Storage(error) => matches!(error, EventStorageError::Fenced { .. }),
            ProjectorError::Projection { source, .. } => std::iter::successors(
                Some(source.as_ref() as &(dyn std::error::Error + 'static)),
                |error| error.source(),
            )
            .any(fenced),
        }
    }

    /// This error's message followed by the message of each source in its chain, joined by
    /// `: `, for a log line that tells the whole story.
    pub fn report(&self) -> String {
        crate::report_chain(self)
    }

    /// Whether running again later may succeed: the storage failed
    /// ([`EventStorageError::Backend`], say a connection lost in a failover) or gave up
    /// waiting ([`EventStorageError::Timeout`]). The elected and partitioned projectors pause
    /// after such a failure and run again; every other error ends their loop.
    pub fn may_pass(&self) -> bool {
        matches!(
            self,
            ProjectorError::Storage(
                EventStorageError::Backend { .. } | EventStorageError::Timeout { .. }
            )
        )
    }
}

fn display_start(start: &Option<EventReference>) -> String {
    start.map_or_else(|| "the beginning".to_owned(), |r| r.to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn failures_of_the_storage_may_pass_and_the_rest_do_not() {
        let lost = ProjectorError::Storage(EventStorageError::backend(
            "PostgreSQL failed to read a bookmark",
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        ));
        assert!(lost.may_pass());
        assert_eq!(
            lost.report(),
            "PostgreSQL failed to read a bookmark: connection reset",
            "the report names the cause too"
        );
        let timed_out = ProjectorError::Storage(EventStorageError::timeout(
            "read events".to_owned(),
            Duration::from_secs(1),
        ));
        assert!(timed_out.may_pass());
        assert!(!ProjectorError::Storage(EventStorageError::Closed).may_pass());
        let projection = ProjectorError::Projection {
            batch_start: None,
            source: "cannot project".into(),
        };
        assert!(!projection.may_pass());
    }
}
