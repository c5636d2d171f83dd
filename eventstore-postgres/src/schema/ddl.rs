//! The init modes: ensure, validate, recreate.

use std::future::Future;
use std::pin::Pin;

use eventstore_api::{EventStorageError, StorageResult};
use sqlx::{Executor, PgConnection, PgPool};

use super::catalog::{self, Catalog};
use super::drift;
use super::init_mode::DatabaseInitMode;
use super::prefix::TablePrefix;
use super::schema_version::{self, SchemaVersion, Standing, SCHEMA_VERSION};
use super::scripts::{DROP_SQL, SCHEMA_SQL};
use crate::connections::isolation::BEGIN_READ_COMMITTED;
use crate::connections::settings::Settings;
use crate::connections::statements::CallConnection;

/// What preparing the schema is called in errors.
const OPERATION: &str = "prepare the schema";

/// Prepares the schema of `prefix` as `mode` says.
///
/// Boxed, so that the future's `Send` bound is proven here, once, for concrete lifetimes.
pub(crate) fn initialize<'a>(
    pool: &'a PgPool,
    prefix: &'a TablePrefix,
    mode: DatabaseInitMode,
    settings: &'a Settings,
) -> Pin<Box<dyn Future<Output = StorageResult<()>> + Send + 'a>> {
    Box::pin(initialize_schema(pool, prefix, mode, settings))
}

async fn initialize_schema(
    pool: &PgPool,
    prefix: &TablePrefix,
    mode: DatabaseInitMode,
    settings: &Settings,
) -> StorageResult<()> {
    let failing = settings.failing(OPERATION);
    match mode {
        DatabaseInitMode::None => Ok(()),
        DatabaseInitMode::Validate => {
            let mut connection = CallConnection::open(pool, settings, OPERATION).await?;
            validate(&mut connection, prefix, settings.prepared_statements).await?;
            connection.end(settings, OPERATION).await
        }
        DatabaseInitMode::Ensure | DatabaseInitMode::Recreate => {
            let recreate = mode == DatabaseInitMode::Recreate;
            if !recreate {
                // A complete schema is only read: no lock, no DDL, nothing for a running
                // system to wait on.
                let mut connection = CallConnection::open(pool, settings, OPERATION).await?;
                if validate(&mut connection, prefix, settings.prepared_statements)
                    .await
                    .is_ok()
                {
                    return connection.end(settings, OPERATION).await;
                }
                drop(connection);
            }
            let mut transaction = settings
                .health
                .begin(pool, BEGIN_READ_COMMITTED.into())
                .await
                .map_err(|e| failing.map(e))?;
            // One creator per prefix at a time; the others wait here, then find it done.
            sqlx::query(
                "SELECT pg_advisory_xact_lock(hashtext($1), 0) \
                 FROM (SELECT set_config('lock_timeout', $2, true)) AS setting",
            )
            .bind(prefix.name("schema"))
            .bind(settings.lock_timeout_setting())
            .persistent(settings.prepared_statements)
            .execute(&mut *transaction)
            .await
            .map_err(|e| failing.map(e))?;
            let persistent = settings.prepared_statements;
            refuse_tables_elsewhere(&mut transaction, prefix, persistent).await?;
            if recreate {
                let script = prefix.apply(DROP_SQL);
                (&mut *transaction)
                    .execute(script.as_str())
                    .await
                    .map_err(|e| failing.map(e))?;
            }
            let stale = if recreate {
                None
            } else {
                check(&mut transaction, prefix, persistent).await.err()
            };
            if let Some(Stale {
                error,
                repairable: false,
            }) = stale
            {
                let _ = transaction.rollback().await;
                return Err(error);
            }
            let stale = stale.map(|stale| stale.error);
            if recreate || stale.is_some() {
                lock_lease_tables_first(&mut transaction, prefix, persistent)
                    .await
                    .map_err(|e| failing.map(e))?;
                let script = prefix.apply(SCHEMA_SQL);
                if let Err(error) = (&mut *transaction).execute(script.as_str()).await {
                    return Err(match (stale, &error) {
                        // A role that may not apply DDL: what is stale matters more to the
                        // operator than which statement it could not run.
                        (
                            Some(EventStorageError::Schema {
                                object, problem, ..
                            }),
                            sqlx::Error::Database(refusal),
                        ) if refusal.code().as_deref() == Some(INSUFFICIENT_PRIVILEGE) => {
                            schema_error(
                                object,
                                format!(
                                    "{problem}; this role cannot apply the shipped DDL to \
                                     repair it ({})",
                                    refusal.message()
                                ),
                            )
                        }
                        _ => failing.map(error),
                    });
                }
            }
            let outcome = validate(&mut transaction, prefix, settings.prepared_statements).await;
            match outcome {
                Ok(()) => transaction.commit().await.map_err(|e| failing.map(e)),
                Err(error) => {
                    let _ = transaction.rollback().await;
                    Err(error)
                }
            }
        }
    }
}

/// SQLSTATE `42501`: the role lacks a privilege the statement needs.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// Refuses to create anything when a table of the prefix that the search_path finds lives in
/// another schema than the one new objects go to (`current_schema()`, the first schema of the
/// path that exists): `CREATE … IF NOT EXISTS` would build a second, empty set of tables
/// there, and from then on hide the tables that hold the log.
async fn refuse_tables_elsewhere(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> StorageResult<()> {
    let shipped = shipped_catalog(connection, prefix, persistent).await?;
    let table_names: Vec<&str> = shipped.tables().collect();
    let elsewhere: Option<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT t.name, n.nspname::text, current_schema()::text \
         FROM unnest($1::text[]) AS t(name) \
         JOIN pg_class AS c ON c.oid = to_regclass(t.name) \
         JOIN pg_namespace AS n ON n.oid = c.relnamespace \
         WHERE n.nspname IS DISTINCT FROM current_schema() \
         LIMIT 1",
    )
    .bind(&table_names)
    .persistent(persistent)
    .fetch_optional(&mut *connection)
    .await
    .map_err(|e| catalog_failure(prefix, e))?;
    let Some((table, schema, current)) = elsewhere else {
        return Ok(());
    };
    let creating_in = current.map_or_else(
        || "no schema (none on the search_path exists)".to_owned(),
        |current| format!("schema {current}"),
    );
    Err(schema_error(
        format!("table {table}"),
        format!(
            "is in schema {schema}, while new objects of the prefix would be created in \
             {creating_in}: put {schema} first on the search_path"
        ),
    ))
}

/// Locks the lease tables, where they exist, before the DDL touches the events table: a
/// fenced append reads the leases and then inserts events, and the script, which takes the
/// events table first, would otherwise deadlock with it.
async fn lock_lease_tables_first(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> Result<(), sqlx::Error> {
    for table in ["leases", "lease_contenders"] {
        let name = prefix.name(table);
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(&name)
            .persistent(persistent)
            .fetch_one(&mut *connection)
            .await?;
        if exists {
            // The name is the validated prefix and a fixed suffix.
            (&mut *connection)
                .execute(format!("LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE").as_str())
                .await?;
        }
    }
    Ok(())
}

fn catalog_failure(prefix: &TablePrefix, error: sqlx::Error) -> EventStorageError {
    EventStorageError::backend(
        format!("PostgreSQL failed to read the catalog for prefix {prefix}"),
        error,
    )
}

/// Reads the catalog and fails with `Schema` naming the first object that is missing or
/// differs from what the shipped DDL creates; `persistent` says whether its statements are
/// prepared under names. See [`check`] for the tables of a newer version.
pub(crate) async fn validate(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> StorageResult<()> {
    check(connection, prefix, persistent)
        .await
        .map_err(|stale| stale.error)
}

/// Why the catalog does not hold what this storage needs, and whether applying the
/// shipped DDL may repair it.
struct Stale {
    /// The first object that is missing or differs.
    error: EventStorageError,
    /// False for the tables of a newer schema version, which this storage's DDL would
    /// take back to its own.
    repairable: bool,
}

/// Checks the catalog against the schema version its tables record: this storage's own or
/// an older one (or none) must match the shipped DDL exactly; a newer one that says this
/// storage may use it must only hold every table, column, index and function this storage
/// uses; a newer one that needs a newer storage is refused.
///
/// Boxed, so that the future's `Send` bound is proven here, once, for concrete lifetimes.
fn check<'a>(
    connection: &'a mut PgConnection,
    prefix: &'a TablePrefix,
    persistent: bool,
) -> Pin<Box<dyn Future<Output = Result<(), Stale>> + Send + 'a>> {
    Box::pin(check_catalog(connection, prefix, persistent))
}

/// How a refusal of a newer version's tables that this storage must not use begins.
const NEWER_INCOMPATIBLE: &str = "records schema version";
/// What a refusal of a newer version's tables that this storage may use, but not repair, says.
const NEWER_COMPATIBLE: &str = "newer than this storage's";

/// Whether `error` refuses tables that record a newer schema version than this storage's:
/// no storage of this version changes them, so neither `DatabaseInitMode::Ensure` nor any
/// other repair of this version can help; a storage (or an `eventstore` command) of the
/// version the tables record can.
pub fn is_newer_schema(error: &EventStorageError) -> bool {
    matches!(error, EventStorageError::Schema { problem, .. }
        if problem.starts_with(NEWER_INCOMPATIBLE) || problem.contains(NEWER_COMPATIBLE))
}

async fn check_catalog(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> Result<(), Stale> {
    let recorded = schema_version::recorded(connection, prefix, persistent)
        .await
        .map_err(|e| Stale {
            error: catalog_failure(prefix, e),
            repairable: true,
        })?;
    let events = format!("table {}", prefix.name("events"));
    match SchemaVersion::standing(recorded) {
        Standing::NewerIncompatible(newer) => Err(Stale {
            error: schema_error(
                events,
                format!(
                    "{NEWER_INCOMPATIBLE} {}, which storages of version {} and later use; \
                     this storage's is version {SCHEMA_VERSION}: upgrade it",
                    newer.version, newer.oldest_compatible
                ),
            ),
            repairable: false,
        }),
        Standing::NewerCompatible(newer) => validate_catalog(connection, prefix, persistent, false)
            .await
            .map_err(|error| Stale {
                error: match error {
                    EventStorageError::Schema {
                        object, problem, ..
                    } => schema_error(
                        object,
                        format!(
                            "{problem}; the tables record schema version {}, {NEWER_COMPATIBLE} \
                             {SCHEMA_VERSION}, whose DDL it does not apply",
                            newer.version
                        ),
                    ),
                    other => other,
                },
                repairable: false,
            }),
        Standing::Same | Standing::Older(_) => {
            validate_catalog(connection, prefix, persistent, true)
                .await
                .map_err(|error| Stale {
                    error,
                    repairable: true,
                })
        }
    }
}

/// Fails with `Schema` naming the first object the shipped DDL creates that is missing from
/// the prefix or differs from what the DDL makes of it; `exact` compares every property,
/// otherwise only those a newer version keeps (a column's type and nullability, an index's
/// table and uniqueness), as a newer version may have changed the rest. Objects the DDL does
/// not create (an index of the operator's, a newer version's column) are left alone.
async fn validate_catalog(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
    exact: bool,
) -> StorageResult<()> {
    let failing = |e: sqlx::Error| catalog_failure(prefix, e);
    let shipped = shipped_catalog(connection, prefix, persistent).await?;
    let found = catalog::read(connection, prefix, persistent)
        .await
        .map_err(failing)?;
    match drift::first_difference(&shipped, &found, exact) {
        Some(drift) => Err(schema_error(drift.object, drift.problem)),
        None => Ok(()),
    }
}

/// What the shipped DDL creates for `prefix` on this server ([`catalog::shipped`]).
async fn shipped_catalog(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> StorageResult<Catalog> {
    catalog::shipped(connection, prefix, persistent)
        .await
        .map_err(|error| {
            EventStorageError::backend(
                format!(
                    "PostgreSQL could not make the scratch copy of the shipped DDL that the \
                     schema of prefix {prefix} is compared with (it needs a session that may \
                     create temporary objects: TEMPORARY on the database, and a server that \
                     is not a standby)"
                ),
                error,
            )
        })
}

fn schema_error(object: String, problem: impl Into<String>) -> EventStorageError {
    EventStorageError::schema(object, problem.into())
}
