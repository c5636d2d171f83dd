//! What applications build on an event store: the typed facade, projectors with bookmarks,
//! and leader election with fencing.
//!
//! - **Facade**: [`EventStore`] appends and reads typed events of a stream.
//! - **Projectors**: a [`Projector`] runs a [`Projection`] in batches and bookmarks after
//!   each; an elected or partitioned projector runs only where its instance holds the lease.
//! - **Electors**: the [`LeaderElector`] (one instance processes, the others stand by) and
//!   the [`PartitionElector`] (many partitions spread over the live instances, each fenced).
//! - **Telemetry**: metric names and what they count ([`telemetry`]).
//!
//! The event model and the storage SPI of `eventstore` are re-exported here, so that an
//! application depends on this crate and one backend (`eventstore-memory`, `eventstore-file`
//! or `eventstore-postgres`). [`guide`] walks through a leader-elected projector.
//!
//! # An elected instance in a few lines
//!
//! ```
//! # use std::time::Duration;
//! # use std::sync::Arc;
//! # use eventstore::*;
//! # async fn run(storage: Arc<dyn EventStorage>) -> Result<(), Box<dyn std::error::Error>> {
//! let elector = LeaderElector::builder(storage, "order-projector")
//!     .ttl(Duration::from_secs(30))
//!     .start()?;
//! let mut watch = elector.watch();
//! if let Some(token) = watch.wait_for_leadership().await {
//!     // Lead: every write carries `watch.fence()` (this token), which the storage refuses
//!     // once another instance holds the lease.
//!     println!("leading with token {token}");
//! }
//! elector.shutdown().await?;
//! # Ok(()) }
//! ```

// Library code proves its failures impossible instead of unwrapping; tests may unwrap.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub use eventstore_api::*;

pub mod elector;
mod fallback;
pub mod guide;
pub mod partitions;
pub mod projector;
pub mod simulation;
pub mod store;
pub mod telemetry;

pub use elector::{LeaderElector, Leadership, LeadershipWaitError, LeadershipWatch};
pub use partitions::{PartitionElector, PartitionWatch};
pub use projector::{Projection, Projector};
pub use store::EventStore;
