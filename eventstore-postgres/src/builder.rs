//! Configuring and opening a [`PostgresEventStorage`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use eventstore_api::EventStorageError;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};

use crate::connections::connection_health::{ConnectionHealth, Handling};
use crate::connections::pooler_parameter;
use crate::connections::settings::Settings;
use crate::schema;
use crate::schema::prefix::TablePrefix;
use crate::schema::DatabaseInitMode;
use crate::storage::PostgresEventStorage;

/// The prefix used when the builder is given none.
pub const DEFAULT_PREFIX: &str = "eventstore_";

/// How long a connection of the storage's own pool lives by default; see
/// [`PostgresEventStorageBuilder::max_lifetime`].
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// How often the listener's connection must answer by default; see
/// [`PostgresEventStorageBuilder::listener_heartbeat`].
pub const DEFAULT_LISTENER_HEARTBEAT: Duration = Duration::from_secs(10);

/// The shortest heartbeat accepted: a shorter one would mostly measure the server's load.
const MIN_LISTENER_HEARTBEAT: Duration = Duration::from_millis(50);

/// PostgreSQL's longest `lock_timeout`: its milliseconds must fit in an `int4`.
const MAX_LOCK_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The longest wait any other setting takes, far beyond any sensible one: longer waits
/// (`Duration::MAX` for "forever") overflow the clock's arithmetic.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Where the connections come from.
enum Source {
    Url(String),
    Pool(PgPool),
}

/// Builds a [`PostgresEventStorage`]; start with [`PostgresEventStorage::builder`].
///
/// # Examples
/// ```no_run
/// # async fn open() -> Result<(), eventstore_api::EventStorageError> {
/// use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
/// let storage = PostgresEventStorage::builder()
///     .url("postgres://postgres@127.0.0.1:5432/app")
///     .prefix("tenant1_")
///     .init_mode(DatabaseInitMode::Ensure)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct PostgresEventStorageBuilder {
    source: Option<Source>,
    listen_url: Option<String>,
    prefix: String,
    init_mode: DatabaseInitMode,
    lock_timeout: Duration,
    visibility_wait: Duration,
    max_connections: u32,
    min_connections: u32,
    acquire_timeout: Duration,
    idle_timeout: Option<Duration>,
    max_lifetime: Option<Duration>,
    listener_heartbeat: Duration,
    append_hints: bool,
    prepared_statements: Option<bool>,
}

impl Default for PostgresEventStorageBuilder {
    fn default() -> Self {
        PostgresEventStorageBuilder {
            source: None,
            listen_url: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            init_mode: DatabaseInitMode::default(),
            lock_timeout: Duration::from_secs(10),
            visibility_wait: Duration::from_secs(1),
            max_connections: 10,
            min_connections: 0,
            acquire_timeout: Duration::from_secs(30),
            idle_timeout: Some(Duration::from_secs(600)),
            max_lifetime: Some(DEFAULT_MAX_LIFETIME),
            listener_heartbeat: DEFAULT_LISTENER_HEARTBEAT,
            append_hints: false,
            prepared_statements: None,
        }
    }
}

// Here rather than beside the storage, so that the storage does not depend on its builder.
impl PostgresEventStorage {
    /// A builder; give it a `url` or a `pool`, then `build`.
    pub fn builder() -> PostgresEventStorageBuilder {
        PostgresEventStorageBuilder::default()
    }
}

impl fmt::Debug for PostgresEventStorageBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            None => "none",
            Some(Source::Url(_)) => "url (hidden: it may hold a password)",
            Some(Source::Pool(_)) => "caller's pool",
        };
        let listen_url = match &self.listen_url {
            None => "none: the storage's own connection settings",
            Some(_) => "given (hidden: it may hold a password)",
        };
        f.debug_struct("PostgresEventStorageBuilder")
            .field("source", &source)
            .field("listen_url", &listen_url)
            .field("prefix", &self.prefix)
            .field("init_mode", &self.init_mode)
            .field("lock_timeout", &self.lock_timeout)
            .field("visibility_wait", &self.visibility_wait)
            .field("max_connections", &self.max_connections)
            .field("min_connections", &self.min_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_lifetime", &self.max_lifetime)
            .field("listener_heartbeat", &self.listener_heartbeat)
            .field("append_hints", &self.append_hints)
            .field("prepared_statements", &self.prepared_statements)
            .finish()
    }
}

impl PostgresEventStorageBuilder {
    /// Connects with a pool of the storage's own, opened from `url`
    /// (`postgres://user:password@host:port/database`); [`close`] closes it.
    ///
    /// The parameter `pgbouncer=true` (as in `postgres://app@pooler:6432/db?pgbouncer=true`)
    /// says the url reaches the server through a pooler in transaction mode, and does what
    /// [`prepared_statements(false)`](Self::prepared_statements) does; the storage removes it
    /// before the url reaches the driver.
    ///
    /// [`close`]: eventstore_api::EventStorage::close
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.source = Some(Source::Url(url.into()));
        self
    }

    /// Uses the caller's pool. The storage never closes it, and the pool options of this
    /// builder do not apply to it.
    ///
    /// Its connections must default to `READ COMMITTED` (PostgreSQL's default): lease calls
    /// on a connection whose `transaction_isolation` is another level are refused with an
    /// error naming it. The storage's own transactions set `READ COMMITTED` themselves.
    pub fn pool(mut self, pool: PgPool) -> Self {
        self.source = Some(Source::Pool(pool));
        self
    }

    /// Connects the notification listener (lease changes and append hints) with `url`
    /// instead of the storage's own url or the pool's connection settings: a direct
    /// connection to the server where the storage goes through a transaction-pooling
    /// PgBouncer, which cannot `LISTEN`.
    ///
    /// Without prepared statements ([`prepared_statements(false)`](Self::prepared_statements)
    /// or `pgbouncer=true`) and without a listen url, the storage has no connection that can
    /// `LISTEN`: it offers neither [`Capability::LeaseChanges`] nor
    /// [`Capability::AppendHints`], and electors and projectors on it poll.
    ///
    /// The storage opens one listener connection (`application_name` `eventstore-listener`),
    /// at the first [`subscribe_lease_changes`] or [`subscribe_appends`]. When it cannot
    /// connect or `LISTEN`, it logs a warning, keeps retrying with backoff, and subscriptions
    /// stay silent meanwhile: neither lease decisions nor reads depend on it.
    ///
    /// [`subscribe_lease_changes`]: eventstore_api::EventStorageExt::subscribe_lease_changes
    /// [`subscribe_appends`]: eventstore_api::EventStorageExt::subscribe_appends
    /// [`Capability::LeaseChanges`]: eventstore_api::Capability::LeaseChanges
    /// [`Capability::AppendHints`]: eventstore_api::Capability::AppendHints
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Starts every table, index and function name with `prefix`, which must match
    /// `^[a-z][a-z0-9_]{0,30}_$` (default [`DEFAULT_PREFIX`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What `build` does to the schema (default [`DatabaseInitMode::Ensure`]).
    pub fn init_mode(mut self, init_mode: DatabaseInitMode) -> Self {
        self.init_mode = init_mode;
        self
    }

    /// The longest any statement waits for a lock (default 10 s, at least 1 ms, at most
    /// PostgreSQL's limit of 2,147,483,647 ms); waiting longer fails with
    /// [`EventStorageError::Timeout`] and changes nothing.
    pub fn lock_timeout(mut self, lock_timeout: Duration) -> Self {
        self.lock_timeout = lock_timeout;
        self
    }

    /// How long an append waits, after it commits, for its events to pass the visibility
    /// barrier, so that a read right after the append, from any process, sees them (default
    /// 1 s). An append whose insert saw no older transaction running returns right after its
    /// commit; the others ask once more and wait only while an older writing transaction is
    /// still open. [`Duration::ZERO`] always returns right after the commit.
    ///
    /// A conditional append refused with `OptimisticLock` waits the same way for the event it
    /// conflicts with, when that event is not yet readable, so that reading again and
    /// deciding again sees it.
    pub fn visibility_wait(mut self, visibility_wait: Duration) -> Self {
        self.visibility_wait = visibility_wait;
        self
    }

    /// The most connections the storage's own pool opens (default 10).
    pub fn max_connections(mut self, max_connections: u32) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// The connections the storage's own pool keeps open when idle (default 0).
    pub fn min_connections(mut self, min_connections: u32) -> Self {
        self.min_connections = min_connections;
        self
    }

    /// How long a call waits for a pooled connection (default 30 s); waiting longer fails
    /// with [`EventStorageError::Timeout`].
    pub fn acquire_timeout(mut self, acquire_timeout: Duration) -> Self {
        self.acquire_timeout = acquire_timeout;
        self
    }

    /// How long an idle connection of the storage's own pool stays open (default 10 min;
    /// `None` keeps it).
    pub fn idle_timeout(mut self, idle_timeout: Option<Duration>) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// How long a connection of the storage's own pool lives before it is replaced at its next
    /// return to the pool (default [`DEFAULT_MAX_LIFETIME`], 10 min; `None` keeps it).
    ///
    /// Connections follow the server's address when they are made: after a failover behind a
    /// DNS name or a virtual address, old sessions may still reach the former primary, and
    /// this bounds how long they do. A write refused because its session is read-only (the
    /// server it reached is a standby, SQLSTATE `25006`) does not wait for it: every
    /// connection made before that refusal is replaced before its next use.
    pub fn max_lifetime(mut self, max_lifetime: Option<Duration>) -> Self {
        self.max_lifetime = max_lifetime;
        self
    }

    /// How often the notification listener's connection must answer a query, and deliver a
    /// notification (default [`DEFAULT_LISTENER_HEARTBEAT`], 10 s; at least 50 ms).
    ///
    /// A server that vanished without closing the connection (a failed host, a dropped
    /// network path) leaves the listener waiting on a socket that never delivers again; a
    /// pooler in transaction mode may run the listener's `LISTEN` on a server connection it
    /// then hands to other clients, so that notifications are lost while queries work. Every
    /// interval the listener notifies a channel only it listens on. A connection that does
    /// not answer within the interval, or whose notice has not come back by the next one, is
    /// taken as lost: the listener reconnects, and subscribers are told they may have missed
    /// notices ([`LeaseNotice::Missed`]), so that electors ask the storage at once instead of
    /// waiting for their next poll.
    ///
    /// [`LeaseNotice::Missed`]: eventstore_api::LeaseNotice::Missed
    pub fn listener_heartbeat(mut self, heartbeat: Duration) -> Self {
        self.listener_heartbeat = heartbeat;
        self
    }

    /// Whether each append notifies the storage's subscribers to append hints (default
    /// `false`).
    ///
    /// When on, the storage offers [`Capability::AppendHints`]: every append's insert calls
    /// `pg_notify` on `<prefix>appends` once, so that [`subscribe_appends`] wakes readers
    /// (such as elected projectors) at each commit instead of at their next poll. It costs
    /// concurrent writers: PostgreSQL serializes the commits of notifying transactions under
    /// one cluster-wide lock held through the commit's WAL flush, so appends no longer share
    /// their flushes. Measured (`docs/BENCHMARKS.md`), 8 clients appending one event each
    /// fell from a median of 2431 to 968 appends/s, one client paid about a tenth more per
    /// append, and batches of 100 cost the same.
    ///
    /// When off, appends send no notification, [`supports`] says no to
    /// [`Capability::AppendHints`] and [`subscribe_appends`] is `Unsupported`: readers poll.
    ///
    /// [`Capability::AppendHints`]: eventstore_api::Capability::AppendHints
    /// [`subscribe_appends`]: eventstore_api::EventStorageExt::subscribe_appends
    /// [`supports`]: eventstore_api::EventStorage::supports
    pub fn append_hints(mut self, append_hints: bool) -> Self {
        self.append_hints = append_hints;
        self
    }

    /// Whether statements are prepared under names each connection caches (default `true`).
    ///
    /// `false` is for a pooler in transaction mode (PgBouncer's `pool_mode = transaction`),
    /// which hands the server connection to another client between transactions: every
    /// statement is then unnamed, and every call runs in a transaction of its own so that the
    /// statement's parse and bind reach one server connection. Nothing relies on session
    /// state: no prepared statement, session setting or session lock outlives a transaction.
    /// The storage's own pool then sends no session settings at startup either (PgBouncer
    /// refuses unknown startup parameters): its transactions set `READ COMMITTED` themselves.
    /// Calls cost more round trips: measured in `docs/BENCHMARKS.md`.
    ///
    /// Notifications need a session that `LISTEN`s, which a pooler in transaction mode cannot
    /// keep: give a direct connection with [`listen_url`](Self::listen_url), or the storage
    /// offers no push (see there).
    ///
    /// The url parameter `pgbouncer=true` sets this to `false`; a value set here wins. With a
    /// caller's [`pool`](Self::pool) behind a pooler, set it here: sqlx's
    /// `statement_cache_capacity(0)` alone still prepares every statement under a new name.
    pub fn prepared_statements(mut self, prepared_statements: bool) -> Self {
        self.prepared_statements = Some(prepared_statements);
        self
    }

    /// Refuses a duration setting out of its range, naming it: a lock timeout beyond what
    /// PostgreSQL takes, or any wait so long that adding it to the clock overflows
    /// (`Duration::MAX` for "forever", say).
    fn check_durations(&self) -> Result<(), EventStorageError> {
        let out_of_range = |field: &str, value: Duration, rule: String| {
            Err(EventStorageError::invalid(
                field,
                format!("{value:?}"),
                rule,
            ))
        };
        if self.lock_timeout < Duration::from_millis(1) {
            return out_of_range(
                "lock timeout",
                self.lock_timeout,
                "must be at least 1ms (PostgreSQL reads 0 as no timeout at all)".to_owned(),
            );
        }
        if self.lock_timeout > MAX_LOCK_TIMEOUT {
            return out_of_range(
                "lock timeout",
                self.lock_timeout,
                format!("must be at most {MAX_LOCK_TIMEOUT:?}, the longest PostgreSQL takes"),
            );
        }
        if self.listener_heartbeat < MIN_LISTENER_HEARTBEAT {
            return out_of_range(
                "listener heartbeat",
                self.listener_heartbeat,
                format!("must be at least {MIN_LISTENER_HEARTBEAT:?}"),
            );
        }
        let waits = [
            ("listener heartbeat", Some(self.listener_heartbeat)),
            ("visibility wait", Some(self.visibility_wait)),
            ("acquire timeout", Some(self.acquire_timeout)),
            ("idle timeout", self.idle_timeout),
            ("max lifetime", self.max_lifetime),
        ];
        for (field, value) in waits {
            if let Some(value) = value.filter(|value| *value > MAX_WAIT) {
                return out_of_range(
                    field,
                    value,
                    format!("must be at most {MAX_WAIT:?} (365 days)"),
                );
            }
        }
        Ok(())
    }

    /// Checks the settings, connects and prepares the schema as the init mode says.
    ///
    /// # Errors
    /// `InvalidInput` for a bad prefix, url or setting (before any connection is made),
    /// `Schema` when validation fails, `Timeout` or `Backend` when the database cannot be
    /// reached or refuses.
    pub async fn build(self) -> Result<PostgresEventStorage, EventStorageError> {
        let prefix = TablePrefix::parse(&self.prefix)?;
        self.check_durations()?;
        let listen_options = match &self.listen_url {
            None => None,
            Some(url) => {
                let (url, pooled) = pooler_parameter::take("listen url", url)?;
                if pooled == Some(true) {
                    return Err(EventStorageError::invalid(
                        "listen url",
                        "pgbouncer=true",
                        "must reach the server directly: a pooler in transaction mode cannot LISTEN",
                    ));
                }
                Some(parse_url("listen url", &url)?)
            }
        };
        let (source, pooled) = match self.source {
            Some(Source::Url(url)) => {
                let (url, pooled) = pooler_parameter::take("database url", &url)?;
                (Some(Source::Url(url)), pooled)
            }
            other => (other, None),
        };
        let prepared_statements = self
            .prepared_statements
            .or(pooled.map(|pooled| !pooled))
            .unwrap_or(true);
        let mut settings = Settings {
            lock_timeout: self.lock_timeout,
            visibility_wait: self.visibility_wait,
            acquire_timeout: self.acquire_timeout,
            append_hints: self.append_hints,
            prepared_statements,
            // The storage's own pool on direct connections; see the options below.
            session_defaults: prepared_statements && matches!(source, Some(Source::Url(_))),
            push: prepared_statements || listen_options.is_some(),
            listener_heartbeat: self.listener_heartbeat,
            health: Arc::new(ConnectionHealth::new()),
        };
        let (pool, owns_pool, listen_options) = match source {
            None => {
                return Err(EventStorageError::invalid(
                    "database",
                    "",
                    "no connection given; call url(..) or pool(..) on the builder",
                ))
            }
            Some(Source::Pool(pool)) => {
                settings.acquire_timeout = pool.options().get_acquire_timeout();
                let pool_options = PgConnectOptions::clone(&pool.connect_options());
                (pool, false, listen_options.unwrap_or(pool_options))
            }
            Some(Source::Url(url)) => {
                let options = parse_url("database url", &url)?;
                let listen_options = listen_options.unwrap_or_else(|| options.clone());
                if self.max_connections == 0 || self.min_connections > self.max_connections {
                    return Err(EventStorageError::invalid(
                        "pool size",
                        format!("min {} max {}", self.min_connections, self.max_connections),
                        "needs 1 <= max_connections and min_connections <= max_connections",
                    ));
                }
                let options = options.application_name("eventstore");
                let options = if prepared_statements {
                    // Lease decisions and checks after a lock wait need a fresh snapshot per
                    // statement, whatever the database's default; and a statement that sets
                    // no lock timeout of its own waits no longer than the configured one.
                    options.options([
                        ("default_transaction_isolation", "read\\ committed"),
                        ("lock_timeout", &settings.lock_timeout_setting()),
                    ])
                } else {
                    // Behind a pooler, whose startup accepts no other settings: every call
                    // runs in a transaction that sets READ COMMITTED itself.
                    options.extra_float_digits(None)
                };
                let pool = PgPoolOptions::new()
                    .max_connections(self.max_connections)
                    .min_connections(self.min_connections)
                    .acquire_timeout(self.acquire_timeout)
                    .idle_timeout(self.idle_timeout)
                    .max_lifetime(self.max_lifetime)
                    // The driver's default pings every connection it hands out, a round trip
                    // before every call; the storage pings only those it has reason to doubt.
                    .test_before_acquire(false)
                    .before_acquire({
                        let health = Arc::clone(&settings.health);
                        move |connection, metadata| {
                            let (handling, delegated) =
                                health.on_acquire(metadata.age, metadata.idle_for);
                            Box::pin(async move {
                                // A call taking its connection through the health's acquire
                                // sees to it there, with a timeout.
                                if delegated {
                                    return Ok(true);
                                }
                                match handling {
                                    Handling::Use => Ok(true),
                                    Handling::Ping => connection.ping().await.map(|()| true),
                                    Handling::Discard => Ok(false),
                                }
                            })
                        }
                    })
                    // Before the pool's own ping of a connection back from a call, which has
                    // no limit: see `ConnectionHealth::keep_released`.
                    .after_release({
                        let health = Arc::clone(&settings.health);
                        move |connection, _metadata| {
                            let health = Arc::clone(&health);
                            Box::pin(async move { health.keep_released(connection).await })
                        }
                    })
                    .connect_with(options)
                    .await
                    .map_err(|error| settings.failing("connect").map(error))?;
                (pool, true, listen_options)
            }
        };
        if let Err(error) = schema::initialize(&pool, &prefix, self.init_mode, &settings).await {
            if owns_pool {
                pool.close().await;
            }
            return Err(error);
        }
        Ok(PostgresEventStorage::new(
            pool,
            owns_pool,
            prefix,
            settings,
            listen_options,
        ))
    }
}

/// Whether `url` names PostgreSQL's scheme, `postgres://` or `postgresql://` (in any case):
/// the driver reads the rest of any url alike, so `mysql://…` would otherwise connect to a
/// PostgreSQL server as if nothing were wrong.
pub fn is_postgres_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

/// The connection settings of a database url as the storage connects with them: without
/// its `pgbouncer` parameter and, behind a pooler (`?pgbouncer=true`), without the startup
/// settings a pooler refuses. For tools that connect beside the storage, to a url the storage
/// takes.
///
/// # Errors
/// `InvalidInput` for a url that is not a PostgreSQL url, or a `pgbouncer` value other than
/// `true` or `false`.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, EventStorageError> {
    let (url, pooled) = pooler_parameter::take("database url", url)?;
    let options = parse_url("database url", &url)?;
    Ok(match pooled {
        Some(true) => options.extra_float_digits(None),
        _ => options,
    })
}

/// The connection settings in `url`, or `InvalidInput` naming `field` without showing the
/// url, which may hold a password.
fn parse_url(field: &str, url: &str) -> Result<PgConnectOptions, EventStorageError> {
    if !is_postgres_url(url) {
        return Err(EventStorageError::invalid(
            field,
            "(hidden: it may hold a password)",
            "is not a PostgreSQL url: it must start with postgres:// or postgresql://",
        ));
    }
    PgConnectOptions::from_str(url).map_err(|error| {
        EventStorageError::invalid(
            field,
            "(hidden: it may hold a password)",
            format!("is not a PostgreSQL url: {error}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_postgres_schemes_are_postgres_urls() {
        for url in [
            "postgres://h/db",
            "postgresql://u@h:5432/db",
            "POSTGRES://h",
        ] {
            assert!(is_postgres_url(url), "{url}");
        }
        for url in [
            "mysql://root@h/db",
            "http://h",
            "postgres:/h",
            "not a url",
            "",
        ] {
            assert!(!is_postgres_url(url), "{url}");
        }
    }

    #[tokio::test]
    async fn a_url_of_another_scheme_is_refused_before_connecting() {
        // Port 1: were it read as PostgreSQL's, the error would be a failed connection.
        let result = PostgresEventStorage::builder()
            .url("mysql://postgres@127.0.0.1:1/test")
            .build()
            .await;
        match result {
            Err(EventStorageError::InvalidInput { field, problem, .. }) => {
                assert_eq!(field, "database url");
                assert!(problem.contains("postgres://"), "{problem}");
            }
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }
}
