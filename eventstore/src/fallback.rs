//! What the runtime does when a storage claims a capability yet answers `Unsupported` from
//! the method behind it.
//!
//! A decorator written against the fixed methods of the SPI forwards `supports` as it is but
//! not the optional methods it does not know, whose default bodies answer `Unsupported`. The
//! electors and projectors must not stop over it: they use the fixed methods instead, and say
//! so once, naming the storage and the method.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::{EventStorage, EventStorageError};

/// One optional method of a storage, asked until it answers `Unsupported`, then no more.
#[derive(Debug, Default)]
pub(crate) struct OptionalMethod {
    unsupported: AtomicBool,
}

impl OptionalMethod {
    /// Whether the method is still worth asking: it never answered `Unsupported`.
    pub(crate) fn available(&self) -> bool {
        !self.unsupported.load(Ordering::Relaxed)
    }

    /// Whether `error` says the storage lacks `method` after all. The first time, it warns
    /// that `instead` takes its place, naming the storage; from then on
    /// [`available`](Self::available) is false. An error of any other kind is the caller's
    /// to handle, and changes nothing here.
    pub(crate) fn falls_back(
        &self,
        storage: &dyn EventStorage,
        method: &'static str,
        instead: &'static str,
        error: &EventStorageError,
    ) -> bool {
        if !is_unsupported(error) {
            return false;
        }
        if !self.unsupported.swap(true, Ordering::Relaxed) {
            warn_fallback(storage, method, instead);
        }
        true
    }
}

/// Whether `error` is the `Unsupported` of a storage that claims the capability.
pub(crate) fn is_unsupported(error: &EventStorageError) -> bool {
    matches!(error, EventStorageError::Unsupported { .. })
}

/// Warns that `storage` claims the capability of `method` but lacks it, and that `instead`
/// takes its place.
pub(crate) fn warn_fallback(storage: &dyn EventStorage, method: &str, instead: &str) {
    tracing::warn!(
        storage = storage.name(),
        method,
        instead,
        "the storage claims the capability of {method} but answers Unsupported (a decorator \
         that does not forward it?); using {instead} instead"
    );
}
