//! The one error type every storage operation returns.

use std::time::Duration;

use crate::{EventId, EventReference, FencingToken};

/// Everything that can go wrong in a storage operation.
///
/// Every message names what was wrong and the value or limit involved, so that a log line
/// alone tells an operator what happened. Match on the variant, never on the message.
///
/// Variants with fields may gain fields (an `IdempotencyConflict` learned which keys changed,
/// a `Fenced` whether the lease is live): they are `#[non_exhaustive]`, so match them with
/// `..` and build them with the constructors ([`EventStorageError::fenced`] and the others),
/// which keep their arguments when a field is added with a value the constructor can derive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventStorageError {
    /// The caller passed a value the storage refuses; nothing was changed.
    #[error("invalid {field} {value}: {problem}")]
    #[non_exhaustive]
    InvalidInput {
        /// Which argument or field was wrong, e.g. `lease name` or `ttl`.
        field: String,
        /// The offending value, shortened and escaped for display.
        value: String,
        /// What rule it broke, naming the limit.
        problem: String,
    },

    /// The backend does not offer this operation (see [`crate::Capability`]).
    #[error("{operation} is not supported by the {backend} storage")]
    #[non_exhaustive]
    Unsupported {
        /// The refused operation, e.g. `request_lease`.
        operation: String,
        /// The backend's name, as [`crate::EventStorage::name`] gives it.
        backend: String,
    },

    /// The storage was closed; only `name` still answers.
    #[error("the storage is closed")]
    Closed,

    /// A conditional append found an event its criteria said must not exist; nothing was written.
    #[error(
        "optimistic lock failed on stream {stream}: event {conflicting} matches the append criteria \
         but lies after the expected last event {}",
        display_reference(.expected_last)
    )]
    #[non_exhaustive]
    OptimisticLock {
        /// The stream appended to.
        stream: String,
        /// The last matching event the caller had seen, if any.
        expected_last: Option<EventReference>,
        /// The first stored event that matches the criteria after `expected_last`.
        conflicting: EventReference,
    },

    /// A batch reused idempotency keys the stream holds, but is not a retry of what it stored:
    /// it mixes stored keys with new keys or keyless events, or a stored key now comes with a
    /// different event. Nothing was written.
    #[error("idempotency conflict on stream {stream}: {}", describe_idempotency_conflict(.stored, .new, .changed))]
    #[non_exhaustive]
    IdempotencyConflict {
        /// The stream appended to.
        stream: String,
        /// Keys of the batch that the stream holds already.
        stored: Vec<String>,
        /// Keys of the batch that the stream does not hold.
        new: Vec<String>,
        /// Stored keys whose stored event differs (type, payload or tags) from the one given.
        changed: Vec<String>,
    },

    /// A reference named an event this storage does not hold.
    #[error("unknown event {id}: this storage holds no event with that id")]
    #[non_exhaustive]
    UnknownEvent {
        /// The id that was not found.
        id: EventId,
    },

    /// A fenced write presented a token that is not the live holder's; nothing was written.
    #[error(
        "fenced write refused on lease {lease_name}: presented token {presented}, current token {}{}",
        display_token(.current),
        if *.live { "" } else { " (the lease is not live)" }
    )]
    #[non_exhaustive]
    Fenced {
        /// The lease named by the fence.
        lease_name: String,
        /// The token the writer presented.
        presented: FencingToken,
        /// The lease's current token, `None` when the lease was never granted.
        current: Option<FencingToken>,
        /// Whether the lease is live on the storage's clock.
        live: bool,
    },

    /// The operation gave up waiting, e.g. for a lock; nothing was changed.
    #[error("{operation} timed out after {after:?}")]
    #[non_exhaustive]
    Timeout {
        /// What was being waited for.
        operation: String,
        /// How long the storage waited.
        after: Duration,
    },

    /// The database schema is missing an object or does not match what the backend needs.
    #[error("schema problem with {object}: {problem}")]
    #[non_exhaustive]
    Schema {
        /// The table, column, index or function concerned.
        object: String,
        /// What is missing or different.
        problem: String,
    },

    /// The backend failed (I/O, connection, corruption); the source says how.
    ///
    /// The message says what the storage was doing and never repeats its source, so that a
    /// report of the whole chain (`source()` after `source()`) shows each text once.
    #[error("{message}")]
    #[non_exhaustive]
    Backend {
        /// What the storage was doing, without the source's text.
        message: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// Values longer than this are shortened in [`EventStorageError::InvalidInput`] messages.
const MAX_SHOWN_CHARS: usize = 80;

impl EventStorageError {
    /// Builds an [`EventStorageError::InvalidInput`], quoting and shortening `value` for display.
    pub fn invalid(
        field: impl Into<String>,
        value: impl AsRef<str>,
        problem: impl Into<String>,
    ) -> Self {
        let value = value.as_ref();
        let mut shown: String = value.chars().take(MAX_SHOWN_CHARS).collect();
        if shown.len() < value.len() {
            shown.push('…');
        }
        EventStorageError::InvalidInput {
            field: field.into(),
            value: format!("{shown:?}"),
            problem: problem.into(),
        }
    }

    /// Builds an [`EventStorageError::Unsupported`] for `operation` on `backend`.
    pub fn unsupported(operation: impl Into<String>, backend: impl Into<String>) -> Self {
        EventStorageError::Unsupported {
            operation: operation.into(),
            backend: backend.into(),
        }
    }

    /// Builds an [`EventStorageError::OptimisticLock`]: `conflicting` matches the append's
    /// criteria on `stream` but lies after `expected_last`.
    pub fn optimistic_lock(
        stream: impl Into<String>,
        expected_last: Option<EventReference>,
        conflicting: EventReference,
    ) -> Self {
        EventStorageError::OptimisticLock {
            stream: stream.into(),
            expected_last,
            conflicting,
        }
    }

    /// Builds an [`EventStorageError::IdempotencyConflict`] on `stream` from the batch's keys
    /// the stream holds (`stored`), those it does not (`new`), and the stored keys whose event
    /// differs from the one given (`changed`).
    pub fn idempotency_conflict(
        stream: impl Into<String>,
        stored: Vec<String>,
        new: Vec<String>,
        changed: Vec<String>,
    ) -> Self {
        EventStorageError::IdempotencyConflict {
            stream: stream.into(),
            stored,
            new,
            changed,
        }
    }

    /// Builds an [`EventStorageError::UnknownEvent`] for `id`.
    pub fn unknown_event(id: EventId) -> Self {
        EventStorageError::UnknownEvent { id }
    }

    /// Builds an [`EventStorageError::Fenced`]: `presented` was refused on `lease_name`, whose
    /// current token is `current` (`None` when never granted) and which is `live` or not on
    /// the storage's clock.
    pub fn fenced(
        lease_name: impl Into<String>,
        presented: FencingToken,
        current: Option<FencingToken>,
        live: bool,
    ) -> Self {
        EventStorageError::Fenced {
            lease_name: lease_name.into(),
            presented,
            current,
            live,
        }
    }

    /// Builds an [`EventStorageError::Timeout`]: `operation` gave up after `after`.
    pub fn timeout(operation: impl Into<String>, after: Duration) -> Self {
        EventStorageError::Timeout {
            operation: operation.into(),
            after,
        }
    }

    /// Builds an [`EventStorageError::Schema`]: `object` (a table, column, index or function)
    /// is missing or differs as `problem` says.
    pub fn schema(object: impl Into<String>, problem: impl Into<String>) -> Self {
        EventStorageError::Schema {
            object: object.into(),
            problem: problem.into(),
        }
    }

    /// This error's message followed by the message of each source in its chain, joined by
    /// `: `, for a log line that tells the whole story. Each text appears once: no message
    /// repeats its source.
    pub fn report(&self) -> String {
        report_chain(self)
    }

    /// Builds an [`EventStorageError::Backend`] that keeps `source`.
    pub fn backend(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        EventStorageError::Backend {
            message: message.into(),
            source: source.into(),
        }
    }
}

fn describe_idempotency_conflict(stored: &[String], new: &[String], changed: &[String]) -> String {
    if !changed.is_empty() {
        return format!(
            "keys {changed:?} are stored with a different event; a retried batch must repeat the same events"
        );
    }
    if new.is_empty() {
        return format!(
            "keys {stored:?} are stored already, but the batch also holds events without a key; \
             a retried batch must be identical"
        );
    }
    format!(
        "keys {stored:?} are stored already but {new:?} are new; a retried batch must be identical"
    )
}

fn display_reference(reference: &Option<EventReference>) -> String {
    reference.map_or_else(|| "(none)".to_owned(), |r| r.to_string())
}

fn display_token(token: &Option<FencingToken>) -> String {
    token.map_or_else(|| "(never granted)".to_owned(), |t| t.to_string())
}

/// `error`'s message followed by the message of each source in its chain, joined by `: `.
pub fn report_chain(error: &dyn std::error::Error) -> String {
    let mut report = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        report.push_str(": ");
        report.push_str(&cause.to_string());
        source = cause.source();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_input_quotes_and_shortens_the_value() {
        let long = "x".repeat(200);
        let message =
            EventStorageError::invalid("lease name", &long, "at most 512 bytes").to_string();
        assert!(message.starts_with("invalid lease name \"xxx"), "{message}");
        assert!(message.contains("…\": at most 512 bytes"), "{message}");

        let nul = EventStorageError::invalid("owner", "a\0b", "must not contain NUL").to_string();
        assert!(nul.contains(r#""a\0b""#), "{nul}");
    }

    #[test]
    fn fenced_names_both_tokens() {
        let message = EventStorageError::Fenced {
            lease_name: "orders".into(),
            presented: FencingToken(3),
            current: Some(FencingToken(4)),
            live: true,
        }
        .to_string();
        assert!(
            message.contains("presented token 3, current token 4"),
            "{message}"
        );
    }
}
