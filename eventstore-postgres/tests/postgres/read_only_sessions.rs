//! Sessions that reached a read-only server: after a failover behind a DNS name or a virtual
//! address, the pool's old sessions may still reach the former primary, now a standby, and
//! every write on them is refused (SQLSTATE 25006). The storage replaces every connection
//! made before such a refusal, so that the next call reaches the server that takes writes
//! instead of failing until the pool retires the session.
//!
//! A role whose sessions start read-only (`default_transaction_read_only`) stands in for
//! the standby: resetting it is the promotion, after which new sessions may write and old
//! ones still may not.

use std::str::FromStr;
use std::time::Duration;

use eventstore::{EventStorage, EventStorageError, LeaseRequest, LeaseStatus};
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Executor};

use crate::common;
use crate::common::app_role;

#[tokio::test]
async fn sessions_made_before_a_write_was_refused_as_read_only_are_replaced() {
    if common::needs_direct_connection(app_role::WHY_DIRECT) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let role = app_role::create(&admin, &prefix, "standby").await;
    admin
        .execute(format!("ALTER ROLE {role} SET default_transaction_read_only = on").as_str())
        .await
        .unwrap();

    let outcome = write_after_promotion(&admin, &prefix, &role).await;
    app_role::drop(&admin, &role).await;
    outcome.unwrap();
}

/// Writes through a read-only session, "promotes" the server, and writes again.
async fn write_after_promotion(
    admin: &sqlx::PgPool,
    prefix: &str,
    role: &str,
) -> Result<(), String> {
    let options = PgConnectOptions::from_str(&common::database_url())
        .unwrap()
        .username(role);
    // One connection, kept open: without the replacement, every call would reuse it.
    let storage = PostgresEventStorage::builder()
        .url(options.to_url_lossy().to_string())
        .prefix(prefix)
        .init_mode(DatabaseInitMode::Validate)
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .build()
        .await
        .map_err(|error| format!("opening the storage as {role}: {error}"))?;
    let ttl = Duration::from_secs(60);
    let refused = storage
        .request_lease(LeaseRequest::new("jobs", "pod-a", 0, ttl))
        .await
        .expect_err("a write through a read-only session");
    assert!(
        matches!(refused, EventStorageError::Backend { .. })
            && refused.report().contains("read-only"),
        "{}",
        refused.report()
    );

    admin
        .execute(format!("ALTER ROLE {role} RESET default_transaction_read_only").as_str())
        .await
        .map_err(|error| error.to_string())?;
    let answer = storage
        .request_lease(LeaseRequest::new("jobs", "pod-a", 0, ttl))
        .await
        .map_err(|error| format!("the first write after the promotion: {}", error.report()))?;
    assert_eq!(answer.status, LeaseStatus::Leader);
    storage.close().await.map_err(|error| error.to_string())
}
