//! PostgreSQL storage for events, bookmarks and leases.
//!
//! [`PostgresEventStorage`] implements [`eventstore_api::EventStorage`] on prefixed tables
//! (`<prefix>events`, `<prefix>bookmarks`, `<prefix>leases`, `<prefix>lease_contenders`),
//! with the database server's clock as the only clock (`now()`, and a statement's own time
//! where a fence is checked). Many processes on many machines share one
//! database: conditional appends are atomic per stream, and exactly one contender wins a
//! lease.
//!
//! ```no_run
//! # async fn open() -> Result<(), eventstore_api::EventStorageError> {
//! use std::time::Duration;
//! use eventstore_api::{EventStorage, LeaseRequest};
//! use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
//!
//! let storage = PostgresEventStorage::builder()
//!     .url("postgres://postgres@127.0.0.1:5432/app")
//!     .prefix("tenant1_")
//!     .init_mode(DatabaseInitMode::Ensure)
//!     .build()
//!     .await?;
//! let response = storage
//!     .request_lease(LeaseRequest::new("order-dispatcher", "pod-7f3a9", 0, Duration::from_secs(30)))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The DDL ships in the crate ([`SCHEMA_SQL`], or [`schema_sql`] for one prefix) and is the
//! DDL that [`DatabaseInitMode::Ensure`] runs; `docs/POSTGRES.md` explains how to apply it
//! by hand and which privileges each table needs.
//!
//! # Behind PgBouncer
//!
//! Behind a pooler in transaction mode, add `?pgbouncer=true` to the url (or call
//! [`PostgresEventStorageBuilder::prepared_statements`] with `false`): no statement is
//! prepared under a name, every call runs in a transaction of its own, and nothing relies on
//! session state. The one thing that needs a direct connection is the notification
//! listener's `LISTEN`: give it with [`PostgresEventStorageBuilder::listen_url`]. Without
//! one, the storage offers neither `Capability::LeaseChanges` nor `Capability::AppendHints`
//! (their subscriptions are `Unsupported`), and electors and projectors on it poll.
//!
//! ```no_run
//! # async fn open() -> Result<(), eventstore_api::EventStorageError> {
//! let storage = eventstore_postgres::PostgresEventStorage::builder()
//!     .url("postgres://app@pgbouncer.internal:6432/app?pgbouncer=true")
//!     .listen_url("postgres://app@db.internal:5432/app")
//!     .build()
//!     .await?;
//! # Ok(()) }
//! ```

// Library code proves its failures impossible instead of unwrapping; tests may unwrap.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod builder;
mod connections;
mod events;
mod leases;
mod notifications;
mod schema;
mod shared;
mod storage;

pub use builder::{
    connect_options, is_postgres_url, PostgresEventStorageBuilder, DEFAULT_LISTENER_HEARTBEAT,
    DEFAULT_MAX_LIFETIME, DEFAULT_PREFIX,
};
pub use schema::DatabaseInitMode;
pub use schema::{drop_sql, is_newer_schema, schema_sql, DROP_SQL, GRANTS_SQL, SCHEMA_SQL};
pub use storage::PostgresEventStorage;
