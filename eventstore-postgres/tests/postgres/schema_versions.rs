//! Schema versions: the shipped DDL records its version on the events table, and a storage
//! never applies its DDL over the tables of a newer version (in a rolling upgrade, an
//! instance of the version before would otherwise put its lease functions back).

use std::time::Duration;

use eventstore::{
    AppendCriteria, EventStorage, EventStorageError, EventStreamId, EventToStore, LeaseRequest,
};
use eventstore_postgres::{schema_sql, DatabaseInitMode, PostgresEventStorage};
use serde_json::json;
use sqlx::{Executor, PgPool};

use crate::common;

/// A version far beyond any this library will reach.
const NEWER: u32 = 1000;

/// A storage on `prefix`, its schema prepared as `mode` says.
pub(crate) async fn open(
    prefix: &str,
    mode: DatabaseInitMode,
) -> Result<PostgresEventStorage, EventStorageError> {
    common::builder(prefix).init_mode(mode).build().await
}

/// Creates the prefix's schema with `Ensure`, then lets the storage go.
pub(crate) async fn create_schema(prefix: &str) {
    open(prefix, DatabaseInitMode::Ensure)
        .await
        .expect("ensure")
        .close()
        .await
        .unwrap();
}

async fn version_comment(pool: &PgPool, prefix: &str) -> Option<String> {
    sqlx::query_scalar("SELECT obj_description(to_regclass($1), 'pg_class')")
        .bind(format!("{prefix}events"))
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn token_base_source(pool: &PgPool, prefix: &str) -> Option<String> {
    sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)")
        .bind(format!("{prefix}token_base()"))
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn tags_index_options(pool: &PgPool, prefix: &str) -> Option<Vec<String>> {
    sqlx::query_scalar("SELECT reloptions::text[] FROM pg_class WHERE oid = to_regclass($1)")
        .bind(format!("{prefix}event_tags_order_idx"))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Makes the prefix's schema look as a newer version `NEWER` left it, usable by storages
/// of `oldest_compatible` and later: a function with another body, an index with other
/// options, and the comment. Returns the function's new body.
async fn upgrade_by_a_newer_version(pool: &PgPool, prefix: &str, oldest_compatible: u32) -> String {
    let body =
        token_base_source(pool, prefix).await.expect("token_base") + "-- as version 1000 has it\n";
    pool.execute(
        format!(
            "CREATE OR REPLACE FUNCTION {prefix}token_base() RETURNS bigint LANGUAGE sql VOLATILE \
             AS $$ {body}$$; \
             ALTER INDEX {prefix}event_tags_order_idx SET (fillfactor = 80); \
             COMMENT ON TABLE {prefix}events IS \
             'eventstore-postgres schema_version={NEWER} oldest_compatible={oldest_compatible}'"
        )
        .as_str(),
    )
    .await
    .expect("upgrade by a newer version");
    token_base_source(pool, prefix).await.unwrap()
}

#[tokio::test]
async fn ensure_records_the_version_of_the_ddl_it_applies() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    let comment = version_comment(&pool, &prefix).await.expect("a comment");
    assert!(
        comment.starts_with("eventstore-postgres schema_version="),
        "{comment}"
    );
}

#[tokio::test]
async fn tables_without_a_version_of_this_schema_pass_and_are_left_alone() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    // Tables of the version before versions were recorded: the same objects, no comment.
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    pool.execute(format!("COMMENT ON TABLE {prefix}events IS NULL").as_str())
        .await
        .unwrap();
    for mode in [DatabaseInitMode::Validate, DatabaseInitMode::Ensure] {
        open(&prefix, mode)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"))
            .close()
            .await
            .unwrap();
    }
    assert_eq!(version_comment(&pool, &prefix).await, None, "no DDL ran");
}

#[tokio::test]
async fn the_tables_of_a_newer_version_are_used_as_they_are() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    let newer_body = upgrade_by_a_newer_version(&pool, &prefix, 1).await;
    let newer_comment = version_comment(&pool, &prefix).await;

    for mode in [DatabaseInitMode::Ensure, DatabaseInitMode::Validate] {
        let storage = open(&prefix, mode)
            .await
            .unwrap_or_else(|e| panic!("{mode:?} on a newer compatible schema: {e}"));
        storage
            .append(
                AppendCriteria::none(),
                &EventStreamId::for_context("orders"),
                vec![EventToStore::new("Placed", json!({ "n": 1 }))],
            )
            .await
            .expect("append");
        let lease = storage
            .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(60)))
            .await
            .expect("lease");
        assert!(lease.status.is_leader());
        storage.close().await.unwrap();
    }
    assert_eq!(
        token_base_source(&pool, &prefix).await.as_deref(),
        Some(newer_body.as_str()),
        "the newer function was replaced"
    );
    assert_eq!(
        tags_index_options(&pool, &prefix).await,
        Some(vec!["fillfactor=80".to_owned()])
    );
    assert_eq!(version_comment(&pool, &prefix).await, newer_comment);

    // Applied by hand, the shipped DDL refuses to run over them, and changes nothing.
    let mut transaction = pool.begin().await.unwrap();
    let refusal = transaction
        .execute(schema_sql(&prefix).unwrap().as_str())
        .await
        .expect_err("the shipped DDL over a newer schema")
        .to_string();
    drop(transaction);
    assert!(
        refusal.contains(&format!(
            "record schema version {NEWER}, newer than this script"
        )),
        "{refusal}"
    );
    assert_eq!(
        token_base_source(&pool, &prefix).await.as_deref(),
        Some(newer_body.as_str())
    );
}

#[tokio::test]
async fn a_newer_version_that_lacks_an_object_this_storage_uses_is_not_repaired() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    upgrade_by_a_newer_version(&pool, &prefix, 1).await;
    pool.execute(format!("DROP FUNCTION {prefix}release_lease(text, text, text)").as_str())
        .await
        .unwrap();
    common::assert_schema_error(
        open(&prefix, DatabaseInitMode::Ensure).await,
        &format!("function {prefix}release_lease(text, text, text)"),
        &format!("is missing; the tables record schema version {NEWER}, newer than"),
    );
    let exists: bool = sqlx::query_scalar("SELECT to_regprocedure($1) IS NOT NULL")
        .bind(format!("{prefix}release_lease(text, text, text)"))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!exists, "Ensure created an older version's function");
}

#[tokio::test]
async fn the_tables_of_a_version_that_needs_a_newer_storage_are_refused_and_left_alone() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    let newer_body = upgrade_by_a_newer_version(&pool, &prefix, NEWER).await;
    for mode in [DatabaseInitMode::Ensure, DatabaseInitMode::Validate] {
        common::assert_schema_error(
            open(&prefix, mode).await,
            &format!("table {prefix}events"),
            &format!(
                "records schema version {NEWER}, which storages of version {NEWER} and later \
                 use; this storage's is version"
            ),
        );
    }
    assert_eq!(
        token_base_source(&pool, &prefix).await.as_deref(),
        Some(newer_body.as_str())
    );
    assert_eq!(
        tags_index_options(&pool, &prefix).await,
        Some(vec!["fillfactor=80".to_owned()])
    );
}
