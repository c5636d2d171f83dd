//! Lease rules for backends that keep leases in their own process memory.
//!
//! A backend without a database to judge leases (an in-memory store, a store on local files)
//! applies the contract's lease rules with [`LeaseTable`] and judges time with
//! [`StorageClock`], instead of writing them again:
//!
//! - keep one `Mutex<LeaseTable>` and one [`StorageClock`] per storage, shared by every handle;
//! - validate each request first ([`crate::validate`]), then call [`LeaseTable::request`],
//!   [`LeaseTable::release`] or [`LeaseTable::check_fence`] under the mutex with
//!   [`StorageClock::now`];
//! - a storage that outlives its process seeds each lease's token floor with
//!   [`LeaseTable::raise_floor`] from what it persisted, so tokens never repeat.
//!
//! ```
//! use std::time::Duration;
//! use eventstore_api::in_process::{LeaseTable, StorageClock};
//! use eventstore_api::{LeaseRequest, LeaseStatus};
//!
//! let (mut table, clock) = (LeaseTable::new(), StorageClock::new());
//! let ttl = Duration::from_secs(30);
//! let a = table.request(&LeaseRequest::new("orders", "pod-a", 0, ttl), clock.now());
//! let b = table.request(&LeaseRequest::new("orders", "pod-b", 0, ttl), clock.now());
//! assert_eq!((a.status, b.status), (LeaseStatus::Leader, LeaseStatus::Standby));
//! ```

pub(crate) mod clock;
mod lease_table;

pub use clock::{StorageClock, MAX_RATE_DIFFERENCE};
pub use lease_table::LeaseTable;
