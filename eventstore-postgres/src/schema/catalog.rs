//! A prefix's objects as PostgreSQL's catalog describes them, and the objects the shipped DDL
//! creates, read the same way from a scratch copy that is never committed.
//!
//! Validation compares the two, so what it checks is whatever `sql/schema.sql` creates: no
//! list of tables, columns, indexes or functions is kept beside the script to fall behind it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use sqlx::postgres::types::Oid;
use sqlx::{Connection, Executor, PgConnection};

use super::prefix::TablePrefix;
use super::scripts::SCHEMA_SQL;

/// What kind of object a catalog entry is, in the order validation looks at them: a dropped
/// column takes its indexes and constraints with it, and is what an operator must restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Table,
    Column,
    Constraint,
    Index,
    Function,
    Trigger,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Table => "table",
            Kind::Column => "column",
            Kind::Constraint => "constraint",
            Kind::Index => "index",
            Kind::Function => "function",
            Kind::Trigger => "trigger",
        }
    }
}

/// One property of an object that must match: a column's type, an index's key, a
/// function's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facet {
    /// What it is, as errors name it.
    pub(crate) name: &'static str,
    /// Its value as the catalog shows it.
    pub(crate) value: String,
    /// Whether a newer schema version may have changed it: then only an exact comparison
    /// (tables of this version or an older one) looks at it.
    pub(crate) exact_only: bool,
}

/// One table, column, constraint, index or function of a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Object {
    pub(crate) kind: Kind,
    /// Its name with the prefix: `p_events`, `p_events.position` for a column,
    /// `p_release_lease(text, text, text)` for a function.
    pub(crate) name: String,
    /// What must match, in the order errors report it.
    pub(crate) facets: Vec<Facet>,
}

impl Object {
    /// How errors name it: `column p_events.position`.
    pub(crate) fn describe(&self) -> String {
        format!("{} {}", self.kind.noun(), self.name)
    }

    pub(crate) fn facet(&self, name: &str) -> Option<&str> {
        self.facets
            .iter()
            .find(|facet| facet.name == name)
            .map(|facet| facet.value.as_str())
    }
}

/// Every object of one prefix, in the order validation reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Catalog {
    pub(crate) objects: Vec<Object>,
}

impl Catalog {
    pub(crate) fn find(&self, kind: Kind, name: &str) -> Option<&Object> {
        self.objects
            .iter()
            .find(|object| object.kind == kind && object.name == name)
    }

    /// The names of its tables.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &str> {
        self.objects
            .iter()
            .filter(|object| object.kind == Kind::Table)
            .map(|object| object.name.as_str())
    }

    /// This catalog with `from` replaced by `to` wherever it appears: in names, defaults,
    /// definitions and bodies.
    fn renamed(&self, from: &str, to: &str) -> Catalog {
        let objects = self
            .objects
            .iter()
            .map(|object| Object {
                kind: object.kind,
                name: object.name.replace(from, to),
                facets: object
                    .facets
                    .iter()
                    .map(|facet| Facet {
                        value: facet.value.replace(from, to),
                        ..facet.clone()
                    })
                    .collect(),
            })
            .collect();
        let mut catalog = Catalog { objects };
        catalog.objects.sort_by_key(|object| object.kind);
        catalog
    }
}

/// How a function's settings show its search_path when it is pinned to the function's own
/// schema, whichever schema that is (the function query writes it so).
pub(crate) const OWN_SCHEMA_PIN: &str = "search_path=(its own schema), pg_temp";

/// The prefix the scratch copy is made under: longer than any prefix a storage accepts (at
/// most 32 characters), so it is no storage's, and absent from the script, so replacing it
/// by the real prefix is exact. Its longest name stays within PostgreSQL's 63 bytes.
const SCRATCH_PREFIX: &str = "eventstore_scratch_copy_of_the_ddl_";

/// The objects of `prefix`: those in the schema that holds its events table (the schema new
/// objects go to, `current_schema()`, when it has none).
pub(crate) async fn read(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> Result<Catalog, sqlx::Error> {
    let schema: Option<Oid> = sqlx::query_scalar(
        "SELECT coalesce((SELECT c.relnamespace FROM pg_catalog.pg_class AS c \
                          WHERE c.oid = pg_catalog.to_regclass($1)), \
                         (SELECT n.oid FROM pg_catalog.pg_namespace AS n \
                          WHERE n.nspname = pg_catalog.current_schema()))",
    )
    .bind(prefix.name("events"))
    .persistent(persistent)
    .fetch_one(&mut *connection)
    .await?;
    match schema {
        Some(schema) => read_in(connection, schema, &prefix.name(""), persistent).await,
        // No schema on the search_path exists: nothing of the prefix can be found.
        None => Ok(Catalog::default()),
    }
}

/// The objects the shipped DDL creates for `prefix`, on this server: the script applied under
/// a scratch prefix in the session's temporary schema, read, and rolled back. Temporary
/// objects need no privilege but `TEMPORARY` on the database (granted to every role by
/// default), so a role that may not create tables can still validate; nothing is committed,
/// and nothing outlives the call. Read once per server version and process.
pub(crate) async fn shipped(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> Result<Catalog, sqlx::Error> {
    static SHIPPED: OnceLock<Mutex<HashMap<i32, Arc<Catalog>>>> = OnceLock::new();
    let server_version: i32 =
        sqlx::query_scalar("SELECT pg_catalog.current_setting('server_version_num')::integer")
            .persistent(persistent)
            .fetch_one(&mut *connection)
            .await?;
    let cache = SHIPPED.get_or_init(Mutex::default);
    let cached = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&server_version)
        .cloned();
    let scratch = match cached {
        Some(scratch) => scratch,
        None => {
            let scratch = Arc::new(scratch_copy(connection, persistent).await?);
            cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(server_version, scratch.clone());
            scratch
        }
    };
    Ok(scratch.renamed(SCRATCH_PREFIX, &prefix.name("")))
}

/// Applies the shipped DDL under [`SCRATCH_PREFIX`] in the temporary schema, inside a
/// transaction (a savepoint within the caller's) that is rolled back, and reads what it made.
async fn scratch_copy(
    connection: &mut PgConnection,
    persistent: bool,
) -> Result<Catalog, sqlx::Error> {
    // Read-write even where sessions start read-only (a role's default): temporary objects
    // are writes too. Within the caller's transaction, a savepoint.
    let mut scratch = if connection.is_in_transaction() {
        connection.begin().await?
    } else {
        connection.begin_with("BEGIN READ WRITE").await?
    };
    // Only the temporary schema: the copy can neither meet nor change another object.
    (&mut *scratch)
        .execute("SET LOCAL search_path = pg_temp")
        .await?;
    let script = SCHEMA_SQL.replace("__prefix__", SCRATCH_PREFIX);
    (&mut *scratch).execute(script.as_str()).await?;
    let schema: Oid = sqlx::query_scalar("SELECT pg_catalog.pg_my_temp_schema()")
        .persistent(persistent)
        .fetch_one(&mut *scratch)
        .await?;
    let catalog = read_in(&mut scratch, schema, SCRATCH_PREFIX, persistent).await;
    scratch.rollback().await?;
    catalog
}

/// The objects whose names (or whose tables' names) start with `prefix` in `schema`.
async fn read_in(
    connection: &mut PgConnection,
    schema: Oid,
    prefix: &str,
    persistent: bool,
) -> Result<Catalog, sqlx::Error> {
    let mut objects = Vec::new();

    let tables: Vec<(String,)> = rows_in(
        connection,
        "SELECT c.relname::text FROM pg_catalog.pg_class AS c \
         WHERE c.relnamespace = $1 AND c.relkind IN ('r', 'p') \
           AND left(c.relname, length($2)) = $2 \
         ORDER BY c.oid",
        schema,
        prefix,
        persistent,
    )
    .await?;
    objects.extend(tables.into_iter().map(|(name,)| Object {
        kind: Kind::Table,
        name,
        facets: Vec::new(),
    }));

    let columns: Vec<(String, String, String, bool, Option<String>)> = rows_in(
        connection,
        "SELECT c.relname::text, a.attname::text, \
                pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                pg_catalog.pg_get_expr(d.adbin, d.adrelid) \
         FROM pg_catalog.pg_class AS c \
         JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid \
         LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         WHERE c.relnamespace = $1 AND c.relkind IN ('r', 'p') \
           AND left(c.relname, length($2)) = $2 \
           AND a.attnum > 0 AND NOT a.attisdropped \
         ORDER BY c.oid, a.attnum",
        schema,
        prefix,
        persistent,
    )
    .await?;
    objects.extend(
        columns
            .into_iter()
            .map(|(table, column, data_type, not_null, default)| Object {
                kind: Kind::Column,
                name: format!("{table}.{column}"),
                facets: vec![
                    facet("type", data_type, false),
                    facet("nullability", nullability(not_null), false),
                    facet("default", describe_default(default.as_deref()), true),
                ],
            }),
    );

    let constraints: Vec<(String, String, String)> = rows_in(
        connection,
        "SELECT con.conname::text, c.relname::text, pg_catalog.pg_get_constraintdef(con.oid) \
         FROM pg_catalog.pg_constraint AS con \
         JOIN pg_catalog.pg_class AS c ON c.oid = con.conrelid \
         WHERE c.relnamespace = $1 AND left(c.relname, length($2)) = $2 \
         ORDER BY c.oid, con.oid",
        schema,
        prefix,
        persistent,
    )
    .await?;
    objects.extend(
        constraints
            .into_iter()
            .map(|(name, table, definition)| Object {
                kind: Kind::Constraint,
                name,
                facets: vec![
                    facet("table", table, false),
                    facet("definition", definition, true),
                ],
            }),
    );

    let indexes: Vec<(String, String, bool, String, Vec<String>)> = rows_in(
        connection,
        "SELECT ic.relname::text, c.relname::text, i.indisunique, \
                pg_catalog.pg_get_indexdef(i.indexrelid), \
                coalesce(ic.reloptions, '{}')::text[] \
         FROM pg_catalog.pg_index AS i \
         JOIN pg_catalog.pg_class AS ic ON ic.oid = i.indexrelid \
         JOIN pg_catalog.pg_class AS c ON c.oid = i.indrelid \
         WHERE c.relnamespace = $1 AND left(c.relname, length($2)) = $2 \
         ORDER BY c.oid, ic.oid",
        schema,
        prefix,
        persistent,
    )
    .await?;
    objects.extend(
        indexes
            .into_iter()
            .map(|(name, table, unique, definition, mut options)| {
                options.sort();
                Object {
                    kind: Kind::Index,
                    name,
                    facets: vec![
                        facet("table", table, false),
                        facet("uniqueness", uniqueness(unique), false),
                        facet("definition", method_key_and_predicate(&definition), true),
                        facet("options", format!("[{}]", options.join(", ")), true),
                    ],
                }
            }),
    );

    // A function's search_path must be pinned to its own schema, whichever that is.
    let functions: Vec<FunctionRow> = rows_in(
        connection,
        "SELECT p.proname::text || '(' || coalesce( \
                      (SELECT string_agg(pg_catalog.format_type(a.t, NULL), ', ' ORDER BY a.n) \
                       FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, n)), '') \
                    || ')' AS signature, \
                    pg_catalog.pg_get_function_result(p.oid) AS result, \
                    l.lanname::text AS language, \
                    CASE p.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' \
                         ELSE 'VOLATILE' END \
                    || CASE WHEN p.proisstrict THEN ' STRICT' ELSE '' END \
                    || CASE WHEN p.prosecdef THEN ' SECURITY DEFINER' ELSE '' END AS attributes, \
                    pg_catalog.pg_get_function_arguments(p.oid) AS arguments, \
                    coalesce((SELECT array_agg(CASE \
                                WHEN s = 'search_path=' || quote_ident(n.nspname) || ', pg_temp' \
                                THEN 'search_path=(its own schema), pg_temp' ELSE s END \
                              ORDER BY s) \
                              FROM unnest(p.proconfig) AS s), '{}') AS settings, \
                    p.prosrc AS body \
             FROM pg_catalog.pg_proc AS p \
             JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang \
             JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace \
             WHERE p.pronamespace = $1 AND left(p.proname, length($2)) = $2 \
             ORDER BY p.oid",
        schema,
        prefix,
        persistent,
    )
    .await?;
    objects.extend(functions.into_iter().map(|function| Object {
        kind: Kind::Function,
        name: function.signature,
        facets: vec![
            facet("result", function.result, true),
            facet("language", function.language, true),
            facet("attributes", function.attributes, true),
            facet("arguments", function.arguments, true),
            facet("body", function.body, true),
            facet("settings", function.settings.join(", "), true),
        ],
    }));

    // Triggers a table keeps for itself (a foreign key's) are the constraint's business.
    let triggers: Vec<(String, String, String)> = rows_in(
        connection,
        "SELECT t.tgname::text, c.relname::text, pg_catalog.pg_get_triggerdef(t.oid) \
         FROM pg_catalog.pg_trigger AS t \
         JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid \
         WHERE c.relnamespace = $1 AND left(c.relname, length($2)) = $2 \
           AND NOT t.tgisinternal \
         ORDER BY c.oid, t.oid",
        schema,
        prefix,
        persistent,
    )
    .await?;
    objects.extend(
        triggers
            .into_iter()
            .map(|(name, table, definition)| Object {
                kind: Kind::Trigger,
                name,
                facets: vec![
                    facet("table", table, false),
                    facet("definition", without_schema(&definition), true),
                ],
            }),
    );

    objects.sort_by_key(|object| object.kind);
    Ok(Catalog { objects })
}

/// A function as the catalog describes it.
#[derive(sqlx::FromRow)]
struct FunctionRow {
    /// Its name and argument types: `p_release_lease(text, text, text)`.
    signature: String,
    result: String,
    language: String,
    /// Volatility, strictness and security.
    attributes: String,
    /// The arguments with their names and defaults.
    arguments: String,
    /// Its settings, the pin of its search_path to its own schema shown as such.
    settings: Vec<String>,
    body: String,
}

/// The rows `sql` selects from the objects of `schema` (its `$1`) whose names, or whose
/// tables' names, start with `prefix` (its `$2`).
async fn rows_in<T>(
    connection: &mut PgConnection,
    sql: &'static str,
    schema: Oid,
    prefix: &str,
    persistent: bool,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql)
        .bind(schema)
        .bind(prefix)
        .persistent(persistent)
        .fetch_all(connection)
        .await
}

/// A trigger's definition without the schemas it names (`ON public.p_events`), which differ
/// between a store and the scratch copy read beside it.
fn without_schema(definition: &str) -> String {
    definition
        .split(' ')
        .map(|word| word.rsplit_once('.').map_or(word, |(_, name)| name))
        .collect::<Vec<_>>()
        .join(" ")
}

fn facet(name: &'static str, value: String, exact_only: bool) -> Facet {
    Facet {
        name,
        value,
        exact_only,
    }
}

fn nullability(not_null: bool) -> String {
    if not_null { "NOT NULL" } else { "nullable" }.to_owned()
}

fn uniqueness(unique: bool) -> String {
    if unique { "unique" } else { "not unique" }.to_owned()
}

/// A column default as errors show it. `pg_get_expr` names a built-in function's schema when
/// the session's search_path would find another of the same name first: the same default.
fn describe_default(default: Option<&str>) -> String {
    match default {
        Some(default) => format!("default {}", default.replace("pg_catalog.", "")),
        None => "no default".to_owned(),
    }
}

/// An index's access method, key and predicate: `pg_get_indexdef` after `USING`, without the
/// storage options (compared apart) and without the table's schema before it.
pub(crate) fn method_key_and_predicate(definition: &str) -> String {
    // The last `USING`: the schema and table before it may hold the word too.
    let Some((_, after_using)) = definition.rsplit_once(" USING ") else {
        return definition.to_owned();
    };
    let Some(start) = after_using.find(" WITH (") else {
        return after_using.to_owned();
    };
    let end = after_using[start..]
        .find(')')
        .map_or(after_using.len(), |close| start + close + 1);
    format!("{}{}", &after_using[..start], &after_using[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_definition_is_read_after_its_last_using_without_its_options() {
        let cases = [
            (
                r#"CREATE INDEX p_events_tags_idx ON public.p_events USING gin (tags) WITH (gin_pending_list_limit='128')"#,
                "gin (tags)",
            ),
            (
                r#"CREATE UNIQUE INDEX p_events_pkey ON "rv USING x".p_events USING btree ("position")"#,
                r#"btree ("position")"#,
            ),
            (
                "CREATE UNIQUE INDEX i ON s.t USING btree (a) WITH (fillfactor='70') WHERE (a IS NOT NULL)",
                "btree (a) WHERE (a IS NOT NULL)",
            ),
        ];
        for (definition, expected) in cases {
            assert_eq!(
                method_key_and_predicate(definition),
                expected,
                "{definition}"
            );
        }
    }

    #[test]
    fn the_scratch_prefix_is_no_prefix_a_storage_accepts_and_ends_no_name_of_the_script() {
        assert!(TablePrefix::parse(SCRATCH_PREFIX).is_err());
        assert!(!SCHEMA_SQL.contains(SCRATCH_PREFIX));
    }

    #[test]
    fn renaming_replaces_the_prefix_everywhere_and_keeps_the_order_of_kinds() {
        let scratch = Catalog {
            objects: vec![
                Object {
                    kind: Kind::Function,
                    name: format!("{SCRATCH_PREFIX}f(text)"),
                    facets: vec![facet(
                        "body",
                        format!("SELECT 1 FROM {SCRATCH_PREFIX}t"),
                        true,
                    )],
                },
                Object {
                    kind: Kind::Table,
                    name: format!("{SCRATCH_PREFIX}t"),
                    facets: Vec::new(),
                },
            ],
        };
        let renamed = scratch.renamed(SCRATCH_PREFIX, "tenant_");
        assert_eq!(renamed.objects[0].describe(), "table tenant_t");
        assert_eq!(renamed.objects[1].describe(), "function tenant_f(text)");
        assert_eq!(
            renamed.objects[1].facet("body"),
            Some("SELECT 1 FROM tenant_t")
        );
    }
}
