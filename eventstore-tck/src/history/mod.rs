//! Linearizability of lease histories: record what a storage answered to concurrent lease
//! operations with [`Recorder`], then [`check`] that some order of them, each taking effect
//! within its call, explains every answer under the contract's lease rules.
//!
//! ```
//! use std::time::Duration;
//!
//! use eventstore_api::{FencingToken, LeaseResponse, LeaseStatus};
//! use eventstore_tck::history::{check, Answer, Entry, History, Operation, Outcome};
//! use tokio::time::Instant;
//!
//! let start = Instant::now();
//! let history = History::new();
//! history.push(Entry {
//!     lease_name: "jobs".into(),
//!     operation: Operation::Request {
//!         owner: "a".into(),
//!         priority: 0,
//!         ttl: Duration::from_secs(10),
//!     },
//!     invoked: start,
//!     returned: start + Duration::from_millis(5),
//!     outcome: Outcome::Known(Answer::Lease(LeaseResponse {
//!         status: LeaseStatus::Leader,
//!         fencing_token: FencingToken(1),
//!         current_owner: "a".into(),
//!     })),
//! });
//! let summary = check(&history).unwrap();
//! assert_eq!(summary.operations, 1);
//! ```
//!
//! Not a scenario module: it holds no scenarios, only the tools for tests that drive a
//! storage hard (contention, injected faults, simulations) and want its leases judged.

mod check;
mod model;
mod options;
mod record;
mod recorder;
mod report;

#[cfg(test)]
mod recorded_tests;
#[cfg(test)]
mod tests;

pub use check::check;
pub use options::{CheckOptions, TokenRule};
pub use record::{Answer, Entry, History, Operation, Outcome};
pub use recorder::Recorder;
pub use report::{CheckFailure, CheckSummary, Inconclusive, ReportedOperation, Violation};
