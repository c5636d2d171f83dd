//! The shipped SQL: the schema script, the script that drops a prefix, and the least grants
//! of an application role, each with `__prefix__` where the prefix goes.

use eventstore_api::StorageResult;

#[cfg(doc)]
use super::init_mode::DatabaseInitMode;
use super::prefix::TablePrefix;

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
