//! Leases: one round trip per request or batch of up to 1,000, judged by PostgreSQL's `now()`
//! alone.
//!
//! The rules live in the `request_leases` and `release_lease` functions the schema creates
//! (`sql/schema.sql`), so that a batch is one statement in one short transaction; a
//! renewal this storage expects is first tried as one `UPDATE` (see `renewals`), and a batch's
//! plain renewals and refreshes as one statement (see `plain_batch`). Nothing here reads or
//! locks the events table.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use eventstore_api::{
    EventStorageError, FencingToken, Lease, LeaseContender, LeaseOutcome, LeaseRequest,
    LeaseResponse, LeaseSelection, LeaseStatus, ReleaseOutcome, StorageResult,
};
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use super::{plain_batch, renewals};
use crate::connections::errors;
use crate::shared::Shared;

/// The most leases one call of `request_leases` or `release_leases` decides. Each holds one
/// advisory lock per lease until it commits, and PostgreSQL keeps those in one lock table for
/// the whole server, about `max_locks_per_transaction` × `max_connections` entries (6,400 by
/// default): a batch of 15,000 fails there with "out of shared memory". A larger batch is
/// decided in calls of this many, one after another, which answers as the requests one by one.
const LEASES_PER_CALL: usize = 1_000;

/// Answers `requests` (validated by the caller), each with whether it took the lease over
/// from an expired holder: first the plain ones in one statement (see `plain_batch`), then the
/// rest in calls of `request_leases` of at most [`LEASES_PER_CALL`].
#[tracing::instrument(name = "request_leases", level = "debug", skip_all,
    fields(backend = "postgres", lease = %eventstore_api::telemetry::LeaseNames(requests), requests = requests.len()))]
pub(crate) async fn request(
    shared: &Shared,
    requests: &[LeaseRequest],
) -> StorageResult<Vec<LeaseOutcome>> {
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    if let [request] = requests {
        return request_one(shared, request)
            .await
            .map(|outcome| vec![outcome]);
    }
    let mut answers = serve_plain(shared, requests).await?;
    let rest: Vec<usize> = (0..requests.len())
        .filter(|&i| answers[i].is_none())
        .collect();
    if !rest.is_empty() {
        for places in rest.chunks(LEASES_PER_CALL) {
            let asked: Vec<&LeaseRequest> = places.iter().map(|&i| &requests[i]).collect();
            let decided = decide(shared, &asked).await?;
            for (&i, outcome) in places.iter().zip(decided) {
                answers[i] = Some(outcome);
            }
        }
    }
    Ok(answers.into_iter().flatten().collect())
}

/// The answers of the plain requests among `requests` (see `plain_batch`), in their places;
/// none where a request was not plain, or when the call gave up waiting for a lock.
async fn serve_plain(
    shared: &Shared,
    requests: &[LeaseRequest],
) -> StorageResult<Vec<Option<LeaseOutcome>>> {
    let mut answers = vec![None; requests.len()];
    let candidates = plain_batch::candidates(requests);
    if candidates.is_empty() {
        return Ok(answers);
    }
    let operation = "request leases";
    let failing = shared.settings.failing(operation);
    let asked: Vec<&LeaseRequest> = candidates.iter().map(|&i| &requests[i]).collect();
    let lock_wait = shared.settings.lock_timeout.min(plain_batch::LOCK_WAIT);
    let mut connection = shared.connection_for(operation).await?;
    let served = bind_requests(sqlx::query(&shared.plain_batch), &asked)
        .bind(format!("{}ms", lock_wait.as_millis().max(1)))
        .persistent(shared.settings.prepared_statements)
        .fetch_all(&mut *connection)
        .await;
    let rows = match served {
        Ok(rows) => rows,
        // Nothing changed; the connection's transaction, if any, rolls back as it is dropped.
        Err(error) if errors::gave_up_waiting(&error) => return Ok(answers),
        Err(error) => return Err(failing.map(error)),
    };
    shared.end(operation, connection).await?;
    for row in &rows {
        let (place, outcome) = decode_served(row).map_err(|e| failing.map(e))?;
        let i = usize::try_from(place)
            .ok()
            .and_then(|place| candidates.get(place.checked_sub(1)?))
            .ok_or_else(|| {
                EventStorageError::backend(
                    "request_plain_leases answered a request it was not sent",
                    format!("place {place} of {}", candidates.len()),
                )
            })?;
        answers[*i] = Some(outcome);
    }
    Ok(answers)
}

fn decode_served(row: &PgRow) -> Result<(i32, LeaseOutcome), sqlx::Error> {
    let outcome = plain_batch::served(token(row.try_get(1)?)?, row.try_get(2)?, row.try_get(3)?);
    Ok((row.try_get(0)?, outcome))
}

/// Answers `requests` in one call of `request_leases`, in their order.
async fn decide(shared: &Shared, requests: &[&LeaseRequest]) -> StorageResult<Vec<LeaseOutcome>> {
    let operation = "request leases";
    let failing = shared.settings.failing(operation);
    let count = requests.len();
    let mut connection = shared.connection_for(operation).await?;
    let call = format!(
        "SELECT r.lease_status, r.lease_token, r.lease_owner, r.lease_took_over \
         FROM {function}($1, $2, $3, $4, $5) AS r \
         ORDER BY r.lease_index",
        function = shared.prefix.name("request_leases")
    );
    let rows = bind_requests(sqlx::query(&call), requests)
        .bind(shared.settings.lock_timeout_setting())
        .persistent(shared.settings.prepared_statements)
        .fetch_all(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    if rows.len() != count {
        return Err(EventStorageError::backend(
            "request_leases answered a different number of requests than it was sent",
            format!("{count} requests, {} answers", rows.len()),
        ));
    }
    rows.iter()
        .map(|row| decode_outcome(row).map_err(|e| failing.map(e)))
        .collect()
}

/// `query` with `requests` bound as its first four arguments, the arrays the batch functions
/// take: names, owners, priorities and ttls.
fn bind_requests<'q>(
    query: Query<'q, Postgres, PgArguments>,
    requests: &[&'q LeaseRequest],
) -> Query<'q, Postgres, PgArguments> {
    query
        .bind(
            requests
                .iter()
                .map(|r| r.lease_name.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            requests
                .iter()
                .map(|r| r.owner.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(requests.iter().map(|r| r.priority).collect::<Vec<_>>())
        .bind(requests.iter().map(|r| interval(r.ttl)).collect::<Vec<_>>())
}

/// Answers one request: first as a plain renewal when this storage expects one (see
/// `renewals`), else, or when it was not one, in one call of `request_lease`, which takes
/// scalars. An elector's renewal is the most frequent call of all.
async fn request_one(shared: &Shared, request: &LeaseRequest) -> StorageResult<LeaseOutcome> {
    let sent = Instant::now();
    if shared.renewals.expects(request) {
        let renewed = answer(shared, shared.renewals.statement(), request, |row| {
            Ok(renewals::renewed(request, token(row.try_get(0)?)?))
        })
        .await?;
        if let Some(outcome) = renewed {
            shared.renewals.record(request, sent, &outcome);
            return Ok(outcome);
        }
    }
    let call = format!(
        "SELECT r.lease_status, r.lease_token, r.lease_owner, r.lease_took_over \
         FROM {function}($1, $2, $3, $4, $5) AS r",
        function = shared.prefix.name("request_lease")
    );
    let outcome = answer(shared, &call, request, decode_outcome)
        .await?
        .ok_or_else(|| {
            EventStorageError::backend(
                "request_lease got no answer from PostgreSQL",
                "the lease function returned no row",
            )
        })?;
    shared.renewals.record(request, sent, &outcome);
    Ok(outcome)
}

/// Runs `statement` with `request`'s arguments in the order `request_lease` takes them; its
/// answer, decoded from the row it returned, if it returned one.
async fn answer<T>(
    shared: &Shared,
    statement: &str,
    request: &LeaseRequest,
    decode: impl Fn(&PgRow) -> Result<T, sqlx::Error>,
) -> StorageResult<Option<T>> {
    let operation = "request a lease";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let row = sqlx::query(statement)
        .bind(&request.lease_name)
        .bind(&request.owner)
        .bind(request.priority)
        .bind(interval(request.ttl))
        .bind(shared.settings.lock_timeout_setting())
        .persistent(shared.settings.prepared_statements)
        .fetch_optional(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    row.as_ref()
        .map(decode)
        .transpose()
        .map_err(|e| failing.map(e))
}

/// Releases `lease_name` if `owner` holds it, and withdraws `owner` as a contender.
#[tracing::instrument(name = "release_lease", level = "debug", skip_all,
    fields(backend = "postgres", lease = lease_name, owner = owner))]
pub(crate) async fn release(
    shared: &Shared,
    lease_name: &str,
    owner: &str,
) -> StorageResult<ReleaseOutcome> {
    shared.renewals.forget(lease_name, owner);
    let operation = "release a lease";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let held: bool = sqlx::query_scalar(&format!(
        "SELECT {function}($1, $2, $3)",
        function = shared.prefix.name("release_lease")
    ))
    .bind(lease_name)
    .bind(owner)
    .bind(shared.settings.lock_timeout_setting())
    .persistent(shared.settings.prepared_statements)
    .fetch_one(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    Ok(if held {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotHeld
    })
}

/// Releases each of `lease_names` that `owner` holds in calls of `release_leases` of at most
/// [`LEASES_PER_CALL`] names, each one transaction and one commit.
#[tracing::instrument(name = "release_leases", level = "debug", skip_all,
    fields(backend = "postgres", leases = lease_names.len(), owner = owner))]
pub(crate) async fn release_all(
    shared: &Shared,
    lease_names: &[String],
    owner: &str,
) -> StorageResult<Vec<ReleaseOutcome>> {
    if lease_names.is_empty() {
        return Ok(Vec::new());
    }
    for lease_name in lease_names {
        shared.renewals.forget(lease_name, owner);
    }
    let operation = "release leases";
    let failing = shared.settings.failing(operation);
    let call = format!(
        "SELECT {function}($1, $2, $3)",
        function = shared.prefix.name("release_leases")
    );
    let mut outcomes = Vec::with_capacity(lease_names.len());
    for names in lease_names.chunks(LEASES_PER_CALL) {
        let mut connection = shared.connection_for(operation).await?;
        let released: i32 = sqlx::query_scalar(&call)
            .bind(names)
            .bind(owner)
            .bind(shared.settings.lock_timeout_setting())
            .persistent(shared.settings.prepared_statements)
            .fetch_one(&mut *connection)
            .await
            .map_err(|e| failing.map(e))?;
        shared.end(operation, connection).await?;
        outcomes.extend(outcomes_of(names, released));
    }
    Ok(outcomes)
}

/// What a set-based release of `names` that released `released` of them did with each: the
/// function counts the leases the caller held, so all or none tell each lease's outcome, and
/// any count between tells none.
fn outcomes_of(names: &[String], released: i32) -> Vec<ReleaseOutcome> {
    let distinct: std::collections::HashSet<&String> = names.iter().collect();
    let outcome = match usize::try_from(released) {
        Ok(0) => ReleaseOutcome::NotHeld,
        Ok(all) if all == distinct.len() => ReleaseOutcome::Released,
        _ => ReleaseOutcome::Unreported,
    };
    vec![outcome; names.len()]
}

/// Every lease row, by name in byte order.
#[tracing::instrument(
    name = "get_leases",
    level = "debug",
    skip_all,
    fields(backend = "postgres")
)]
pub(crate) async fn all(shared: &Shared) -> StorageResult<Vec<Lease>> {
    with_prefix(shared, "").await
}

/// The lease rows `selection` covers, by name in byte order: a range of the key's index
/// (a name is read as the range of names it starts, then kept alone).
#[tracing::instrument(
    name = "list_leases",
    level = "debug",
    skip_all,
    fields(backend = "postgres", selection = ?selection)
)]
pub(crate) async fn listed(
    shared: &Shared,
    selection: &LeaseSelection,
) -> StorageResult<Vec<Lease>> {
    let mut leases = with_prefix(shared, selection_prefix(selection)).await?;
    leases.retain(|lease| selection.selects(&lease.lease_name));
    Ok(leases)
}

/// The contender rows of the leases `selection` covers, as [`contenders_with_prefix`] lists
/// them.
pub(crate) async fn contenders_in(
    shared: &Shared,
    selection: &LeaseSelection,
) -> StorageResult<Vec<LeaseContender>> {
    match selection {
        LeaseSelection::Named(lease_name) => contenders(shared, lease_name).await,
        _ => contenders_with_prefix(shared, selection_prefix(selection)).await,
    }
}

/// The prefix whose range of names holds every name `selection` covers.
fn selection_prefix(selection: &LeaseSelection) -> &str {
    match selection {
        LeaseSelection::Named(text) | LeaseSelection::Prefix(text) => text,
        _ => "",
    }
}

/// The lease rows whose names start with `prefix`, by name in byte order: a range of the
/// key's index, from the prefix up to the first name past every name it starts.
async fn with_prefix(shared: &Shared, prefix: &str) -> StorageResult<Vec<Lease>> {
    let operation = "list leases";
    let select = |names: &str| {
        format!(
            "SELECT lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at, ttl \
             FROM {leases} WHERE {names} ORDER BY lease_name COLLATE \"C\"",
            leases = shared.prefix.name("leases"),
        )
    };
    let rows = rows_with_prefix(shared, operation, prefix, "lease_name", select).await?;
    let failing = shared.settings.failing(operation);
    rows.iter()
        .map(|row| decode_lease(row).map_err(|e| failing.map(e)))
        .collect()
}

/// The rows of the statement `select` makes for the names in `column` that start with
/// `prefix`: `select` is given the condition, a range of the names in byte order (the order
/// of the keys' indexes), from the prefix up to the first name past every name it starts.
async fn rows_with_prefix(
    shared: &Shared,
    operation: &str,
    prefix: &str,
    column: &str,
    select: impl FnOnce(&str) -> String,
) -> StorageResult<Vec<PgRow>> {
    let failing = shared.settings.failing(operation);
    // Compared byte by byte whatever the column's collation (tables of earlier versions may
    // keep the database's), as the order is.
    let past = past_every_name_starting(prefix);
    let names = match past {
        Some(_) => format!("{column} COLLATE \"C\" >= $1 AND {column} COLLATE \"C\" < $2"),
        None => format!("{column} COLLATE \"C\" >= $1"),
    };
    let sql = select(&names);
    let mut connection = shared.connection_for(operation).await?;
    let mut query = sqlx::query(&sql).bind(prefix);
    if let Some(past) = past {
        query = query.bind(past);
    }
    let rows = query
        .persistent(shared.settings.prepared_statements)
        .fetch_all(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    Ok(rows)
}

/// The least text after every text that starts with `prefix`, in byte order (UTF-8 orders as
/// code points do): `prefix` with its last character raised by one. `None` when no text is
/// past them all (an empty prefix, or one of the highest characters only).
fn past_every_name_starting(prefix: &str) -> Option<String> {
    let mut past = prefix.to_owned();
    while let Some(last) = past.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            past.push(next);
            return Some(past);
        }
    }
    None
}

/// The contender rows of `lease_name` (the holder has none: it counts through its lease row),
/// by priority, highest first, then owner in byte order.
#[tracing::instrument(name = "get_contenders", level = "debug", skip_all,
    fields(backend = "postgres", lease = lease_name))]
async fn contenders(shared: &Shared, lease_name: &str) -> StorageResult<Vec<LeaseContender>> {
    let operation = "list a lease's contenders";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let rows = sqlx::query(&format!(
        "SELECT c.lease_name, c.owner, c.priority, c.heartbeat_at, c.ttl \
         FROM {contenders} AS c \
         LEFT JOIN {leases} AS l ON l.lease_name = c.lease_name AND l.owner = c.owner \
         WHERE c.lease_name = $1 AND l.lease_name IS NULL \
         ORDER BY c.priority DESC, c.owner COLLATE \"C\"",
        contenders = shared.prefix.name("lease_contenders"),
        leases = shared.prefix.name("leases"),
    ))
    .bind(lease_name)
    .persistent(shared.settings.prepared_statements)
    .fetch_all(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    rows.iter()
        .map(|row| decode_contender(row).map_err(|e| failing.map(e)))
        .collect()
}

/// The contender rows of every lease whose name starts with `prefix` (the holders have none),
/// by lease name in byte order, then as [`contenders`] orders them: the name's range of the
/// contenders' key, as [`with_prefix`] reads the leases'.
#[tracing::instrument(name = "get_contenders_with_prefix", level = "debug", skip_all,
    fields(backend = "postgres", prefix = prefix))]
async fn contenders_with_prefix(
    shared: &Shared,
    prefix: &str,
) -> StorageResult<Vec<LeaseContender>> {
    let operation = "list contenders";
    let select = |names: &str| {
        format!(
            "SELECT c.lease_name, c.owner, c.priority, c.heartbeat_at, c.ttl \
             FROM {contenders} AS c \
             LEFT JOIN {leases} AS l ON l.lease_name = c.lease_name AND l.owner = c.owner \
             WHERE {names} AND l.lease_name IS NULL \
             ORDER BY c.lease_name COLLATE \"C\", c.priority DESC, c.owner COLLATE \"C\"",
            contenders = shared.prefix.name("lease_contenders"),
            leases = shared.prefix.name("leases"),
        )
    };
    let rows = rows_with_prefix(shared, operation, prefix, "c.lease_name", select).await?;
    let failing = shared.settings.failing(operation);
    rows.iter()
        .map(|row| decode_contender(row).map_err(|e| failing.map(e)))
        .collect()
}

fn decode_contender(row: &PgRow) -> Result<LeaseContender, sqlx::Error> {
    let ttl: PgInterval = row.try_get("ttl")?;
    Ok(LeaseContender {
        lease_name: row.try_get("lease_name")?,
        owner: row.try_get("owner")?,
        priority: row.try_get("priority")?,
        heartbeat_at: row.try_get("heartbeat_at")?,
        ttl: duration(&ttl)?,
    })
}

/// PostgreSQL's `now()`.
#[tracing::instrument(
    name = "storage_time",
    level = "debug",
    skip_all,
    fields(backend = "postgres")
)]
pub(crate) async fn storage_time(shared: &Shared) -> StorageResult<DateTime<Utc>> {
    let operation = "read the storage time";
    let mut connection = shared.connection_for(operation).await?;
    let now = sqlx::query_scalar("SELECT now()")
        .persistent(shared.settings.prepared_statements)
        .fetch_one(&mut *connection)
        .await
        .map_err(|e| shared.settings.failing(operation).map(e))?;
    shared.end(operation, connection).await?;
    Ok(now)
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

fn decode_outcome(row: &PgRow) -> Result<LeaseOutcome, sqlx::Error> {
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
    Ok(LeaseOutcome {
        response: LeaseResponse {
            status,
            fencing_token: token(row.try_get("lease_token")?)?,
            current_owner: row.try_get("lease_owner")?,
        },
        took_over: row.try_get("lease_took_over")?,
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
    fn the_name_past_a_prefix_follows_every_name_it_starts() {
        assert_eq!(past_every_name_starting("work/").as_deref(), Some("work0"));
        assert_eq!(past_every_name_starting("é").as_deref(), Some("ê"));
        // The surrogates are no characters: after U+D7FF comes U+E000.
        assert_eq!(
            past_every_name_starting("a\u{D7FF}").as_deref(),
            Some("a\u{E000}")
        );
        assert_eq!(
            past_every_name_starting("a\u{10FFFF}").as_deref(),
            Some("b")
        );
        assert_eq!(past_every_name_starting(""), None);
        assert_eq!(past_every_name_starting("\u{10FFFF}"), None);
        let prefix = "group/";
        let past = past_every_name_starting(prefix).unwrap();
        for name in ["group/", "group/7", "group/members/\u{10FFFF}\u{10FFFF}"] {
            assert!(name.as_bytes() < past.as_bytes(), "{name}");
        }
        assert!("group0".as_bytes() >= past.as_bytes());
    }

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
