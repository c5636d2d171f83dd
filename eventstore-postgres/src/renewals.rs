//! Renewals in one `UPDATE`, for the leases this storage last saw their owner lead.
//!
//! Most lease requests are a holder renewing its live lease. `request_lease` answers those
//! from its first statement, but a call of a PL/pgSQL function costs the server more than the
//! statement itself. So the storage remembers, per lease, the owner and priority it last
//! answered `leader` (`expected_renewals`); that owner's next request at that priority is
//! first sent as one `UPDATE` that renews the lease only when it is live, held by that owner
//! at that priority, and no contender can outrank it (its priority ceiling): exactly when
//! `request_lease` would answer `leader` from its first statement. The `UPDATE` takes the
//! lease's lock first, as the function does, so it is serialized with every other decision on
//! the lease. When it changes nothing (the lease lapsed, moved, or may have an outranking
//! contender) the request goes to the function, which decides as always.

use eventstore_api::{LeaseRequest, StorageResult};
use sqlx::postgres::types::PgInterval;

use crate::shared::Shared;

/// Renews `request`'s lease in one `UPDATE` if it is a plain renewal (see the module): the
/// lease's fencing token, or `None` when it is not a plain renewal and nothing was changed.
pub(crate) async fn renew(
    shared: &Shared,
    request: &LeaseRequest,
    ttl: PgInterval,
) -> StorageResult<Option<i64>> {
    let operation = "request a lease";
    let leases = shared.prefix.name("leases");
    let mut connection = shared.connection_for(operation).await?;
    // The lock (and the lock timeout) come first, in a one-time filter; a row that another
    // decision changed meanwhile is checked again in its newest version.
    let token: Option<i64> = sqlx::query_scalar(&format!(
        "WITH locked AS MATERIALIZED ( \
             SELECT pg_advisory_xact_lock(hashtext('{leases}'), hashtext($1)) \
               FROM (SELECT set_config('lock_timeout', $5, true)) AS setting) \
         UPDATE {leases} AS l \
            SET heartbeat_at = greatest(l.heartbeat_at, now()), ttl = $4 \
          WHERE l.lease_name = $1 AND l.owner = $2 AND l.priority = $3 \
            AND l.heartbeat_at + l.ttl >= now() \
            AND l.contender_priority_ceiling <= $3 \
            AND current_setting('transaction_isolation') = 'read committed' \
            AND EXISTS (SELECT FROM locked) \
         RETURNING l.fencing_token"
    ))
    .bind(&request.lease_name)
    .bind(&request.owner)
    .bind(request.priority)
    .bind(ttl)
    .bind(shared.settings.lock_timeout_setting())
    .persistent(shared.settings.prepared_statements)
    .fetch_optional(&mut *connection)
    .await
    .map_err(|e| shared.settings.failing(operation).map(e))?;
    shared.end(operation, connection).await?;
    Ok(token)
}
