//! A subscription to pushed lease changes set up on a task of its own, so that a storage
//! that waits for it (a listener connection) never holds a lease loop's requests up.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::fallback::{is_unsupported, warn_fallback};
use crate::EventStorageExt;
use crate::{Capability, EventStorage, EventStorageError, LeaseChanges, LeaseScope};

/// The subscription on its way, until it is ready. Dropped with its loop, it ends the task
/// setting it up, which would otherwise outlive the loop holding the storage.
#[derive(Debug, Default)]
pub(crate) struct Subscribing(Option<JoinHandle<Option<LeaseChanges>>>);

impl Subscribing {
    /// Subscribes to `scope` if the storage pushes lease changes; `failed` reports an error
    /// (the loop then polls only). Nothing is on its way for a storage that pushes none.
    pub(crate) fn start(
        storage: &Arc<dyn EventStorage>,
        scope: LeaseScope,
        failed: impl FnOnce(&EventStorageError) + Send + 'static,
    ) -> Self {
        if !storage.supports(Capability::LeaseChanges) {
            return Subscribing(None);
        }
        let storage = Arc::clone(storage);
        Subscribing(Some(tokio::spawn(async move {
            match storage.subscribe_lease_changes(scope).await {
                Ok(changes) => Some(changes),
                Err(error) => {
                    if is_unsupported(&error) {
                        warn_fallback(storage.as_ref(), "subscribe_lease_changes", "polling only");
                    } else {
                        failed(&error);
                    }
                    None
                }
            }
        })))
    }

    /// The subscription once it is ready (`None` if it failed), then never again; never when
    /// none is on its way.
    pub(crate) async fn ready(&mut self) -> Option<LeaseChanges> {
        match &mut self.0 {
            Some(task) => {
                let subscribed = task.await.ok().flatten();
                self.0 = None;
                subscribed
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for Subscribing {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}
