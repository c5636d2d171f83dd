//! Stream identities, with wildcards for reading across streams.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which stream an event belongs to: a bounded context and a purpose within it.
///
/// `None` in a field is a wildcard that reads every value of it; a stream appended to has both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EventStreamId {
    /// The bounded context, e.g. `orders`; `None` reads all contexts.
    pub context: Option<String>,
    /// The purpose within the context; `None` reads all purposes.
    pub purpose: Option<String>,
}

impl EventStreamId {
    /// The purpose [`EventStreamId::for_context`] uses.
    pub const DEFAULT_PURPOSE: &'static str = "default";

    /// The default stream of `context`.
    pub fn for_context(context: impl Into<String>) -> Self {
        EventStreamId::new(context, Self::DEFAULT_PURPOSE)
    }

    /// The stream `purpose` of `context`.
    pub fn new(context: impl Into<String>, purpose: impl Into<String>) -> Self {
        EventStreamId {
            context: Some(context.into()),
            purpose: Some(purpose.into()),
        }
    }

    /// Every stream of the storage (read only).
    pub fn any() -> Self {
        EventStreamId {
            context: None,
            purpose: None,
        }
    }

    /// This stream's context with any purpose (read only).
    pub fn any_purpose(self) -> Self {
        EventStreamId {
            purpose: None,
            ..self
        }
    }

    /// Whether every stream `other` names is one this id names too.
    ///
    /// # Examples
    /// ```
    /// use eventstore_api::EventStreamId;
    /// let orders = EventStreamId::for_context("orders");
    /// assert!(EventStreamId::any().covers(&orders));
    /// assert!(orders.clone().any_purpose().covers(&orders));
    /// assert!(!orders.covers(&EventStreamId::new("orders", "eu")));
    /// ```
    pub fn covers(&self, other: &EventStreamId) -> bool {
        (self.context.is_none() || self.context == other.context)
            && (self.purpose.is_none() || self.purpose == other.purpose)
    }

    /// Whether both context and purpose are set, so that events can be appended to it.
    pub fn is_concrete(&self) -> bool {
        self.context.is_some() && self.purpose.is_some()
    }
}

impl fmt::Display for EventStreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let context = self.context.as_deref().unwrap_or("*");
        let purpose = self.purpose.as_deref().unwrap_or("*");
        write!(f, "{context}/{purpose}")
    }
}
