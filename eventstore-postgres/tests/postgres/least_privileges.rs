//! The privileges `sql/grants.sql` grants are enough for everything the storage does, and
//! the leases table needs no DELETE.

use std::time::Duration;

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Fence,
    LeaseRequest, LeaseStatus, Limit, Tags,
};
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use serde_json::json;
use sqlx::postgres::PgConnectOptions;
use sqlx::ConnectOptions;
use std::str::FromStr;

use crate::common;
use crate::common::app_role;

#[tokio::test]
async fn an_application_role_with_only_the_shipped_grants_can_do_everything() {
    if common::needs_direct_connection(app_role::WHY_DIRECT) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let role = app_role::create(&admin, &prefix, "app").await;
    let outcome = exercise(&prefix, &role).await;
    app_role::drop(&admin, &role).await;
    outcome.unwrap();
}

async fn exercise(prefix: &str, role: &str) -> Result<(), String> {
    let url = common::database_url();
    let options = PgConnectOptions::from_str(&url).unwrap().username(role);
    let storage = PostgresEventStorage::builder()
        .url(options.to_url_lossy().to_string())
        .prefix(prefix)
        .init_mode(DatabaseInitMode::Validate)
        .max_connections(2)
        .build()
        .await
        .map_err(|e| format!("validate as {role}: {e}"))?;
    let ttl = Duration::from_secs(60);
    let leader = storage
        .request_lease(LeaseRequest::new("l", "a", 0, ttl))
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(leader.status, LeaseStatus::Leader);
    let standby = storage
        .request_lease(LeaseRequest::new("l", "b", 5, ttl))
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(standby.status, LeaseStatus::Standby);
    let stream = EventStreamId::for_context("orders");
    let fence = Fence::new("l", leader.fencing_token);
    let stored = storage
        .append_fenced(
            &fence,
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("A", json!(1)).with_idempotency_key("k")],
        )
        .await
        .map_err(|e| e.to_string())?;
    storage
        .append(
            AppendCriteria::of(EventFilter::match_all(), Some(stored[0].reference)),
            &stream,
            vec![EventToStore::new("B", json!(2))],
        )
        .await
        .map_err(|e| e.to_string())?;
    let read = storage
        .query(
            &EventFilter::match_all(),
            &EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(read.len(), 2);
    storage
        .bookmark("reader", &read[1].reference, Tags::none())
        .await
        .map_err(|e| e.to_string())?;
    storage
        .bookmark_fenced(&fence, "reader", &read[0].reference, Tags::none())
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(
        storage
            .get_bookmarks()
            .await
            .map_err(|e| e.to_string())?
            .len(),
        1
    );
    storage
        .remove_bookmark("reader")
        .await
        .map_err(|e| e.to_string())?;
    storage
        .release_lease("l", "b")
        .await
        .map_err(|e| e.to_string())?;
    storage
        .release_lease("l", "a")
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(
        storage.get_leases().await.map_err(|e| e.to_string())?.len(),
        1
    );
    storage.storage_time().await.map_err(|e| e.to_string())?;

    let delete = sqlx::query(&format!("DELETE FROM {prefix}leases"))
        .execute(storage.pool())
        .await;
    assert!(
        delete
            .as_ref()
            .is_err_and(|e| e.to_string().contains("permission denied")),
        "the application role may delete leases: {delete:?}"
    );
    storage.close().await.unwrap();
    Ok(())
}

/// `Ensure` (the default) run by a role with only the shipped grants, on a schema where one
/// object drifted (the tags index without its pending-list option, as an earlier version
/// made it), cannot repair it: it names the object as `Validate` does, and says the role
/// could not apply the DDL, instead of a privilege error about some statement of the script.
#[tokio::test]
async fn ensure_by_a_role_that_cannot_repair_the_schema_names_what_is_stale() {
    use eventstore::EventStorageError;
    use sqlx::Executor;
    if common::needs_direct_connection(app_role::WHY_DIRECT) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let role = app_role::create(&admin, &prefix, "app").await;
    admin
        .execute(format!("DROP TRIGGER {prefix}events_tags_trigger ON {prefix}events").as_str())
        .await
        .unwrap();
    let url = PgConnectOptions::from_str(&common::database_url())
        .unwrap()
        .username(&role)
        .to_url_lossy()
        .to_string();
    let open = |mode| {
        PostgresEventStorage::builder()
            .url(url.clone())
            .prefix(&prefix)
            .init_mode(mode)
            .max_connections(2)
            .build()
    };
    let validated = open(DatabaseInitMode::Validate).await;
    let ensured = open(DatabaseInitMode::Ensure).await;
    app_role::drop(&admin, &role).await;
    let index = format!("trigger {prefix}events_tags_trigger");
    match validated {
        Err(EventStorageError::Schema { object, .. }) => assert_eq!(object, index),
        other => panic!("validate: {other:?}"),
    }
    match ensured {
        Err(EventStorageError::Schema {
            object, problem, ..
        }) => {
            assert_eq!(object, index);
            assert!(
                problem.contains("cannot apply the shipped DDL") && problem.contains("permission"),
                "{problem}"
            );
        }
        Err(other) => panic!("ensure does not name {index}: {other:?}"),
        Ok(_) => panic!("ensure succeeded on a drifted schema it could not repair"),
    }
}
