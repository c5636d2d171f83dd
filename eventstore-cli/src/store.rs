//! The store a command looks at: PostgreSQL (`--url`, `--prefix`) or a file store (`--dir`),
//! opened so that nothing is created.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore::{EventStorage, EventStorageError};
use eventstore_file::FileEventStorage;
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage, DEFAULT_PREFIX};
use serde::Serialize;
use sqlx::{Connection, PgConnection};

use crate::cli::StoreArgs;
use crate::failure::Failure;
use crate::output::printable;

/// How long a command waits for a PostgreSQL connection before saying it cannot connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a PostgreSQL store is: its url and a valid prefix.
#[derive(Debug, Clone)]
pub(crate) struct PostgresTarget {
    url: String,
    /// The table prefix, checked against the prefix rule.
    pub(crate) prefix: String,
}

/// The store the command line names.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A PostgreSQL store.
    Postgres(PostgresTarget),
    /// A file store's directory.
    File(PathBuf),
}

impl Target {
    /// The store `args` name.
    ///
    /// # Errors
    /// Usage: no store named, or a prefix that breaks the prefix rule.
    pub(crate) fn from_args(args: &StoreArgs) -> Result<Target, Failure> {
        if let Some(dir) = &args.dir {
            return Ok(Target::File(dir.clone()));
        }
        let url = match &args.url {
            Some(url) => url.clone(),
            None => match std::env::var("DATABASE_URL") {
                Ok(url) if !url.is_empty() => url,
                _ => {
                    return Err(Failure::usage(
                        "no store given: --url URL (or DATABASE_URL) and --prefix for \
                         PostgreSQL, or --dir DIR for a file store",
                    ))
                }
            },
        };
        let prefix = postgres_prefix(args)?;
        Ok(Target::Postgres(PostgresTarget { url, prefix }))
    }
}

/// The prefix `args` give (or the default), checked against the prefix rule.
///
/// # Errors
/// Usage, naming the prefix and the rule.
pub(crate) fn postgres_prefix(args: &StoreArgs) -> Result<String, Failure> {
    let prefix = args.prefix.as_deref().unwrap_or(DEFAULT_PREFIX).to_owned();
    eventstore_postgres::schema_sql(&prefix).map_err(|error| Failure::usage(error.report()))?;
    Ok(prefix)
}

impl PostgresTarget {
    /// Connects and prepares the schema as `mode` says.
    ///
    /// # Errors
    /// Usage for a url that is not one; a failed check when the server cannot be reached or,
    /// under [`DatabaseInitMode::Validate`], when the prefix has no complete schema.
    pub(crate) async fn open(
        &self,
        mode: DatabaseInitMode,
    ) -> Result<PostgresEventStorage, Failure> {
        self.try_connection().await?;
        PostgresEventStorage::builder()
            .url(&self.url)
            .prefix(&self.prefix)
            .init_mode(mode)
            .max_connections(2)
            .acquire_timeout(CONNECT_TIMEOUT)
            .build()
            .await
            .map_err(|error| self.refusal(&error, mode))
    }

    /// Connects once, so that a server that cannot be reached is reported with the reason
    /// (refused, unknown host, authentication), not as a pool that timed out.
    async fn try_connection(&self) -> Result<(), Failure> {
        if !eventstore_postgres::is_postgres_url(&self.url) {
            return Err(Failure::usage(
                "--url is not a PostgreSQL url: it must start with postgres:// or postgresql://",
            ));
        }
        // As the storage connects: behind a pooler (`?pgbouncer=true`) without the startup
        // settings a pooler refuses.
        let options = eventstore_postgres::connect_options(&self.url).map_err(|error| {
            Failure::usage(format!("--url is not a PostgreSQL url: {}", error.report()))
        })?;
        let server = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("")
        );
        let refused = |reason: String| {
            Failure::check(format!(
                "cannot connect to PostgreSQL at {server}: {reason}"
            ))
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options)).await {
            Ok(Ok(connection)) => {
                let _ = connection.close().await;
                Ok(())
            }
            Ok(Err(error)) => Err(refused(error.to_string())),
            Err(_) => Err(refused(format!("no answer within {CONNECT_TIMEOUT:?}"))),
        }
    }

    /// The failure for an error of `build` under `mode`.
    pub(crate) fn refusal(&self, error: &EventStorageError, mode: DatabaseInitMode) -> Failure {
        let prefix = &self.prefix;
        match error {
            // Tables of a newer version: no command of this one may change them.
            EventStorageError::Schema { .. } if eventstore_postgres::is_newer_schema(error) => {
                Failure::check(format!(
                    "the schema of prefix {prefix} is of a newer version: {error} (use an \
                     `eventstore` command of that version)"
                ))
            }
            // What `schema apply` (Ensure) cannot repair: it changes no existing object.
            EventStorageError::Schema { .. } if mode == DatabaseInitMode::Ensure => {
                Failure::check(format!(
                    "the schema of prefix {prefix} cannot be completed: {error} (an object \
                     that exists with another definition is left to the operator: change or \
                     drop it by hand, then run `eventstore schema apply` again)"
                ))
            }
            EventStorageError::Schema {
                object, problem, ..
            } if *object == format!("table {prefix}events") && problem == "is missing" => {
                Failure::check(format!(
                    "unknown prefix {prefix}: this database has no table {prefix}events \
                     (`eventstore schema apply --prefix {prefix}` creates the schema)"
                ))
            }
            EventStorageError::Schema { .. } => Failure::check(format!(
                "the schema of prefix {prefix} is incomplete: {error} \
                 (`eventstore schema apply --prefix {prefix}` creates what is missing)"
            )),
            EventStorageError::InvalidInput { .. } => Failure::usage(error.report()),
            // The server answered a connection just before (`try_connection`): what failed
            // came after, such as a read-only session refusing DDL or a lock timeout.
            _ => Failure::check(format!(
                "opening the store of prefix {prefix} failed: {}",
                error.report()
            )),
        }
    }
}

/// What a document says about the store it describes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StoreDescription {
    /// `postgres` or `file`.
    pub(crate) backend: &'static str,
    /// The table prefix (PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prefix: Option<String>,
    /// The directory (file store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dir: Option<String>,
}

/// As the header lines name it: the directory [`printable`], since a name may hold any
/// character and must not break the header into lines of its own.
impl std::fmt::Display for StoreDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.prefix, &self.dir) {
            (Some(prefix), _) => write!(f, "postgres, prefix {prefix}"),
            (_, Some(dir)) => write!(f, "file store {}", printable(dir)),
            _ => f.write_str(self.backend),
        }
    }
}

/// A store opened for reading.
#[derive(Debug)]
pub(crate) enum OpenStore {
    /// PostgreSQL, its schema validated.
    Postgres(PostgresEventStorage),
    /// A file store, opened read-only.
    File(FileEventStorage),
}

impl OpenStore {
    /// Opens the store `target` names for reading: the schema validated (never created), a
    /// file store read-only.
    ///
    /// # Errors
    /// See [`PostgresTarget::open`]; a failed check when the directory is no store.
    pub(crate) async fn open(target: &Target) -> Result<OpenStore, Failure> {
        match target {
            Target::Postgres(postgres) => Ok(OpenStore::Postgres(
                postgres.open(DatabaseInitMode::Validate).await?,
            )),
            Target::File(dir) => FileEventStorage::open_read_only(dir)
                .await
                .map(OpenStore::File)
                .map_err(|error| Failure::check(error.report())),
        }
    }

    /// The storage.
    pub(crate) fn storage(&self) -> &dyn EventStorage {
        match self {
            OpenStore::Postgres(storage) => storage,
            OpenStore::File(storage) => storage,
        }
    }

    /// What the documents say about this store.
    pub(crate) fn description(&self) -> StoreDescription {
        match self {
            OpenStore::Postgres(storage) => StoreDescription {
                backend: "postgres",
                prefix: Some(storage.prefix().to_owned()),
                dir: None,
            },
            OpenStore::File(storage) => StoreDescription {
                backend: "file",
                prefix: None,
                dir: Some(storage.directory().display().to_string()),
            },
        }
    }

    /// Now on the storage's clock: PostgreSQL's `now()`; for a file store the clock of this
    /// machine, which is the clock the store's own process uses (it runs where its
    /// directory is).
    ///
    /// # Errors
    /// A failed check when the storage cannot answer.
    pub(crate) async fn storage_time(&self) -> Result<DateTime<Utc>, Failure> {
        match self {
            OpenStore::Postgres(storage) => storage
                .storage_time()
                .await
                .map_err(|error| Failure::storage("cannot read the storage's clock", &error)),
            OpenStore::File(_) => Ok(Utc::now()),
        }
    }

    /// Closes the storage (for PostgreSQL, its pool).
    pub(crate) async fn close(self) {
        let _ = self.storage().close().await;
    }
}
