//! Append hints ([`Capability::AppendHints`]): a reader sleeps until something it reads was
//! appended, instead of querying on a timer.
//!
//! A hint says that events were appended to a stream, up to a reference; it is sent once the
//! append is durable, which on a backend with a visibility barrier (PostgreSQL) may be before
//! new reads see it. Like lease changes, a hint only wakes a reader early: the read itself
//! decides what is new, a reader that finds the hinted event missing looks again soon, and a
//! missed hint costs at most the reader's poll interval. Backends publish through one [`AppendHintHub`] per storage.
//!
//! [`Capability::AppendHints`]: crate::Capability::AppendHints

use std::sync::Mutex;

use tokio::sync::broadcast;

use crate::{EventReference, EventStreamId};

/// How many hints a subscriber may fall behind before it loses the oldest ones.
pub const HINT_BACKLOG: usize = 1024;

/// Events were appended to `stream`, the last of them at `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendHint {
    /// The (concrete) stream appended to.
    pub stream: EventStreamId,
    /// The reference of the last event appended.
    pub last: EventReference,
}

/// What a subscription to append hints yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendNotice {
    /// Events were appended to a stream the subscription covers.
    Appended(AppendHint),
    /// Hints may have been lost: read, as anything may have been appended.
    Missed,
}

/// A subscription to the append hints of the streams one [`EventStreamId`] covers; see
/// [`crate::EventStorage::subscribe_appends`].
#[derive(Debug)]
pub struct AppendHints {
    receiver: broadcast::Receiver<AppendNotice>,
    scope: EventStreamId,
}

impl AppendHints {
    /// The next hint for a covered stream (or [`AppendNotice::Missed`]); `None` once the
    /// storage is closed and every hint was read.
    pub async fn next(&mut self) -> Option<AppendNotice> {
        loop {
            let notice = match self.receiver.recv().await {
                Ok(notice) => notice,
                Err(broadcast::error::RecvError::Lagged(_)) => AppendNotice::Missed,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            if self.covers(&notice) {
                return Some(notice);
            }
        }
    }

    fn covers(&self, notice: &AppendNotice) -> bool {
        match notice {
            AppendNotice::Appended(hint) => self.scope.covers(&hint.stream),
            AppendNotice::Missed => true,
        }
    }
}

/// The publishing side of append hints for one storage, shared by its handles.
#[derive(Debug)]
pub struct AppendHintHub {
    sender: Mutex<Option<broadcast::Sender<AppendNotice>>>,
}

impl Default for AppendHintHub {
    fn default() -> Self {
        AppendHintHub {
            sender: Mutex::new(Some(broadcast::Sender::new(HINT_BACKLOG))),
        }
    }
}

impl AppendHintHub {
    /// A hub without subscribers.
    pub fn new() -> Self {
        AppendHintHub::default()
    }

    fn sender(&self) -> std::sync::MutexGuard<'_, Option<broadcast::Sender<AppendNotice>>> {
        self.sender
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A subscription to the hints of the streams `scope` covers; after
    /// [`AppendHintHub::close`] one that yields nothing.
    pub fn subscribe(&self, scope: &EventStreamId) -> AppendHints {
        let receiver = match self.sender().as_ref() {
            Some(sender) => sender.subscribe(),
            // Closed: a receiver whose sender is already gone ends at once.
            None => broadcast::Sender::new(1).subscribe(),
        };
        AppendHints {
            receiver,
            scope: scope.clone(),
        }
    }

    /// Sends `hint` to every subscriber whose scope covers its stream. Never blocks; costs
    /// nothing when nobody subscribed.
    pub fn publish(&self, hint: AppendHint) {
        if let Some(sender) = self.sender().as_ref() {
            if sender.receiver_count() > 0 {
                let _ = sender.send(AppendNotice::Appended(hint));
            }
        }
    }

    /// Tells every subscriber that hints may have been lost.
    pub fn missed(&self) {
        if let Some(sender) = self.sender().as_ref() {
            let _ = sender.send(AppendNotice::Missed);
        }
    }

    /// Ends every subscription once its backlog is read; later subscriptions end at once.
    pub fn close(&self) {
        self.sender().take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventId;

    fn hint(context: &str, position: u64) -> AppendHint {
        AppendHint {
            stream: EventStreamId::for_context(context),
            last: EventReference::at(EventId::new(), position),
        }
    }

    #[tokio::test]
    async fn a_hint_reaches_the_subscribers_whose_scope_covers_its_stream() {
        let hub = AppendHintHub::new();
        let mut orders = hub.subscribe(&EventStreamId::for_context("orders"));
        let mut any = hub.subscribe(&EventStreamId::any());
        let (billing, orders_hint) = (hint("billing", 1), hint("orders", 2));
        hub.publish(billing.clone());
        hub.publish(orders_hint.clone());
        assert_eq!(
            orders.next().await,
            Some(AppendNotice::Appended(orders_hint)),
            "the orders subscriber skips billing"
        );
        let Some(AppendNotice::Appended(first)) = any.next().await else {
            panic!("the wildcard subscriber hears of billing");
        };
        assert_eq!(first, billing);
        hub.close();
        assert_eq!(orders.next().await, None);
        assert_eq!(hub.subscribe(&EventStreamId::any()).next().await, None);
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_it_missed_hints() {
        let hub = AppendHintHub::new();
        let mut slow = hub.subscribe(&EventStreamId::any());
        for position in 0..HINT_BACKLOG as u64 + 5 {
            hub.publish(hint("orders", position));
        }
        assert_eq!(slow.next().await, Some(AppendNotice::Missed));
    }
}
