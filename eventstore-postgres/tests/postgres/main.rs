//! PostgreSQL-only behaviour: init modes, prefixes, lock timeouts, contention between
//! separate pools, killed connections, the visibility barrier, lease change notifications,
//! append hints, fencing tokens that survive a server restart, electors that outlive a
//! failing push channel, electors under chaos (killed connections, a crash), pinned
//! search_path, what a pooler in transaction mode needs, typed reads from payloads as text, and
//! lease batches larger than the server's lock table.

#[path = "../common/mod.rs"]
mod common;

mod append_hints;
mod batch_equivalence;
mod batch_plans;
mod cancellation;
mod chaos;
mod contention;
mod elector_faults;
mod event_order;
mod failover;
mod fenced_writes;
mod index_use;
mod init_modes;
mod isolation;
mod killed_connection;
mod large_batches;
mod lease_changes;
mod lease_contenders;
mod least_privileges;
mod lock_timeout;
mod own_transaction_fence;
mod plain_batch;
mod plain_renewals;
mod pooler;
mod prefixes;
mod projector_faults;
mod read_only_sessions;
mod read_your_writes;
mod restart;
mod schema_drift;
mod schema_versions;
mod search_path;
mod session_locks;
mod silent_server;
mod step_down_ceiling;
mod streaming_read;
mod throwaway_cluster;
mod typed_reads;
