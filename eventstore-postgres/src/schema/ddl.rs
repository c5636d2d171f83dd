//! The shipped DDL and the init modes: ensure, validate, recreate.

use std::future::Future;
use std::pin::Pin;

use eventstore_api::{EventStorageError, StorageResult};
use sqlx::{Executor, PgConnection, PgPool};

use super::init_mode::DatabaseInitMode;
use super::prefix::TablePrefix;
use super::schema_version::{self, SchemaVersion, Standing, SCHEMA_VERSION};
use crate::connections::isolation::BEGIN_READ_COMMITTED;
use crate::connections::settings::Settings;
use crate::connections::statements::CallConnection;

/// What preparing the schema is called in errors.
const OPERATION: &str = "prepare the schema";

/// The schema, with `__prefix__` where the prefix goes. Idempotent.
pub const SCHEMA_SQL: &str = include_str!("../../sql/schema.sql");

/// Drops every object of a prefix, with `__prefix__` where the prefix goes.
pub const DROP_SQL: &str = include_str!("../../sql/drop.sql");

/// The least privileges an application role needs, with `__prefix__` where the prefix goes
/// and `__app_role__` where the role goes: `SELECT, INSERT` on events, no `DELETE` on leases.
pub const GRANTS_SQL: &str = include_str!("../../sql/grants.sql");

/// The schema script for `prefix`, ready to run by hand (in one transaction) for
/// deployments that use [`DatabaseInitMode::Validate`] or [`DatabaseInitMode::None`].
///
/// # Errors
/// `InvalidInput` when `prefix` does not match `^[a-z][a-z0-9_]{0,30}_$`.
pub fn schema_sql(prefix: &str) -> StorageResult<String> {
    Ok(TablePrefix::parse(prefix)?.apply(SCHEMA_SQL))
}

/// The script that drops every object of `prefix` (events, bookmarks and leases with it),
/// as [`DatabaseInitMode::Recreate`] runs it before creating them anew.
///
/// # Errors
/// `InvalidInput` when `prefix` does not match `^[a-z][a-z0-9_]{0,30}_$`.
pub fn drop_sql(prefix: &str) -> StorageResult<String> {
    Ok(TablePrefix::parse(prefix)?.apply(DROP_SQL))
}

/// A column the backend reads or writes: name, type as `format_type` spells it (or the
/// types it accepts, joined by " or "), NOT NULL.
type ExpectedColumn = (&'static str, &'static str, bool);

/// Every table (by suffix) and the columns it must have. Extra columns are allowed.
const TABLES: &[(&str, &[ExpectedColumn])] = &[
    (
        "events",
        &[
            ("position", "bigint", true),
            ("tx", "xid8", true),
            ("id", "uuid", true),
            ("stream_context", "text", true),
            ("stream_purpose", "text", true),
            ("event_type", "text", true),
            ("payload", "json or jsonb", true),
            ("tags", "text[]", true),
            ("idempotency_key", "text", false),
            ("stored_at", "timestamp with time zone", true),
        ],
    ),
    (
        "bookmarks",
        &[
            ("reader", "text", true),
            ("event_id", "uuid", true),
            ("tags", "text[]", true),
            ("updated_at", "timestamp with time zone", true),
        ],
    ),
    (
        "leases",
        &[
            ("lease_name", "text", true),
            ("owner", "text", true),
            ("priority", "bigint", true),
            ("fencing_token", "bigint", true),
            ("acquired_at", "timestamp with time zone", true),
            ("heartbeat_at", "timestamp with time zone", true),
            ("ttl", "interval", true),
            ("released", "boolean", true),
        ],
    ),
    (
        "lease_contenders",
        &[
            ("lease_name", "text", true),
            ("owner", "text", true),
            ("priority", "bigint", true),
            ("heartbeat_at", "timestamp with time zone", true),
            ("ttl", "interval", true),
        ],
    ),
];

/// A column default the storage relies on: its inserts name no value for the column.
enum ExpectedDefault {
    /// The default as `pg_get_expr` spells it.
    Exactly(&'static str),
    /// The next value of a sequence (`nextval(...)`), whichever sequence it is.
    Sequence,
}

/// Every column default the storage relies on, by table and column: an event's position,
/// transaction and time, and a new lease's `released`. A changed default would break the
/// event order or the visibility barrier without any error.
const DEFAULTS: &[(&str, &str, ExpectedDefault)] = &[
    ("events", "position", ExpectedDefault::Sequence),
    (
        "events",
        "tx",
        ExpectedDefault::Exactly("pg_current_xact_id()"),
    ),
    ("events", "stored_at", ExpectedDefault::Exactly("now()")),
    ("leases", "released", ExpectedDefault::Exactly("false")),
];

impl ExpectedDefault {
    fn accepts(&self, default: Option<&str>) -> bool {
        // `pg_get_expr` names the built-in function's schema when the session's search_path
        // would find another of the same name first: the same default.
        let default = default.map(|d| d.strip_prefix("pg_catalog.").unwrap_or(d));
        match (self, default) {
            (ExpectedDefault::Exactly(expected), Some(default)) => default == *expected,
            (ExpectedDefault::Sequence, Some(default)) => default.starts_with("nextval("),
            (_, None) => false,
        }
    }

    /// What to show for it in an error.
    fn describe(&self) -> &'static str {
        match self {
            ExpectedDefault::Exactly(expected) => expected,
            ExpectedDefault::Sequence => "the next value of a sequence",
        }
    }
}

/// An index this storage uses, as the shipped DDL creates it.
struct ExpectedIndex {
    /// The name after the prefix.
    suffix: &'static str,
    /// The table it is on, after the prefix.
    table: &'static str,
    unique: bool,
    /// Its access method, key and predicate as `pg_get_indexdef` gives them after `USING`,
    /// without its storage options.
    definition: &'static str,
    /// The storage options it must have, as `pg_class.reloptions` lists them.
    options: &'static [&'static str],
}

const fn index(
    suffix: &'static str,
    table: &'static str,
    unique: bool,
    definition: &'static str,
) -> ExpectedIndex {
    ExpectedIndex {
        suffix,
        table,
        unique,
        definition,
        options: &[],
    }
}

/// Every index this storage uses.
const INDEXES: &[ExpectedIndex] = &[
    index("events_pkey", "events", true, r#"btree ("position")"#),
    index("events_id_key", "events", true, "btree (id)"),
    index(
        "events_order_idx",
        "events",
        false,
        r#"btree (tx, "position")"#,
    ),
    index(
        "events_context_idx",
        "events",
        false,
        r#"btree (stream_context, tx, "position", stream_purpose)"#,
    ),
    index(
        "events_type_idx",
        "events",
        false,
        r#"btree (event_type, tx, "position")"#,
    ),
    ExpectedIndex {
        options: &["gin_pending_list_limit=128"],
        ..index("events_tags_idx", "events", false, "gin (tags)")
    },
    index(
        "events_idempotency_idx",
        "events",
        true,
        "btree (stream_context, stream_purpose, idempotency_key) \
         WHERE (idempotency_key IS NOT NULL)",
    ),
    index("bookmarks_pkey", "bookmarks", true, "btree (reader)"),
    index("leases_pkey", "leases", true, "btree (lease_name)"),
    index(
        "lease_contenders_pkey",
        "lease_contenders",
        true,
        "btree (lease_name, owner)",
    ),
];

/// An expected index as the catalog has it: the table it is on, whether it is unique, its
/// definition and its storage options; all but the options are missing when the index is.
#[derive(sqlx::FromRow)]
struct CatalogIndex {
    name: String,
    table_name: Option<String>,
    is_unique: Option<bool>,
    definition: Option<String>,
    options: Vec<String>,
}

impl CatalogIndex {
    /// Its access method, key and predicate: `pg_get_indexdef` after `USING`, without the
    /// storage options (compared apart).
    fn method_key_and_predicate(&self) -> Option<String> {
        // The last `USING`: the schema and table before it may hold the word too.
        let (_, after_using) = self.definition.as_deref()?.rsplit_once(" USING ")?;
        let Some(start) = after_using.find(" WITH (") else {
            return Some(after_using.to_owned());
        };
        let end = start + after_using[start..].find(')')? + 1;
        Some(format!("{}{}", &after_using[..start], &after_using[end..]))
    }
}

/// Every function (by suffix) with its argument types.
const FUNCTIONS: &[(&str, &str)] = &[
    ("token_base", ""),
    ("request_lease", "text, text, bigint, interval, text"),
    (
        "request_leases",
        "text[], text[], bigint[], interval[], text",
    ),
    (
        "request_plain_leases",
        "text[], text[], bigint[], interval[], text",
    ),
    ("release_lease", "text, text, text"),
    ("release_leases", "text[], text, text"),
    ("check_fence", "text, bigint, text"),
];

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
    let table_names: Vec<String> = TABLES.iter().map(|(table, _)| prefix.name(table)).collect();
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

/// Fails with `Schema` naming the first object that is missing or differs from what this
/// storage uses; `exact` also compares the column defaults inserts rely on, index keys,
/// predicates and options and function bodies with the shipped DDL's, which a newer version
/// may have changed.
async fn validate_catalog(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
    exact: bool,
) -> StorageResult<()> {
    let failing = |e: sqlx::Error| catalog_failure(prefix, e);
    let table_names: Vec<String> = TABLES.iter().map(|(table, _)| prefix.name(table)).collect();
    let columns: Vec<(String, String, String, bool, Option<String>)> = sqlx::query_as(
        "SELECT t.name, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                pg_get_expr(d.adbin, d.adrelid) \
         FROM unnest($1::text[]) AS t(name) \
         JOIN pg_attribute AS a ON a.attrelid = to_regclass(t.name) \
         LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         WHERE a.attnum > 0 AND NOT a.attisdropped",
    )
    .bind(&table_names)
    .persistent(persistent)
    .fetch_all(&mut *connection)
    .await
    .map_err(failing)?;
    for ((_, expected), table) in TABLES.iter().zip(&table_names) {
        if !columns.iter().any(|(t, ..)| t == table) {
            return Err(schema_error(format!("table {table}"), "is missing"));
        }
        for &(column, data_type, not_null) in expected.iter() {
            let object = format!("column {table}.{column}");
            let Some((_, _, actual_type, actual_not_null, _)) =
                columns.iter().find(|(t, c, ..)| t == table && c == column)
            else {
                return Err(schema_error(object, "is missing"));
            };
            if !data_type
                .split(" or ")
                .any(|accepted| accepted == actual_type)
            {
                return Err(schema_error(
                    object,
                    format!("is {actual_type}, expected {data_type}"),
                ));
            }
            if *actual_not_null != not_null {
                let (actual, expected) = if not_null {
                    ("nullable", "NOT NULL")
                } else {
                    ("NOT NULL", "nullable")
                };
                return Err(schema_error(
                    object,
                    format!("is {actual}, expected {expected}"),
                ));
            }
        }
    }

    if exact {
        for (table, column, expected) in DEFAULTS {
            let table = prefix.name(table);
            let default = columns
                .iter()
                .find(|(t, c, ..)| *t == table && c == column)
                .and_then(|(.., default)| default.as_deref());
            if !expected.accepts(default) {
                let actual =
                    default.map_or_else(|| "no default".to_owned(), |d| format!("default {d}"));
                return Err(schema_error(
                    format!("column {table}.{column}"),
                    format!(
                        "has {actual}, expected {}: the storage's inserts leave the column to its \
                         default (the shipped DDL does not change an existing column's default)",
                        expected.describe()
                    ),
                ));
            }
        }
    }

    let index_names: Vec<String> = INDEXES
        .iter()
        .map(|index| prefix.name(index.suffix))
        .collect();
    let indexes: Vec<CatalogIndex> = sqlx::query_as(
        "SELECT t.name, c.relname::text AS table_name, i.indisunique AS is_unique, \
                pg_get_indexdef(i.indexrelid) AS definition, \
                coalesce(ic.reloptions, '{}')::text[] AS options \
         FROM unnest($1::text[]) AS t(name) \
         LEFT JOIN pg_index AS i ON i.indexrelid = to_regclass(t.name) \
         LEFT JOIN pg_class AS c ON c.oid = i.indrelid \
         LEFT JOIN pg_class AS ic ON ic.oid = i.indexrelid",
    )
    .bind(&index_names)
    .persistent(persistent)
    .fetch_all(&mut *connection)
    .await
    .map_err(failing)?;
    for (expected, name) in INDEXES.iter().zip(&index_names) {
        let table = prefix.name(expected.table);
        let object = format!("index {name}");
        match indexes.iter().find(|index| index.name == *name) {
            Some(
                found @ CatalogIndex {
                    table_name: Some(on),
                    is_unique: Some(is_unique),
                    options,
                    ..
                },
            ) => {
                if *on != table {
                    return Err(schema_error(
                        object,
                        format!("is on table {on}, expected {table}"),
                    ));
                }
                if *is_unique != expected.unique {
                    return Err(schema_error(
                        object,
                        format!(
                            "is {}unique, expected otherwise",
                            if *is_unique { "" } else { "not " }
                        ),
                    ));
                }
                if !exact {
                    continue;
                }
                let definition = found.method_key_and_predicate().unwrap_or_default();
                if definition != expected.definition {
                    return Err(schema_error(
                        object,
                        format!(
                            "is {definition}, expected {}; the shipped DDL creates it as \
                             expected once it is dropped",
                            expected.definition
                        ),
                    ));
                }
                if let Some(missing) = expected
                    .options
                    .iter()
                    .find(|option| !options.iter().any(|set| set == *option))
                {
                    return Err(schema_error(
                        object,
                        format!("has options {options:?}, expected {missing}"),
                    ));
                }
            }
            _ => return Err(schema_error(object, format!("is missing on table {table}"))),
        }
    }

    let signatures: Vec<String> = FUNCTIONS
        .iter()
        .map(|(function, arguments)| format!("{}({arguments})", prefix.name(function)))
        .collect();
    // A function's search_path must be pinned to its own schema (see the end of the script).
    let sources: Vec<(String, Option<String>, Option<bool>)> = sqlx::query_as(
        "SELECT t.signature, p.prosrc, \
                coalesce(p.proconfig @> ARRAY['search_path=' || quote_ident(n.nspname) \
                                              || ', pg_temp'], false) \
         FROM unnest($1::text[]) AS t(signature) \
         LEFT JOIN pg_proc AS p ON p.oid = to_regprocedure(t.signature) \
         LEFT JOIN pg_namespace AS n ON n.oid = p.pronamespace",
    )
    .bind(&signatures)
    .persistent(persistent)
    .fetch_all(&mut *connection)
    .await
    .map_err(failing)?;
    let script = prefix.apply(SCHEMA_SQL);
    for (signature, shipped) in signatures.iter().zip(function_bodies(&script)) {
        let object = format!("function {signature}");
        match sources.iter().find(|(s, ..)| s == signature) {
            Some((_, Some(_), _)) if !exact => {}
            Some((_, Some(source), Some(true))) if source == shipped => {}
            Some((_, Some(source), _)) if source == shipped => {
                return Err(schema_error(
                    object,
                    "does not pin its search_path to its own schema and pg_temp \
                     (apply the shipped DDL again)",
                ))
            }
            Some((_, Some(_), _)) => {
                return Err(schema_error(
                    object,
                    "differs from the shipped definition (apply the shipped DDL again)",
                ))
            }
            _ => return Err(schema_error(object, "is missing")),
        }
    }
    Ok(())
}

/// The bodies of the functions `script` creates, in order: the text between each pair of
/// `$$` quotes, as PostgreSQL keeps it in `pg_proc.prosrc`.
fn function_bodies(script: &str) -> impl Iterator<Item = &str> {
    script.split("$$").skip(1).step_by(2)
}

fn schema_error(object: String, problem: impl Into<String>) -> EventStorageError {
    EventStorageError::schema(object, problem.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_creates_one_body_per_expected_function_in_order() {
        let bodies: Vec<&str> = function_bodies(SCHEMA_SQL).collect();
        assert_eq!(bodies.len(), FUNCTIONS.len());
        for ((name, _), body) in FUNCTIONS.iter().zip(&bodies) {
            let header = SCHEMA_SQL.split(body).next().unwrap();
            let last_function = header
                .rfind("CREATE OR REPLACE FUNCTION __prefix__")
                .unwrap();
            assert!(
                header[last_function..].contains(&format!("__prefix__{name}(")),
                "the body after {} is not {name}'s",
                &header[last_function..]
            );
        }
    }

    #[test]
    fn an_index_definition_is_read_after_its_last_using_without_its_options() {
        let index = |definition: &str| CatalogIndex {
            name: "i".into(),
            table_name: Some("t".into()),
            is_unique: Some(false),
            definition: Some(definition.into()),
            options: Vec::new(),
        };
        let cases = [
            (
                r#"CREATE INDEX p_events_tags_idx ON public.p_events USING gin (tags) WITH (gin_pending_list_limit='128')"#,
                "gin (tags)",
            ),
            (
                r#"CREATE UNIQUE INDEX p_events_pkey ON "rv USING x".p_events USING btree ("position")"#,
                r#"btree ("position")"#,
            ),
            (
                "CREATE UNIQUE INDEX i ON s.t USING btree (a) WITH (fillfactor='70') WHERE (a IS NOT NULL)",
                "btree (a) WHERE (a IS NOT NULL)",
            ),
        ];
        for (definition, expected) in cases {
            assert_eq!(
                index(definition).method_key_and_predicate().as_deref(),
                Some(expected),
                "{definition}"
            );
        }
    }

    #[test]
    fn every_expected_object_is_created_by_the_script() {
        for (table, columns) in TABLES {
            assert!(SCHEMA_SQL.contains(&format!("CREATE TABLE IF NOT EXISTS __prefix__{table} (")));
            for (column, ..) in columns.iter() {
                assert!(
                    SCHEMA_SQL.contains(&format!("    {column} ")),
                    "{table}.{column}"
                );
            }
        }
        for index in INDEXES {
            assert!(
                SCHEMA_SQL.contains(&format!("__prefix__{}", index.suffix)),
                "{}",
                index.suffix
            );
        }
    }

    #[test]
    fn every_expected_default_is_the_scripts() {
        for (table, column, expected) in DEFAULTS {
            let defined = SCHEMA_SQL
                .lines()
                .any(|line| match line.trim().strip_prefix(column) {
                    Some(rest) if rest.starts_with(' ') => match expected {
                        ExpectedDefault::Exactly(default) => {
                            rest.contains(&format!("DEFAULT {default}"))
                        }
                        ExpectedDefault::Sequence => rest.trim_start().starts_with("bigserial"),
                    },
                    _ => false,
                });
            assert!(defined, "{table}.{column}");
        }
    }
}
