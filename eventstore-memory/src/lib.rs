//! An in-memory [`EventStorage`](eventstore_api::EventStorage) with leases.
//!
//! Everything lives in process memory; handles made with `clone()` share one storage and
//! contend for its leases for real, from any number of tasks and threads. Use it in tests, in
//! examples, and wherever a process elects between its own components.
//!
//! Its leases follow the rules of [`eventstore_api::in_process`], which any other in-process
//! backend can use as well.

// Library code proves its failures impossible instead of unwrapping; tests may unwrap.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod event_log;
mod storage;

pub use storage::MemoryEventStorage;
