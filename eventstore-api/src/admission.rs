//! Whether a storage takes a call: the one order every backend answers in.
//!
//! A closed storage answers `Closed` to every call but `name`, whatever its input; an open one
//! then applies the input rules of [`validate`](mod@crate::validate) for that call. A backend keeps
//! one [`Admission`] shared by all its handles and starts every [`EventStorage`] method with
//! [`Admission::admit`], so the order and the rules are decided here, not in each backend.
//!
//! ```
//! use eventstore_api::admission::{Admission, Operation};
//! use eventstore_api::{EventStorageError, EventStreamId};
//!
//! let admission = Admission::new();
//! let blank = EventStreamId::new("", "default");
//! let refused = admission.admit(Operation::Head { stream: &blank });
//! assert!(matches!(refused, Err(EventStorageError::InvalidInput { .. })));
//!
//! admission.close();
//! let refused = admission.admit(Operation::Head { stream: &blank });
//! assert!(matches!(refused, Err(EventStorageError::Closed)));
//! ```
//!
//! [`EventStorage`]: crate::EventStorage

use std::sync::atomic::{AtomicBool, Ordering};

use crate::validate;
use crate::{
    AppendCriteria, EventFilter, EventStorageError, EventStreamId, EventToStore, Fence,
    LeaseRequest, LeaseSelection, Tags,
};

/// One call of the [`EventStorage`](crate::EventStorage) SPI with the input the rules look at.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Operation<'a> {
    /// `append`: a valid condition, a concrete stream and a valid batch.
    Append {
        /// The condition checked before the write.
        criteria: &'a AppendCriteria,
        /// The stream appended to.
        stream: &'a EventStreamId,
        /// The batch.
        events: &'a [EventToStore],
    },
    /// `append_fenced`: a valid fence, then as `Append`.
    AppendFenced {
        /// The fence presented.
        fence: &'a Fence,
        /// The condition checked before the write.
        criteria: &'a AppendCriteria,
        /// The stream appended to.
        stream: &'a EventStreamId,
        /// The batch.
        events: &'a [EventToStore],
    },
    /// `query` and `read`: a valid filter and stream (wildcards allowed).
    Query {
        /// The events selected.
        filter: &'a EventFilter,
        /// The streams read.
        stream: &'a EventStreamId,
    },
    /// `head`: a valid stream (wildcards allowed).
    Head {
        /// The streams looked at.
        stream: &'a EventStreamId,
    },
    /// `subscribe` to appends: a valid stream (wildcards allowed).
    SubscribeAppends {
        /// The streams whose appends are hinted.
        stream: &'a EventStreamId,
    },
    /// `bookmark`: a valid reader and tags.
    Bookmark {
        /// The reader whose bookmark is placed.
        reader: &'a str,
        /// The bookmark's tags.
        tags: &'a Tags,
    },
    /// `bookmark_fenced`: a valid fence, then as `Bookmark`.
    BookmarkFenced {
        /// The fence presented.
        fence: &'a Fence,
        /// The reader whose bookmark is placed.
        reader: &'a str,
        /// The bookmark's tags.
        tags: &'a Tags,
    },
    /// `get_bookmark` and `remove_bookmark`: a valid reader.
    Reader {
        /// The reader named.
        reader: &'a str,
    },
    /// `request_lease`: a valid request.
    RequestLease {
        /// The request.
        request: &'a LeaseRequest,
    },
    /// `request_leases`: every request valid, or the whole batch is refused.
    RequestLeases {
        /// The batch.
        requests: &'a [LeaseRequest],
    },
    /// `release_lease`: a valid lease name and owner.
    ReleaseLease {
        /// The lease released.
        lease_name: &'a str,
        /// Its owner.
        owner: &'a str,
    },
    /// `list_leases` and `list_contenders`: a valid name, or a prefix a name may start with
    /// (empty allowed).
    Leases {
        /// The leases listed.
        selection: &'a LeaseSelection,
    },
    /// `release_leases`: a valid owner and valid lease names.
    ReleaseLeases {
        /// The leases released.
        lease_names: &'a [String],
        /// Their owner.
        owner: &'a str,
    },
    /// A call without input to check: `get_event_by_id`, `get_bookmarks`, `get_leases`,
    /// `storage_time`.
    Read,
}

impl Operation<'_> {
    /// Applies the input rules of this call.
    ///
    /// # Errors
    /// [`EventStorageError::InvalidInput`] for the first rule broken.
    pub fn validate(&self) -> Result<(), EventStorageError> {
        match *self {
            Operation::Append {
                criteria,
                stream,
                events,
            } => {
                validate::validate_criteria(criteria)?;
                validate::validate_append(stream, events)
            }
            Operation::AppendFenced {
                fence,
                criteria,
                stream,
                events,
            } => {
                validate::validate_fence(fence)?;
                validate::validate_criteria(criteria)?;
                validate::validate_append(stream, events)
            }
            Operation::Query { filter, stream } => {
                validate::validate_filter(filter)?;
                validate::validate_stream(stream)
            }
            Operation::Head { stream } | Operation::SubscribeAppends { stream } => {
                validate::validate_stream(stream)
            }
            Operation::Bookmark { reader, tags } => {
                validate::validate_reader(reader)?;
                validate::validate_bookmark_tags(tags)
            }
            Operation::BookmarkFenced {
                fence,
                reader,
                tags,
            } => {
                validate::validate_fence(fence)?;
                validate::validate_reader(reader)?;
                validate::validate_bookmark_tags(tags)
            }
            Operation::Reader { reader } => validate::validate_reader(reader),
            Operation::RequestLease { request } => validate::validate_lease_request(request),
            Operation::RequestLeases { requests } => validate::validate_lease_requests(requests),
            Operation::ReleaseLease { lease_name, owner } => {
                validate::validate_release(lease_name, owner)
            }
            Operation::Leases { selection } => validate::validate_lease_selection(selection),
            Operation::ReleaseLeases { lease_names, owner } => {
                validate::validate_releases(lease_names, owner)
            }
            Operation::Read => Ok(()),
        }
    }
}

/// The open or closed state of one storage, shared by every handle of it.
#[derive(Debug, Default)]
pub struct Admission {
    closed: AtomicBool,
}

impl Admission {
    /// An open storage's admission.
    pub fn new() -> Self {
        Admission::default()
    }

    /// Admits `operation`: `Closed` once the storage is closed, whatever the input; otherwise
    /// the operation's input rules.
    ///
    /// # Errors
    /// [`EventStorageError::Closed`], then [`EventStorageError::InvalidInput`].
    pub fn admit(&self, operation: Operation<'_>) -> Result<(), EventStorageError> {
        if self.is_closed() {
            return Err(EventStorageError::Closed);
        }
        operation.validate()
    }

    /// Closes the storage for every handle; `true` for the call that closed it, `false` when it
    /// was closed already.
    pub fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    /// Whether the storage is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn closed_wins_over_invalid_input_and_close_reports_the_first_call() {
        let admission = Admission::new();
        let blank = LeaseRequest::new(" ", "owner", 0, Duration::from_secs(1));
        let refused = admission.admit(Operation::RequestLease { request: &blank });
        assert!(matches!(
            refused,
            Err(EventStorageError::InvalidInput { .. })
        ));
        assert!(admission.admit(Operation::Read).is_ok());

        assert!(admission.close());
        assert!(!admission.close());
        for operation in [Operation::RequestLease { request: &blank }, Operation::Read] {
            assert!(matches!(
                admission.admit(operation),
                Err(EventStorageError::Closed)
            ));
        }
    }
}
