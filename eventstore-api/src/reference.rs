//! Where an event stands in the storage's order.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::EventId;

/// An event's id and its place in the storage's total order.
///
/// References are ordered by `(tx, position)`: `tx` is the commit order where the backend has
/// one (PostgreSQL's `xid8`), otherwise equal to `position`. A bound of a read or an append
/// (`after`, `until`, `expected_last`) stands for its place in that order alone
/// ([`EventReference::order_key`]): a reference kept without its id, or from elsewhere, bounds
/// as the event at its place does. `Ord` breaks ties by id only to agree with `Eq`.
///
/// The numbers themselves are the backend's choice: positions may start at 0 or at 1 and may
/// leave gaps (a PostgreSQL sequence does after a rollback). Callers compare references and
/// hand them back (`after`, bookmarks, append criteria); they never count with them. The
/// conformance kit accepts every such choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventReference {
    /// The event's id.
    pub id: EventId,
    /// The storage's position of the event, unique and increasing within one `tx`.
    pub position: u64,
    /// The commit order of the event's write.
    pub tx: u64,
}

impl EventReference {
    /// A reference for a backend whose commit order is its position order.
    pub fn at(id: EventId, position: u64) -> Self {
        EventReference {
            id,
            position,
            tx: position,
        }
    }
}

impl EventReference {
    /// The reference's place in the storage's order, `(tx, position)`: what a bound
    /// compares, whatever the id.
    pub fn order_key(&self) -> (u64, u64) {
        (self.tx, self.position)
    }
}

impl Ord for EventReference {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.tx, self.position, self.id).cmp(&(other.tx, other.position, other.id))
    }
}

impl PartialOrd for EventReference {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for EventReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.id, self.position)?;
        if self.tx != self.position {
            write!(f, "(tx {})", self.tx)?;
        }
        Ok(())
    }
}
