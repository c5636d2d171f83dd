//! `Validate` against the shipped DDL itself: every object a fresh prefix has, dropped in turn,
//! is named; so are a changed function body and a changed column default; and the schema of
//! every version this crate has shipped upgrades to one `Validate` accepts.

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Limit, Tags,
};
use eventstore_postgres::{schema_sql, DatabaseInitMode};
use serde_json::json;
use sqlx::{Executor, PgPool};

use crate::common;
use crate::schema_versions::{create_schema, open};

/// The schema script of every version this crate has shipped, by version.
const SHIPPED_SCHEMAS: &[(&str, &str)] = &[
    ("0.1.0", include_str!("shipped_schemas/0.1.0.sql")),
    ("0.2.0", include_str!("shipped_schemas/0.2.0.sql")),
];

/// Events written into a store of an earlier version before it is upgraded: two streams,
/// each event with an entity tag (ten entities) and a tag every event carries.
const EARLIER_EVENTS: i32 = 1_000;

/// Every column, constraint, index, function and trigger of `prefix`, each with the statement that
/// drops it and how `Validate` names it, read from the catalog: the list follows whatever
/// the shipped DDL creates. An index that backs a constraint goes with its constraint.
async fn droppable_objects(pool: &PgPool, prefix: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "WITH tables AS ( \
             SELECT c.oid, c.relname FROM pg_class AS c \
             WHERE c.relnamespace = (SELECT relnamespace FROM pg_class \
                                     WHERE oid = to_regclass($1 || 'events')) \
               AND c.relkind = 'r' AND left(c.relname, length($1)) = $1) \
         SELECT format('ALTER TABLE %I DROP COLUMN %I CASCADE', t.relname, a.attname), \
                format('column %s.%s', t.relname, a.attname) \
         FROM tables AS t JOIN pg_attribute AS a ON a.attrelid = t.oid \
         WHERE a.attnum > 0 AND NOT a.attisdropped \
         UNION ALL \
         SELECT format('ALTER TABLE %I DROP CONSTRAINT %I CASCADE', t.relname, con.conname), \
                format('constraint %s', con.conname) \
         FROM tables AS t JOIN pg_constraint AS con ON con.conrelid = t.oid \
         UNION ALL \
         SELECT format('DROP INDEX %I', ic.relname), format('index %s', ic.relname) \
         FROM tables AS t JOIN pg_index AS i ON i.indrelid = t.oid \
         JOIN pg_class AS ic ON ic.oid = i.indexrelid \
         WHERE NOT EXISTS (SELECT 1 FROM pg_constraint AS con WHERE con.conindid = i.indexrelid) \
         UNION ALL \
         SELECT format('DROP TRIGGER %I ON %I', tg.tgname, t.relname), \
                format('trigger %s', tg.tgname) \
         FROM tables AS t JOIN pg_trigger AS tg ON tg.tgrelid = t.oid AND NOT tg.tgisinternal \
         UNION ALL \
         SELECT format('DROP FUNCTION %s CASCADE', p.oid::regprocedure), \
                format('function %s(%s)', p.proname, \
                       coalesce((SELECT string_agg(format_type(a.t, NULL), ', ' ORDER BY a.n) \
                                 FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, n)), '')) \
         FROM pg_proc AS p \
         WHERE p.pronamespace = (SELECT relnamespace FROM pg_class \
                                 WHERE oid = to_regclass($1 || 'events')) \
           AND left(p.proname, length($1)) = $1",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
    .expect("read the prefix's objects")
}

#[tokio::test]
async fn validate_names_every_object_of_a_fresh_prefix_once_it_is_dropped() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let fresh = common::unique_prefix();
    create_schema(&fresh).await;
    let objects = droppable_objects(&pool, &fresh).await;
    // Four tables' columns and keys, the indexes of reads and the lease functions at least:
    // a catalog query that found nothing would prove nothing.
    for kind in ["column ", "constraint ", "index ", "function ", "trigger "] {
        assert!(
            objects.iter().any(|(_, object)| object.starts_with(kind)),
            "no {kind}of {fresh} found in the catalog: {objects:?}"
        );
    }
    for (drop, object) in objects {
        let prefix = common::unique_prefix();
        create_schema(&prefix).await;
        let drop = drop.replace(&fresh, &prefix);
        pool.execute(drop.as_str()).await.expect(&drop);
        common::assert_schema_error(
            open(&prefix, DatabaseInitMode::Validate).await,
            &object.replace(&fresh, &prefix),
            "missing",
        );
    }
}

#[tokio::test]
async fn validate_names_a_changed_function_body_and_a_changed_column_default() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    // The same function with one more comment in its body: the signature, the language and
    // the pinned search_path stay the shipped ones.
    let definition: String = sqlx::query_scalar("SELECT pg_get_functiondef(to_regprocedure($1))")
        .bind(format!("{prefix}check_fence(text, bigint, text)"))
        .fetch_one(&pool)
        .await
        .unwrap();
    let changed = definition.replacen("BEGIN", "BEGIN\n    -- changed by hand", 1);
    assert_ne!(changed, definition, "the body has a BEGIN to change");
    pool.execute(changed.as_str())
        .await
        .expect("replace the body");
    common::assert_schema_error(
        open(&prefix, DatabaseInitMode::Validate).await,
        &format!("function {prefix}check_fence(text, bigint, text)"),
        "differs from the shipped definition in its body",
    );

    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    pool.execute(
        format!(
            "ALTER TABLE {prefix}bookmarks ALTER COLUMN updated_at SET DEFAULT clock_timestamp()"
        )
        .as_str(),
    )
    .await
    .unwrap();
    common::assert_schema_error(
        open(&prefix, DatabaseInitMode::Validate).await,
        &format!("column {prefix}bookmarks.updated_at"),
        "has default clock_timestamp(), expected default now()",
    );
}

#[tokio::test]
async fn the_schema_of_every_shipped_version_upgrades_by_ensure_and_by_hand() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    for (version, script) in SHIPPED_SCHEMAS {
        let by_ensure = common::unique_prefix();
        let by_hand = common::unique_prefix();
        for prefix in [&by_ensure, &by_hand] {
            let mut transaction = pool.begin().await.unwrap();
            transaction
                .execute(script.replace("__prefix__", prefix).as_str())
                .await
                .unwrap_or_else(|e| panic!("apply the schema of {version}: {e}"));
            transaction
                .execute(
                    format!(
                        "INSERT INTO {prefix}events \
                             (id, stream_context, stream_purpose, event_type, payload, tags) \
                         SELECT gen_random_uuid(), 'orders', 'p' || (g % 2), 'Placed', \
                                json_build_object('n', g), \
                                ARRAY['order:o-' || (g % 10), 'shop:s1'] \
                         FROM generate_series(1, {EARLIER_EVENTS}) AS g"
                    )
                    .as_str(),
                )
                .await
                .unwrap();
            transaction.commit().await.unwrap();
        }

        open(&by_ensure, DatabaseInitMode::Ensure)
            .await
            .unwrap_or_else(|e| panic!("Ensure over the schema of {version}: {e}"))
            .close()
            .await
            .unwrap();
        // What `eventstore schema apply` runs: the shipped script in one transaction.
        let mut transaction = pool.begin().await.unwrap();
        transaction
            .execute(schema_sql(&by_hand).unwrap().as_str())
            .await
            .unwrap_or_else(|e| panic!("the shipped script over the schema of {version}: {e}"));
        transaction.commit().await.unwrap();

        for prefix in [&by_ensure, &by_hand] {
            let storage = open(prefix, DatabaseInitMode::Validate)
                .await
                .unwrap_or_else(|e| panic!("Validate after upgrading from {version}: {e}"));
            // The events written before the upgrade are found by their tags, in order, and
            // those written after it beside them.
            let orders = EventStreamId::new("orders", "p1");
            let o3 = EventFilter::for_tags(Tags::from_pairs([("order", "o-3")]));
            storage
                .append(
                    AppendCriteria::none(),
                    &orders,
                    vec![EventToStore::new("Placed", json!({"n": "after"}))
                        .with_tags(Tags::from_pairs([("order", "o-3")]))],
                )
                .await
                .unwrap();
            let found = storage
                .query(&o3, &orders, None, Limit::none(), Direction::Forward)
                .await
                .unwrap();
            let numbers: Vec<String> = found.iter().map(|e| e.payload["n"].to_string()).collect();
            let mut expected: Vec<String> = (1..=EARLIER_EVENTS)
                .filter(|g| g % 10 == 3 && g % 2 == 1)
                .map(|g| g.to_string())
                .collect();
            expected.push("\"after\"".to_owned());
            assert_eq!(
                numbers, expected,
                "order o-3 after upgrading from {version}"
            );
            let shop = EventFilter::for_tags(Tags::from_pairs([("shop", "s1")]));
            let everywhere = storage
                .query(
                    &shop,
                    &EventStreamId::any(),
                    None,
                    Limit::none(),
                    Direction::Backward,
                )
                .await
                .unwrap();
            assert_eq!(
                everywhere.len(),
                EARLIER_EVENTS as usize,
                "shop s1, {version}"
            );
            storage.close().await.unwrap();
        }
    }
}
