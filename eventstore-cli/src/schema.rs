//! `eventstore schema print|check|apply|drop`: the PostgreSQL schema of one prefix.

use eventstore::EventStorage;
use eventstore_postgres::DatabaseInitMode;
use serde::Serialize;
use sqlx::Executor;

use crate::cli::{SchemaAction, StoreArgs};
use crate::failure::Failure;
use crate::output::{print_json, print_text};
use crate::store::{postgres_prefix, PostgresTarget, StoreDescription, Target};

/// The tables of one prefix, by suffix.
const TABLES: [&str; 5] = [
    "events",
    "event_tags",
    "bookmarks",
    "leases",
    "lease_contenders",
];

/// The JSON document of `eventstore schema ACTION --json`: the prefix, and what the action
/// found or did. A failure is a line on standard error, as for every command.
#[derive(Debug, Serialize)]
struct SchemaDocument {
    #[serde(flatten)]
    store: StoreDescription,
    #[serde(flatten)]
    outcome: Outcome,
}

/// What one action found or did, as its document's fields.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Outcome {
    /// `print`: the DDL with the prefix applied.
    Printed { sql: String },
    /// `check`: every table, index and function is in place.
    Checked { complete: bool },
    /// `apply`: the schema is complete; the tables it created and those that were in place.
    Applied {
        complete: bool,
        created: Vec<String>,
        in_place: Vec<String>,
    },
    /// `drop`: the tables it dropped.
    Dropped { dropped: Vec<String> },
}

/// Prints `text`, or with `--json` the document of `prefix` and `outcome`.
fn report(json: bool, text: &str, prefix: &str, outcome: Outcome) -> Result<(), Failure> {
    if !json {
        return print_text(text);
    }
    print_json(&SchemaDocument {
        store: StoreDescription {
            backend: "postgres",
            prefix: Some(prefix.to_owned()),
            dir: None,
        },
        outcome,
    })
}

/// Runs `eventstore schema ACTION`.
///
/// # Errors
/// Usage for a file store, a bad prefix or a drop without `--yes`; a failed check when the
/// schema is incomplete (`check`), the prefix has none (`drop`) or the server cannot be
/// reached.
pub(crate) async fn run(args: &StoreArgs, action: SchemaAction, json: bool) -> Result<(), Failure> {
    if let Some(dir) = &args.dir {
        return Err(Failure::usage(format!(
            "schema commands are for PostgreSQL; {} is a file store, which needs no schema: \
             give --url (or DATABASE_URL) and --prefix instead of --dir",
            dir.display()
        )));
    }
    if let SchemaAction::Print = action {
        // Needs no database: the DDL of the prefix, as `schema apply` runs it.
        let prefix = postgres_prefix(args)?;
        let sql = eventstore_postgres::schema_sql(&prefix)
            .map_err(|error| Failure::usage(error.report()))?;
        let outcome = Outcome::Printed { sql: sql.clone() };
        return report(json, &sql, &prefix, outcome);
    }
    let Target::Postgres(target) = Target::from_args(args)? else {
        unreachable!("a file store was refused above");
    };
    match action {
        SchemaAction::Print => unreachable!("printed above"),
        SchemaAction::Check => check(&target, json).await,
        SchemaAction::Apply => apply(&target, json).await,
        SchemaAction::Drop { yes } => drop_schema(&target, yes, json).await,
    }
}

async fn check(target: &PostgresTarget, json: bool) -> Result<(), Failure> {
    let storage = target.open(DatabaseInitMode::Validate).await?;
    let _ = storage.close().await;
    let text = format!(
        "schema of prefix {} is complete: every table, index and function is in place\n",
        target.prefix
    );
    report(
        json,
        &text,
        &target.prefix,
        Outcome::Checked { complete: true },
    )
}

async fn apply(target: &PostgresTarget, json: bool) -> Result<(), Failure> {
    let storage = target.open(DatabaseInitMode::None).await?;
    let existing = existing_tables(&storage, &target.prefix).await?;
    let _ = storage.close().await;
    let storage = target.open(DatabaseInitMode::Ensure).await?;
    let _ = storage.close().await;
    let name = |table: &&str| format!("{}{table}", target.prefix);
    let created: Vec<String> = TABLES
        .iter()
        .map(name)
        .filter(|table| !existing.contains(table))
        .collect();
    let message = if created.is_empty() {
        format!(
            "schema of prefix {} is in place (checked, and created whatever was missing)\n",
            target.prefix
        )
    } else if existing.is_empty() {
        format!(
            "created the schema of prefix {}: tables {}\n",
            target.prefix,
            created.join(", ")
        )
    } else {
        format!(
            "completed the schema of prefix {}: created tables {}; tables {} were in place\n",
            target.prefix,
            created.join(", "),
            existing.join(", ")
        )
    };
    let outcome = Outcome::Applied {
        complete: true,
        created,
        in_place: existing,
    };
    report(json, &message, &target.prefix, outcome)
}

async fn drop_schema(target: &PostgresTarget, yes: bool, json: bool) -> Result<(), Failure> {
    let prefix = &target.prefix;
    if !yes {
        return Err(Failure::usage(format!(
            "schema drop deletes every event, bookmark and lease of prefix {prefix}; \
             add --yes to do it"
        )));
    }
    let storage = target.open(DatabaseInitMode::None).await?;
    let outcome = drop_existing(&storage, prefix).await;
    let _ = storage.close().await;
    let dropped = outcome?;
    let text = format!(
        "dropped the schema of prefix {prefix}: tables {}\n",
        dropped.join(", ")
    );
    report(json, &text, prefix, Outcome::Dropped { dropped })
}

async fn drop_existing(
    storage: &eventstore_postgres::PostgresEventStorage,
    prefix: &str,
) -> Result<Vec<String>, Failure> {
    let existing = existing_tables(storage, prefix).await?;
    if existing.is_empty() {
        return Err(Failure::check(format!(
            "no schema of prefix {prefix} in this database: none of its tables exists, \
             nothing dropped"
        )));
    }
    let script =
        eventstore_postgres::drop_sql(prefix).map_err(|error| Failure::usage(error.report()))?;
    let failed = |error: sqlx::Error| {
        Failure::check(format!(
            "dropping the schema of prefix {prefix} failed, nothing dropped: {error}"
        ))
    };
    let mut transaction = storage.pool().begin().await.map_err(failed)?;
    transaction.execute(script.as_str()).await.map_err(failed)?;
    transaction.commit().await.map_err(failed)?;
    Ok(existing)
}

/// The tables of `prefix` that exist.
async fn existing_tables(
    storage: &eventstore_postgres::PostgresEventStorage,
    prefix: &str,
) -> Result<Vec<String>, Failure> {
    let names: Vec<String> = TABLES
        .iter()
        .map(|table| format!("{prefix}{table}"))
        .collect();
    let failed = |error: sqlx::Error| Failure::check(format!("cannot read the catalog: {error}"));
    // Unnamed, in a transaction of its own: a pooler in transaction mode may hand the next
    // statement to another server connection, where a named one would clash or be missing.
    let mut transaction = storage.pool().begin().await.map_err(failed)?;
    let existing = sqlx::query_scalar(
        "SELECT t.name FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n) \
         WHERE to_regclass(t.name) IS NOT NULL ORDER BY t.n",
    )
    .bind(&names)
    .persistent(false)
    .fetch_all(&mut *transaction)
    .await
    .map_err(failed)?;
    transaction.commit().await.map_err(failed)?;
    Ok(existing)
}
