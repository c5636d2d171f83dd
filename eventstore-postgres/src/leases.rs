//! Leases: one round trip per request or batch, judged by PostgreSQL's `now()` alone.
//!
//! The rules live in the `request_leases` and `release_lease` functions the schema creates
//! (`sql/schema.sql`), so that a whole batch is one statement in one short transaction.
//! Nothing here reads or locks the events table.

use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore_api::{
    EventStorageError, FencingToken, Lease, LeaseRequest, LeaseResponse, LeaseStatus, StorageResult,
};
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::shared::Shared;

/// Answers `requests` (validated by the caller) in one call of `request_leases`.
#[tracing::instrument(name = "request_leases", level = "debug", skip_all,
    fields(backend = "postgres", lease = %eventstore_api::telemetry::LeaseNames(requests), requests = requests.len()))]
pub(crate) async fn request(
    shared: &Shared,
    requests: &[LeaseRequest],
) -> StorageResult<Vec<LeaseResponse>> {
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let failing = shared.settings.failing("request leases");
    let names: Vec<&str> = requests.iter().map(|r| r.lease_name.as_str()).collect();
    let owners: Vec<&str> = requests.iter().map(|r| r.owner.as_str()).collect();
    let priorities: Vec<i64> = requests.iter().map(|r| r.priority).collect();
    let ttls: Vec<PgInterval> = requests.iter().map(|r| interval(r.ttl)).collect();
    let rows = sqlx::query(&format!(
        "SELECT r.lease_status, r.lease_token, r.lease_owner \
         FROM {function}($1, $2, $3, $4, $5) WITH ORDINALITY AS r \
         ORDER BY r.ordinality",
        function = shared.prefix.name("request_leases")
    ))
    .bind(names)
    .bind(owners)
    .bind(priorities)
    .bind(ttls)
    .bind(shared.settings.lock_timeout_setting())
    .fetch_all(&shared.pool)
    .await
    .map_err(|e| failing.map(e))?;
    if rows.len() != requests.len() {
        return Err(EventStorageError::backend(
            "request_leases answered a different number of requests than it was sent",
            format!("{} requests, {} answers", requests.len(), rows.len()),
        ));
    }
    rows.iter()
        .map(|row| decode_response(row).map_err(|e| failing.map(e)))
        .collect()
}

/// Releases `lease_name` if `owner` holds it, and withdraws `owner` as a contender.
#[tracing::instrument(name = "release_lease", level = "debug", skip_all,
    fields(backend = "postgres", lease = lease_name, owner = owner))]
pub(crate) async fn release(shared: &Shared, lease_name: &str, owner: &str) -> StorageResult<()> {
    let failing = shared.settings.failing("release a lease");
    sqlx::query(&format!(
        "SELECT {function}($1, $2, $3)",
        function = shared.prefix.name("release_lease")
    ))
    .bind(lease_name)
    .bind(owner)
    .bind(shared.settings.lock_timeout_setting())
    .execute(&shared.pool)
    .await
    .map_err(|e| failing.map(e))?;
    Ok(())
}

/// Every lease row, by name in byte order.
#[tracing::instrument(
    name = "get_leases",
    level = "debug",
    skip_all,
    fields(backend = "postgres")
)]
pub(crate) async fn all(shared: &Shared) -> StorageResult<Vec<Lease>> {
    let failing = shared.settings.failing("list leases");
    let rows = sqlx::query(&format!(
        "SELECT lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at, ttl \
         FROM {leases} ORDER BY lease_name COLLATE \"C\"",
        leases = shared.prefix.name("leases")
    ))
    .fetch_all(&shared.pool)
    .await
    .map_err(|e| failing.map(e))?;
    rows.iter()
        .map(|row| decode_lease(row).map_err(|e| failing.map(e)))
        .collect()
}

/// PostgreSQL's `now()`.
#[tracing::instrument(
    name = "storage_time",
    level = "debug",
    skip_all,
    fields(backend = "postgres")
)]
pub(crate) async fn storage_time(shared: &Shared) -> StorageResult<DateTime<Utc>> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(&shared.pool)
        .await
        .map_err(|e| shared.settings.failing("read the storage time").map(e))
}

/// A lease from a row with the columns of the leases table.
pub(crate) fn decode_lease(row: &PgRow) -> Result<Lease, sqlx::Error> {
    let ttl: PgInterval = row.try_get("ttl")?;
    Ok(Lease {
        lease_name: row.try_get("lease_name")?,
        owner: row.try_get("owner")?,
        priority: row.try_get("priority")?,
        fencing_token: token(row.try_get("fencing_token")?)?,
        acquired_at: row.try_get("acquired_at")?,
        heartbeat_at: row.try_get("heartbeat_at")?,
        ttl: duration(&ttl)?,
    })
}

fn decode_response(row: &PgRow) -> Result<LeaseResponse, sqlx::Error> {
    let status: String = row.try_get("lease_status")?;
    let status = match status.as_str() {
        "leader" => LeaseStatus::Leader,
        "step_down_requested" => LeaseStatus::LeaderStepDownRequested,
        "standby" => LeaseStatus::Standby,
        other => {
            return Err(sqlx::Error::Decode(
                format!("unknown lease status {other:?}").into(),
            ))
        }
    };
    Ok(LeaseResponse {
        status,
        fencing_token: token(row.try_get("lease_token")?)?,
        current_owner: row.try_get("lease_owner")?,
    })
}

fn token(token: i64) -> Result<FencingToken, sqlx::Error> {
    u64::try_from(token)
        .map(FencingToken)
        .map_err(|_| sqlx::Error::Decode(format!("negative fencing token {token}").into()))
}

/// A ttl as an interval of microseconds only (no days or months, so no calendar arithmetic).
fn interval(ttl: Duration) -> PgInterval {
    PgInterval {
        months: 0,
        days: 0,
        // Validated ttls are at most 7 days, far below i64::MAX microseconds.
        microseconds: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
    }
}

fn duration(interval: &PgInterval) -> Result<Duration, sqlx::Error> {
    let micros = i64::from(interval.days)
        .checked_mul(86_400_000_000)
        .and_then(|days| days.checked_add(interval.microseconds))
        .filter(|_| interval.months == 0)
        .and_then(|micros| u64::try_from(micros).ok())
        .ok_or_else(|| {
            sqlx::Error::Decode(format!("lease ttl {interval:?} is not a plain duration").into())
        })?;
    Ok(Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventstore_api::validate;

    #[test]
    fn ttls_round_trip_through_intervals_at_microsecond_precision() {
        for ttl in [
            Duration::from_millis(1),
            Duration::from_millis(150),
            validate::MAX_TTL,
        ] {
            assert_eq!(duration(&interval(ttl)).unwrap(), ttl);
        }
        let days = PgInterval {
            months: 0,
            days: 2,
            microseconds: 5,
        };
        assert_eq!(
            duration(&days).unwrap(),
            Duration::from_micros(2 * 86_400_000_000 + 5)
        );
        let months = PgInterval {
            months: 1,
            days: 0,
            microseconds: 0,
        };
        assert!(duration(&months).is_err());
    }
}
