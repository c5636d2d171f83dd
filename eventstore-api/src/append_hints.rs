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

/// How many hints of the streams it covers a subscriber may fall behind before it loses the
/// oldest ones (and hears [`AppendNotice::Missed`]). Each scope subscribed to keeps this many
/// slots; a reader that only wants to know how far appends went reads what piled up at once
/// ([`AppendHints::try_next`]), so a few dozen cover a busy stream.
pub const HINT_BACKLOG: usize = 64;

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
/// [`crate::EventStorageExt::subscribe_appends`].
#[derive(Debug)]
pub struct AppendHints {
    receiver: broadcast::Receiver<AppendNotice>,
}

impl AppendHints {
    /// The next hint for a covered stream (or [`AppendNotice::Missed`]); `None` once the
    /// storage is closed and every hint was read.
    pub async fn next(&mut self) -> Option<AppendNotice> {
        match self.receiver.recv().await {
            Ok(notice) => Some(notice),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(AppendNotice::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next hint already here, without waiting; `None` when none is (or the storage is
    /// closed). A reader that only wants to know how far appends went reads what piled up
    /// with this after [`AppendHints::next`].
    pub fn try_next(&mut self) -> Option<AppendNotice> {
        match self.receiver.try_recv() {
            Ok(notice) => Some(notice),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(AppendNotice::Missed),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                None
            }
        }
    }
}

/// The publishing side of append hints for one storage, shared by its handles.
///
/// Each scope subscribed to has a channel of its own, which carries only the hints of the
/// streams it covers: a subscriber falls behind (and hears [`AppendNotice::Missed`]) only
/// when its own streams are appended to faster than it reads, never for appends elsewhere.
#[derive(Debug)]
pub struct AppendHintHub {
    /// The channel of each scope with subscribers; `None` once closed.
    channels: Mutex<Option<Vec<Channel>>>,
}

#[derive(Debug)]
struct Channel {
    scope: EventStreamId,
    sender: broadcast::Sender<AppendNotice>,
}

impl Default for AppendHintHub {
    fn default() -> Self {
        AppendHintHub {
            channels: Mutex::new(Some(Vec::new())),
        }
    }
}

impl AppendHintHub {
    /// A hub without subscribers.
    pub fn new() -> Self {
        AppendHintHub::default()
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, Option<Vec<Channel>>> {
        self.channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A subscription to the hints of the streams `scope` covers; after
    /// [`AppendHintHub::close`] one that yields nothing.
    pub fn subscribe(&self, scope: &EventStreamId) -> AppendHints {
        let mut channels = self.channels();
        let Some(channels) = channels.as_mut() else {
            // Closed: a receiver whose sender is already gone ends at once.
            return AppendHints {
                receiver: broadcast::Sender::new(1).subscribe(),
            };
        };
        // The scopes whose subscribers are all gone go here too, not only when a hint is
        // published: subscriptions come and go on a store nobody appends to as well.
        channels.retain(|channel| channel.sender.receiver_count() > 0);
        let receiver = match channels.iter().find(|channel| channel.scope == *scope) {
            Some(channel) => channel.sender.subscribe(),
            None => {
                let sender = broadcast::Sender::new(HINT_BACKLOG);
                let receiver = sender.subscribe();
                channels.push(Channel {
                    scope: scope.clone(),
                    sender,
                });
                receiver
            }
        };
        AppendHints { receiver }
    }

    /// Sends `hint` to every subscriber whose scope covers its stream. Never blocks; costs
    /// nothing when nobody subscribed.
    pub fn publish(&self, hint: AppendHint) {
        if let Some(channels) = self.channels().as_mut() {
            // A scope whose subscribers are all gone goes with the next hint.
            channels.retain(|channel| channel.sender.receiver_count() > 0);
            for channel in channels.iter() {
                if channel.scope.covers(&hint.stream) {
                    let _ = channel.sender.send(AppendNotice::Appended(hint.clone()));
                }
            }
        }
    }

    /// Tells every subscriber that hints may have been lost.
    pub fn missed(&self) {
        if let Some(channels) = self.channels().as_ref() {
            for channel in channels {
                let _ = channel.sender.send(AppendNotice::Missed);
            }
        }
    }

    /// Ends every subscription once its backlog is read; later subscriptions end at once.
    pub fn close(&self) {
        self.channels().take();
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
    async fn appends_elsewhere_never_make_a_subscriber_miss_its_own_hints() {
        let hub = AppendHintHub::new();
        let mut orders = hub.subscribe(&EventStreamId::for_context("orders"));
        for position in 0..HINT_BACKLOG as u64 + 5 {
            hub.publish(hint("billing", position));
        }
        let own = hint("orders", 99_999);
        hub.publish(own.clone());
        assert_eq!(orders.try_next(), Some(AppendNotice::Appended(own)));
        assert_eq!(orders.try_next(), None, "nothing else reached it");
    }

    #[test]
    fn the_scopes_of_subscriptions_that_are_gone_are_let_go() {
        let hub = AppendHintHub::new();
        let kept = hub.subscribe(&EventStreamId::for_context("kept"));
        for n in 0..1_000 {
            drop(hub.subscribe(&EventStreamId::for_context(format!("s{n}"))));
        }
        let scopes = hub.channels().as_ref().map_or(0, Vec::len);
        assert!(
            scopes <= 2,
            "{scopes} scopes kept for two subscriptions at most"
        );
        drop(kept);
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
