//! Fenced writes: a write that goes ahead only while its lease is live under its token.

use chrono::{DateTime, Utc};
use eventstore_api::{Fence, Lease, StorageResult};
use sqlx::{PgConnection, Row};

use super::requests::decode_lease;
use crate::shared::Shared;

/// Checks `fence` inside the write's transaction, holding the lease's lock in shared mode
/// until the transaction ends, so that no lease change can slip between the check and the
/// commit (a change takes the same lock exclusively and waits for the write to finish).
///
/// The lock is awaited for the storage's lock timeout; the transaction goes on with
/// `lock_timeout` at `leave_lock_timeout` (the caller's own, in a caller's transaction).
///
/// # Errors
/// `Fenced` when the lease is unknown, not live by `now()`, or holds another token;
/// `Timeout` when the lease lock is not granted within the lock timeout.
pub(crate) async fn hold(
    shared: &Shared,
    connection: &mut PgConnection,
    fence: &Fence,
    operation: &str,
    leave_lock_timeout: &str,
) -> StorageResult<()> {
    let failing = shared.settings.failing(operation);
    let prefix = &shared.prefix;
    sqlx::query(&format!(
        "SELECT pg_advisory_xact_lock_shared(hashtext('{leases}'), hashtext($1)) \
         FROM (SELECT set_config('lock_timeout', $2, true)) AS setting",
        leases = prefix.name("leases")
    ))
    .bind(&fence.lease_name)
    .bind(shared.settings.lock_timeout_setting())
    .persistent(shared.settings.prepared_statements)
    .execute(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;

    // A statement of its own, so that its snapshot is taken after the lock was granted. The
    // server's clock is read as this statement starts, not as the transaction began: a write
    // that waited for the lock is judged at the moment of its check.
    let row = sqlx::query(&format!(
        "SELECT statement_timestamp() AS now, l.lease_name, l.owner, l.priority, l.fencing_token, \
                l.acquired_at, l.heartbeat_at, l.ttl \
         FROM (SELECT set_config('lock_timeout', $2, true)) AS setting \
         LEFT JOIN {leases} AS l ON l.lease_name = $1",
        leases = prefix.name("leases")
    ))
    .bind(&fence.lease_name)
    .bind(leave_lock_timeout)
    .persistent(shared.settings.prepared_statements)
    .fetch_one(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;
    let now: DateTime<Utc> = row.try_get("now").map_err(|e| failing.map(e))?;
    let has_lease: Option<i64> = row.try_get("fencing_token").map_err(|e| failing.map(e))?;
    let lease: Option<Lease> = match has_lease {
        None => None,
        Some(_) => Some(decode_lease(&row).map_err(|e| failing.map(e))?),
    };
    fence.check(lease.as_ref(), now)
}
