//! A login role of a test's own, with the shipped grants on the test's prefix: for tests
//! that connect as an application would, not as the superuser.

use eventstore::EventStorage;
use eventstore_postgres::GRANTS_SQL;
use sqlx::{Executor, PgPool};

/// Under the PgBouncer pass these tests skip: the pooler's auth file lists `postgres` only.
pub const WHY_DIRECT: &str =
    "it connects as a role of its own, which the pooler's auth file does not list";

/// Creates the schema of `prefix` (as the superuser), then the login role `{prefix}{suffix}`
/// with the shipped grants on it, and returns the role's name.
pub async fn create(admin: &PgPool, prefix: &str, suffix: &str) -> String {
    crate::common::storage_on(prefix)
        .await
        .close()
        .await
        .unwrap();
    let role = format!("{prefix}{suffix}");
    let grants = GRANTS_SQL
        .replace("__prefix__", prefix)
        .replace("__app_role__", &role);
    admin
        .execute(format!("CREATE ROLE {role} LOGIN; {grants}").as_str())
        .await
        .expect("creating the role with the shipped grants");
    role
}

/// Drops `role` and what it owns: roles belong to the whole server, not to a prefix.
pub async fn drop(admin: &PgPool, role: &str) {
    admin
        .execute(format!("DROP OWNED BY {role}; DROP ROLE {role}").as_str())
        .await
        .unwrap();
}
