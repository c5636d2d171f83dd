//! Where a notification goes: lease changes to the lease hub, append hints to the append hub,
//! and what every subscriber hears when notifications may have been lost.

use eventstore_api::append_hints::AppendHintHub;
use eventstore_api::lease_changes::LeaseChangeHub;

use crate::notifications::append_notification;
use crate::notifications::lease_notification::{self, LeaseNotification};

/// The channels the listener listens on, each with the hub its notifications go to.
pub(super) struct Hubs {
    pub(super) lease_channel: String,
    pub(super) leases: LeaseChangeHub,
    pub(super) append_channel: String,
    pub(super) appends: AppendHintHub,
}

impl Hubs {
    /// The channels to `LISTEN` on.
    pub(super) fn channels(&self) -> [&str; 2] {
        [&self.lease_channel, &self.append_channel]
    }

    /// Publishes one notification on the hub of its channel. A payload that does not decode
    /// says only that something changed.
    pub(super) fn publish(&self, channel: &str, payload: &str) {
        if channel == self.append_channel {
            self.publish_append(payload);
        } else if channel == self.lease_channel {
            self.publish_lease_change(payload);
        }
    }

    /// Tells every subscriber of either hub that notifications may have been lost.
    pub(super) fn missed(&self) {
        self.leases.missed();
        self.appends.missed();
    }

    fn publish_lease_change(&self, payload: &str) {
        match lease_notification::decode(payload) {
            Ok(LeaseNotification::Changed(change)) => self.leases.publish(change),
            Ok(LeaseNotification::Missed) => self.leases.missed(),
            Err(error) => {
                tracing::warn!(
                    %error,
                    payload,
                    "a lease change notification does not decode; subscribers are told they missed changes"
                );
                self.leases.missed();
            }
        }
    }

    fn publish_append(&self, payload: &str) {
        match append_notification::decode(payload) {
            Ok(hint) => self.appends.publish(hint),
            Err(error) => {
                tracing::warn!(
                    %error,
                    payload,
                    "an append notification does not decode; subscribers are told they missed hints"
                );
                self.appends.missed();
            }
        }
    }
}
