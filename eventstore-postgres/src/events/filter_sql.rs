//! DCB filters, streams and positions as SQL conditions with bound parameters.

use super::sql_writer::SqlWriter;
use super::tags_column;
use eventstore_api::{Direction, EventFilter, EventReference, EventStreamId, FilterItem};

/// Only events whose transaction is below the oldest one still running: every event a reader
/// could later see below this line has committed, so moving a bookmark past what a read
/// returned never skips an event. The snapshot is the statement's, one value for all rows.
///
/// Written as a plain comparison with a stable function, so that the planner evaluates it
/// while planning and knows that it holds for all but the few events still being written:
/// hidden in a sub-select, its value would be unknown, the planner would count on it to keep
/// a third of the rows, and under a `LIMIT` it would prefer a scan and a sort to an ordered
/// index walk. On an ordered index it is an index condition, checked once per scan.
pub(crate) const VISIBILITY_BARRIER: &str = "tx < pg_snapshot_xmin(pg_current_snapshot())";

/// Appends ` AND <conditions>` that keep the events of the streams `stream` covers strictly
/// between `after` and `before`, each bound when given.
///
/// A stream with a context is read from the context's index, whatever the plan: the context
/// is written as a range of that index's leading column and each bound as a row comparison
/// that starts with it, so that the walk starts at the bound and ends with the context, and
/// [`push_order`] orders by the context first, which no other index can give. Written as
/// `stream_context = $1`, the context is a constant the order can ignore; a plan made for
/// any context, which PostgreSQL keeps for a prepared statement once it looks no dearer than
/// those made for the values, then may walk the whole log in order and filter out every
/// event of every other stream (a read of 50 events among 20,000 fetched all 20,000).
pub(crate) fn push_stream_between(
    query: &mut impl SqlWriter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    before: Option<&EventReference>,
) {
    match &stream.context {
        Some(context) => {
            push_context_bound(query, context, ">", after);
            push_context_bound(query, context, "<", before);
        }
        None => {
            if let Some(after) = after {
                push_bound(query, ">", after);
            }
            if let Some(before) = before {
                push_bound(query, "<", before);
            }
        }
    }
    push_purpose(query, stream);
}

/// Appends ` AND <conditions>` that keep the events of the streams `stream` covers strictly
/// after `after`, as plain comparisons of each column, whose share of the rows the planner
/// estimates from the columns' statistics: for a statement that should read rows by
/// whichever index finds fewest, not walk a stream in order (see [`push_stream_between`]).
pub(crate) fn push_stream_plainly(
    query: &mut impl SqlWriter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
) {
    if let Some(context) = &stream.context {
        query.sql(" AND stream_context = ").text(context.clone());
    }
    push_purpose(query, stream);
    if let Some(after) = after {
        push_bound(query, ">", after);
    }
}

/// Appends the `ORDER BY` that returns the events of `stream` in `direction`: the order of
/// the index [`push_stream_between`] confines the read to.
pub(crate) fn push_order(query: &mut impl SqlWriter, stream: &EventStreamId, direction: Direction) {
    let columns: &[&str] = match stream.context {
        Some(_) => &["stream_context", "tx", "position"],
        None => &["tx", "position"],
    };
    let descending = descending(direction);
    query.sql(" ORDER BY ");
    for (index, column) in columns.iter().enumerate() {
        if index > 0 {
            query.sql(", ");
        }
        query.sql(column).sql(descending);
    }
}

/// What follows each column of an `ORDER BY` that reads in `direction`.
pub(crate) fn descending(direction: Direction) -> &'static str {
    match direction {
        Direction::Forward => "",
        Direction::Backward => " DESC",
    }
}

/// Appends one side of the range of `context`'s events, `comparison` (`>` or `<`) saying
/// which: past `bound` within the context when given (the context's edge on the other side
/// keeps the range inside it), else the context's own edge.
fn push_context_bound(
    query: &mut impl SqlWriter,
    context: &str,
    comparison: &str,
    bound: Option<&EventReference>,
) {
    match bound {
        Some(bound) => {
            query
                .sql(format_args!(
                    " AND (stream_context, tx, position) {comparison} ("
                ))
                .text(context.to_owned())
                .sql(", ")
                .reference(bound)
                .sql(")");
        }
        None => {
            query
                .sql(format_args!(" AND stream_context {comparison}= "))
                .text(context.to_owned());
        }
    }
}

/// Appends ` AND stream_purpose = <purpose>` when `stream` names one.
fn push_purpose(query: &mut impl SqlWriter, stream: &EventStreamId) {
    if let Some(purpose) = &stream.purpose {
        query.sql(" AND stream_purpose = ").text(purpose.clone());
    }
}

/// Appends ` AND (tx, position) <comparison> (<bound>)`.
fn push_bound(query: &mut impl SqlWriter, comparison: &str, bound: &EventReference) {
    query
        .sql(format_args!(" AND (tx, position) {comparison} ("))
        .reference(bound)
        .sql(")");
}

/// Appends ` AND (<item> OR <item> ...)`, and the filter's inclusive upper bound if any.
pub(crate) fn push_filter(query: &mut impl SqlWriter, filter: &EventFilter) {
    if filter.is_match_all() {
        // Matches every type and tag set: leave the indexes free to serve the order.
    } else if filter.items.is_empty() {
        query.sql(" AND false");
    } else {
        query.sql(" AND (");
        for (index, item) in filter.items.iter().enumerate() {
            if index > 0 {
                query.sql(" OR ");
            }
            push_item(query, item);
        }
        query.sql(")");
    }
    if let Some(until) = &filter.until {
        push_bound(query, "<=", until);
    }
}

fn push_item(query: &mut impl SqlWriter, item: &FilterItem) {
    query.sql("(true");
    if let Some(types) = &item.types {
        let types: Vec<String> = types.iter().map(|t| t.0.clone()).collect();
        query.sql(" AND event_type = ANY(").texts(types).sql(")");
    }
    if !item.tags.is_empty() {
        query
            .sql(" AND tags @> ")
            .texts(tags_column::to_texts(&item.tags));
    }
    query.sql(")");
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventstore_api::Tags;
    use sqlx::{Postgres, QueryBuilder};

    fn sql_of(filter: &EventFilter) -> String {
        let mut query = QueryBuilder::<Postgres>::new("WHERE true");
        push_filter(&mut query, filter);
        query.into_sql()
    }

    fn sql_between(
        stream: &EventStreamId,
        after: Option<&EventReference>,
        before: Option<&EventReference>,
        direction: Direction,
    ) -> String {
        let mut query = QueryBuilder::<Postgres>::new("WHERE true");
        push_stream_between(&mut query, stream, after, before);
        push_order(&mut query, stream, direction);
        query.into_sql()
    }

    fn reference(position: u64) -> EventReference {
        EventReference {
            id: eventstore_api::EventId::new(),
            position,
            tx: position,
        }
    }

    #[test]
    fn a_stream_is_a_range_of_its_context_in_the_context_s_order() {
        let stream = EventStreamId::new("orders", "eu");
        assert_eq!(
            sql_between(&stream, None, None, Direction::Forward),
            "WHERE true AND stream_context >= $1 AND stream_context <= $2 \
             AND stream_purpose = $3 ORDER BY stream_context, tx, position"
        );
        assert_eq!(
            sql_between(&stream.any_purpose(), None, None, Direction::Backward),
            "WHERE true AND stream_context >= $1 AND stream_context <= $2 \
             ORDER BY stream_context DESC, tx DESC, position DESC"
        );
    }

    #[test]
    fn a_bound_within_a_context_starts_with_the_context() {
        let stream = EventStreamId::new("orders", "eu");
        assert_eq!(
            sql_between(&stream, Some(&reference(3)), None, Direction::Forward),
            "WHERE true AND (stream_context, tx, position) > ($1, $2::xid8, $3) \
             AND stream_context <= $4 AND stream_purpose = $5 \
             ORDER BY stream_context, tx, position"
        );
        assert_eq!(
            sql_between(&stream, None, Some(&reference(9)), Direction::Backward),
            "WHERE true AND stream_context >= $1 \
             AND (stream_context, tx, position) < ($2, $3::xid8, $4) AND stream_purpose = $5 \
             ORDER BY stream_context DESC, tx DESC, position DESC"
        );
    }

    #[test]
    fn every_stream_is_bounded_and_ordered_by_the_log_alone() {
        assert_eq!(
            sql_between(
                &EventStreamId::any(),
                Some(&reference(3)),
                Some(&reference(9)),
                Direction::Forward
            ),
            "WHERE true AND (tx, position) > ($1::xid8, $2) \
             AND (tx, position) < ($3::xid8, $4) ORDER BY tx, position"
        );
    }

    #[test]
    fn match_all_adds_no_condition_and_match_none_matches_nothing() {
        assert_eq!(sql_of(&EventFilter::match_all()), "WHERE true");
        assert_eq!(sql_of(&EventFilter::match_none()), "WHERE true AND false");
    }

    #[test]
    fn items_are_or_ed_with_types_and_tags_and_ed_inside() {
        let filter = EventFilter::for_events(["A"], Tags::from_pairs([("k", "v")]))
            .or(EventFilter::for_types(["B"]));
        assert_eq!(
            sql_of(&filter),
            "WHERE true AND ((true AND event_type = ANY($1::text[]) AND tags @> $2::text[]) OR \
             (true AND event_type = ANY($3::text[])))"
        );
    }
}
