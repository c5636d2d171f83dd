//! Reads of a filter as ordered index walks: each walk yields the events it can match in
//! `(tx, position)` order and stops after a page, and the walks of a filter are merged, so
//! that a read costs the events it returns, not every event of its tags, types or stream.
//!
//! An item that names tags walks the tag index (`event_tags`) of its first tag, within the
//! stream when one is named, and checks its other tags and its types on the event. An item
//! of types alone walks each type's index. The walks are merged in order (each already is),
//! and an event two items match is returned once.

use eventstore_api::{Direction, EventFilter, EventReference, EventStreamId, FilterItem};

use super::filter_sql::{descending, VISIBILITY_BARRIER};
use super::sql_writer::SqlWriter;
use super::tags_column;
use crate::shared::Shared;

/// The most walks one statement merges. A filter of more (a read of thousands of entities by
/// their tags, say) is read by [`push_gathered_candidates`] instead: a merge of thousands of
/// walks would take PostgreSQL longer to plan than to run.
const MOST_WALKS: usize = 32;

/// Where the walks of a read are confined, and in which order they go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk<'a> {
    pub(crate) stream: &'a EventStreamId,
    /// Only events strictly after this one.
    pub(crate) after: Option<&'a EventReference>,
    /// Only events strictly before this one.
    pub(crate) before: Option<&'a EventReference>,
    /// Only events below the visibility barrier: reads. A conditional append's check sees
    /// every committed event.
    pub(crate) below_barrier: bool,
    pub(crate) direction: Direction,
    /// The most events the statement returns.
    pub(crate) rows: u64,
}

/// One walk: the tag index of an item's first tag, the item's other tags and types checked
/// on each event; or the index of one type.
enum Path<'a> {
    Tagged {
        first: String,
        others: Vec<String>,
        item: &'a FilterItem,
    },
    Typed(&'a str),
}

/// The walks that read `filter`, unless it matches all or nothing.
fn paths(filter: &EventFilter) -> Vec<Path<'_>> {
    filter
        .items
        .iter()
        .flat_map(|item| -> Vec<Path<'_>> {
            let mut tags = tags_column::to_texts(&item.tags).into_iter();
            match (tags.next(), &item.types) {
                (Some(first), _) => vec![Path::Tagged {
                    first,
                    others: tags.collect(),
                    item,
                }],
                (None, Some(types)) => types.iter().map(|t| Path::Typed(&t.0)).collect(),
                (None, None) => Vec::new(),
            }
        })
        .collect()
}

/// The columns of an event a page's statement selects, each named as the events table names
/// it, from the table aliased `alias` (`e.`, or nothing): what the page function returns.
/// Selected by name rather than as a whole row, which cost half as much again to build and
/// take apart; a payload stored as `jsonb` by an earlier version is sent as `json`.
pub(crate) fn page_columns(alias: &str) -> String {
    format!(
        "{alias}position, {alias}tx, {alias}id, {alias}stream_context, {alias}stream_purpose, \
         {alias}event_type, {alias}payload::json AS payload, {alias}tags, \
         {alias}idempotency_key, {alias}stored_at"
    )
}

/// Whether `filter` is read by walks: it matches less than all, and some of it but not more
/// than [`MOST_WALKS`] walks.
pub(crate) fn walks(filter: &EventFilter) -> bool {
    // Counted as `paths` would make them, without writing out the tags.
    let walks: usize = filter
        .items
        .iter()
        .map(|item| match &item.types {
            _ if !item.tags.is_empty() => 1,
            Some(types) => types.len(),
            None => 0,
        })
        .sum();
    !filter.is_match_all() && walks > 0 && walks <= MOST_WALKS
}

/// Appends a query of the [`page_columns`] of the events `filter` matches within `walk`, in
/// the walk's order. `filter` must be one [`walks`] reads.
pub(crate) fn push_walks(
    query: &mut impl SqlWriter,
    shared: &Shared,
    filter: &EventFilter,
    walk: Walk<'_>,
) {
    let paths = paths(filter);
    let descending = descending(walk.direction);
    // Two walks may meet on an event that matches two items: it is returned once.
    let distinct = if paths.len() > 1 {
        "DISTINCT ON (walked_tx, walked_position) "
    } else {
        ""
    };
    query.sql(format_args!(
        "SELECT {distinct}{columns} FROM (",
        columns = page_columns("")
    ));
    for (index, path) in paths.iter().enumerate() {
        if index > 0 {
            query.sql(" UNION ALL ");
        }
        query.sql("(");
        push_path(query, shared, path, filter.until.as_ref(), walk);
        query.sql(")");
    }
    query.sql(format_args!(
        ") AS walks ORDER BY walked_tx{descending}, walked_position{descending} LIMIT {rows}",
        rows = walk.rows
    ));
}

/// Appends one walk: the [`page_columns`] of each event it matches, in order, at most a page
/// of them, with the walked table's `tx` and `position` (`walked_tx`, `walked_position`). The
/// order is the walked table's, which the merge and the outer order then take as it is:
/// ordered by the events' own `tx`, each page would be sorted again (the join equates only
/// the positions, so that the planner never merges a tag's walk with a walk of the log).
fn push_path(
    query: &mut impl SqlWriter,
    shared: &Shared,
    path: &Path<'_>,
    until: Option<&EventReference>,
    walk: Walk<'_>,
) {
    let events = shared.prefix.name("events");
    // The walked table: the tag index of the item's first tag, or the events themselves.
    let walked = match path {
        Path::Tagged {
            first,
            others,
            item,
        } => {
            query
                .sql(format_args!(
                    "SELECT {columns}, t.tx AS walked_tx, t.position AS walked_position \
                     FROM {event_tags} AS t JOIN {events} AS e ON e.position = t.position \
                     WHERE t.tag = ",
                    columns = page_columns("e."),
                    event_tags = shared.prefix.name("event_tags")
                ))
                .text(first.clone());
            if !others.is_empty() {
                query.sql(" AND e.tags @> ").texts(others.clone());
            }
            if let Some(types) = &item.types {
                let types = types.iter().map(|t| t.0.clone()).collect();
                query.sql(" AND e.event_type = ANY(").texts(types).sql(")");
            }
            "t"
        }
        Path::Typed(event_type) => {
            // An equality, not `= ANY`: only then does the type's index yield its events in
            // order.
            query
                .sql(format_args!(
                    "SELECT {columns}, e.tx AS walked_tx, e.position AS walked_position \
                     FROM {events} AS e WHERE e.event_type = ",
                    columns = page_columns("e.")
                ))
                .text((*event_type).to_owned());
            "e"
        }
    };
    push_confinement(query, walked, walk, until);
    let descending = descending(walk.direction);
    query.sql(format_args!(
        " ORDER BY {walked}.tx{descending}, {walked}.position{descending} LIMIT {rows}",
        rows = walk.rows
    ));
}

/// Appends ` AND position IN (<the events of the tag index whose tag is the first of an
/// item>)` when every item of `filter` names tags: the candidates a filter of more items
/// than [`MOST_WALKS`] is read from, gathered and sorted, its items then checked on each.
pub(crate) fn push_gathered_candidates(
    query: &mut impl SqlWriter,
    shared: &Shared,
    filter: &EventFilter,
    stream: &EventStreamId,
) {
    let firsts: Option<Vec<String>> = filter
        .items
        .iter()
        .map(|item| item.tags.iter().next().map(ToString::to_string))
        .collect();
    let Some(firsts) = firsts else {
        return;
    };
    query
        .sql(format_args!(
            " AND position IN (SELECT t.position FROM {event_tags} AS t WHERE t.tag = ANY(",
            event_tags = shared.prefix.name("event_tags")
        ))
        .texts(firsts)
        .sql(")");
    if let Some(context) = &stream.context {
        query.sql(" AND t.stream_context = ").text(context.clone());
    }
    query.sql(")");
}

/// Appends the conditions on the walked table `alias` that keep it within the walk's
/// stream, bounds and barrier, and at or before `until`. Unlike a read of a whole stream
/// (see `push_stream_between`), the context is a plain equality: these statements are
/// planned for their values, and with the tag or the type before it in the index, the
/// equality is what lets the walk go in `(tx, position)` order.
fn push_confinement(
    query: &mut impl SqlWriter,
    alias: &str,
    walk: Walk<'_>,
    until: Option<&EventReference>,
) {
    if let Some(context) = &walk.stream.context {
        query
            .sql(format_args!(" AND {alias}.stream_context = "))
            .text(context.clone());
    }
    if let Some(purpose) = &walk.stream.purpose {
        query
            .sql(format_args!(" AND {alias}.stream_purpose = "))
            .text(purpose.clone());
    }
    if walk.below_barrier {
        // The barrier compares `tx`: here the walked table's.
        query.sql(format_args!(" AND {alias}.{VISIBILITY_BARRIER}"));
    }
    for (comparison, bound) in [(">", walk.after), ("<", walk.before), ("<=", until)] {
        if let Some(bound) = bound {
            query
                .sql(format_args!(
                    " AND ({alias}.tx, {alias}.position) {comparison} ("
                ))
                .reference(bound)
                .sql(")");
        }
    }
}
