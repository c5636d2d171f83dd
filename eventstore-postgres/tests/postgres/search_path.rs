//! The lease functions pin their `search_path`: a same-named table or function in another
//! schema, earlier in a caller's path, never stands in for what the functions use.

use std::time::Duration;

use eventstore::{EventStorage, EventStorageError};
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use sqlx::{Connection, PgConnection, Row};

use crate::common;

#[tokio::test]
async fn shadowing_objects_earlier_in_the_callers_path_change_nothing() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let schema: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(&admin)
        .await
        .unwrap();
    let shadow = format!("{prefix}shadow");

    // Tables of the same names, and a clock stuck in 2001, in a schema searched first (even
    // before pg_catalog, which a path may name explicitly).
    let mut caller = PgConnection::connect(&common::direct_url()).await.unwrap();
    for statement in [
        format!("CREATE SCHEMA {shadow}"),
        format!(
            "CREATE TABLE {shadow}.{prefix}leases (LIKE {schema}.{prefix}leases INCLUDING ALL)"
        ),
        format!(
            "CREATE TABLE {shadow}.{prefix}lease_contenders \
             (LIKE {schema}.{prefix}lease_contenders INCLUDING ALL)"
        ),
        format!(
            "CREATE FUNCTION {shadow}.now() RETURNS timestamptz LANGUAGE sql \
             AS $$ SELECT timestamptz '2001-01-01 00:00:00+00' $$"
        ),
        format!("SET search_path = {shadow}, pg_catalog, {schema}"),
    ] {
        sqlx::raw_sql(&statement)
            .execute(&mut caller)
            .await
            .unwrap();
    }

    // The holder and a contender, both through the shadowed path.
    for owner in ["a", "b"] {
        let row = sqlx::query(&format!(
            "SELECT * FROM {schema}.{prefix}request_leases(\
             ARRAY['jobs'], ARRAY[$1], ARRAY[0::bigint], ARRAY[interval '60 seconds'], '10s')"
        ))
        .bind(owner)
        .fetch_one(&mut caller)
        .await
        .unwrap();
        let status: String = row.get("lease_status");
        let token: i64 = row.get("lease_token");
        assert_eq!(
            (status.as_str(), token),
            (if owner == "a" { "leader" } else { "standby" }, 1),
            "{owner}'s request"
        );
    }

    for table in ["leases", "lease_contenders"] {
        let shadowed: i64 =
            sqlx::query_scalar(&format!("SELECT count(*) FROM {shadow}.{prefix}{table}"))
                .fetch_one(&admin)
                .await
                .unwrap();
        assert_eq!(shadowed, 0, "the shadowing {table} table was written");
    }
    let contenders: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT owner FROM {schema}.{prefix}lease_contenders WHERE lease_name = 'jobs'"
    ))
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(contenders, ["b"]);

    // The storage's own lease row, stamped by the real clock, not the shadowing one.
    let now = storage.storage_time().await.unwrap();
    let leases = storage.get_leases().await.unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    let lease = &leases[0];
    assert_eq!((lease.owner.as_str(), lease.fencing_token.0), ("a", 1));
    assert!(
        (now - lease.heartbeat_at).num_seconds().abs() < 60,
        "heartbeat {} is not on the storage's clock ({now})",
        lease.heartbeat_at
    );

    // A release through the shadowed path releases the real lease.
    let held: bool = sqlx::query_scalar(&format!(
        "SELECT {schema}.{prefix}release_lease('jobs', 'a', '10s')"
    ))
    .fetch_one(&mut caller)
    .await
    .unwrap();
    assert!(held, "a held the lease");
    let now = storage.storage_time().await.unwrap();
    let leases = storage.get_leases().await.unwrap();
    assert!(leases[0].is_expired_at(now), "{leases:?}");

    sqlx::raw_sql(&format!("DROP SCHEMA {shadow} CASCADE"))
        .execute(&mut caller)
        .await
        .unwrap();
    caller.close().await.unwrap();
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_function_without_its_pinned_path_is_refused_by_validate_and_repaired_by_ensure() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    common::storage_on(&prefix).await.close().await.unwrap();
    let signature = format!("{prefix}release_lease(text, text, text)");
    sqlx::raw_sql(&format!("ALTER FUNCTION {signature} RESET search_path"))
        .execute(&admin)
        .await
        .unwrap();

    let validated = common::builder(&prefix)
        .init_mode(DatabaseInitMode::Validate)
        .build()
        .await;
    match validated {
        Err(EventStorageError::Schema {
            object, problem, ..
        }) => {
            assert_eq!(object, format!("function {signature}"));
            assert!(problem.contains("search_path"), "{problem}");
        }
        other => panic!("expected a Schema error about {signature}, got {other:?}"),
    }

    let ensured: PostgresEventStorage = common::builder(&prefix)
        .init_mode(DatabaseInitMode::Ensure)
        .lock_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    ensured.close().await.unwrap();
    common::builder(&prefix)
        .init_mode(DatabaseInitMode::Validate)
        .build()
        .await
        .expect("Ensure pins the path again")
        .close()
        .await
        .unwrap();
}

/// A connection whose search_path puts first a schema that does not hold the prefix's tables
/// (`"$user", public` once a schema named after the role exists) finds the tables further
/// down the path, but `CREATE … IF NOT EXISTS` would create new ones in the first schema. With
/// anything stale (here one lease function), `Ensure` would have built a second, empty set
/// of tables in front of the log. It refuses instead, naming both schemas, and creates nothing.
#[tokio::test]
async fn ensure_refuses_to_create_tables_in_front_of_the_log() {
    use eventstore::{AppendCriteria, EventStreamId, EventToStore};
    use sqlx::Executor;
    if common::needs_direct_connection("its url sets a search_path through startup options") {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    storage
        .append(
            AppendCriteria::none(),
            &EventStreamId::for_context("c"),
            vec![EventToStore::new("A", serde_json::json!(1))],
        )
        .await
        .unwrap();
    storage.close().await.unwrap();
    let first = format!("{prefix}first");
    let home: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(&admin)
        .await
        .unwrap();
    admin
        .execute(
            format!(
                "CREATE SCHEMA {first}; \
                 CREATE OR REPLACE FUNCTION {prefix}release_lease(p_name text, p_owner text, \
                 p_lock_timeout text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$"
            )
            .as_str(),
        )
        .await
        .unwrap();
    let url = format!(
        "{}{}options=-c%20search_path%3D{first}%2C{home}",
        common::database_url(),
        if common::database_url().contains('?') {
            "&"
        } else {
            "?"
        }
    );
    let ensured = PostgresEventStorage::builder()
        .url(url)
        .prefix(&prefix)
        .init_mode(DatabaseInitMode::Ensure)
        .max_connections(2)
        .build()
        .await;
    let created: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = $1")
        .bind(&first)
        .fetch_one(&admin)
        .await
        .unwrap();
    admin
        .execute(format!("DROP SCHEMA {first} CASCADE").as_str())
        .await
        .unwrap();
    match ensured {
        Err(EventStorageError::Schema {
            object, problem, ..
        }) => {
            assert!(object.starts_with("table "), "{object}");
            assert!(
                problem.contains(&format!("schema {home}"))
                    && problem.contains(&format!("schema {first}")),
                "{problem}"
            );
        }
        other => panic!("expected a Schema error naming both schemas, got {other:?}"),
    }
    assert_eq!(created, 0, "nothing was created in {first}");
}

/// A storage whose connections search a schema holding a function named `now` before
/// pg_catalog (the shadowing the lease functions are pinned against) validates tables whose
/// defaults are exactly the shipped ones, which `pg_get_expr` then spells `pg_catalog.now()`.
#[tokio::test]
async fn a_now_earlier_in_the_path_does_not_make_the_shipped_defaults_differ() {
    use sqlx::Executor;
    if common::needs_direct_connection("its url sets a search_path through startup options") {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    common::storage_on(&prefix).await.close().await.unwrap();
    let home: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(&admin)
        .await
        .unwrap();
    let shadow = format!("{prefix}shadow");
    admin
        .execute(
            format!(
                "CREATE SCHEMA {shadow}; \
                 CREATE FUNCTION {shadow}.now() RETURNS timestamptz LANGUAGE sql \
                 AS $$ SELECT timestamptz '2001-01-01 00:00:00+00' $$"
            )
            .as_str(),
        )
        .await
        .unwrap();
    let url = format!(
        "{}{}options=-c%20search_path%3D{shadow}%2Cpg_catalog%2C{home}",
        common::database_url(),
        if common::database_url().contains('?') {
            "&"
        } else {
            "?"
        }
    );
    let validated = PostgresEventStorage::builder()
        .url(url)
        .prefix(&prefix)
        .init_mode(DatabaseInitMode::Validate)
        .max_connections(2)
        .build()
        .await;
    admin
        .execute(format!("DROP SCHEMA {shadow} CASCADE").as_str())
        .await
        .unwrap();
    match validated {
        Ok(storage) => storage.close().await.unwrap(),
        Err(error) => panic!("the shipped schema was refused: {error}"),
    }
}
