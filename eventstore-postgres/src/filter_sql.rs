//! DCB filters, streams and positions as SQL conditions with bound parameters.

use eventstore_api::{EventFilter, EventReference, EventStreamId, FilterItem};
use sqlx::{Postgres, QueryBuilder};

use crate::tags_column;

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

/// Appends ` AND <condition on the stream columns>` for the streams `stream` covers.
pub(crate) fn push_stream(query: &mut QueryBuilder<'_, Postgres>, stream: &EventStreamId) {
    if let Some(context) = &stream.context {
        query
            .push(" AND stream_context = ")
            .push_bind(context.clone());
    }
    if let Some(purpose) = &stream.purpose {
        query
            .push(" AND stream_purpose = ")
            .push_bind(purpose.clone());
    }
}

/// Appends ` AND (<item> OR <item> ...)`, and the filter's inclusive upper bound if any.
pub(crate) fn push_filter(query: &mut QueryBuilder<'_, Postgres>, filter: &EventFilter) {
    if filter.is_match_all() {
        // Matches every type and tag set: leave the indexes free to serve the order.
    } else if filter.items.is_empty() {
        query.push(" AND false");
    } else {
        query.push(" AND (");
        for (index, item) in filter.items.iter().enumerate() {
            if index > 0 {
                query.push(" OR ");
            }
            push_item(query, item);
        }
        query.push(")");
    }
    if let Some(until) = &filter.until {
        query.push(" AND (tx, position) <= (");
        push_reference(query, until);
        query.push(")");
    }
}

/// Appends ` AND (tx, position) > (<after>)`.
pub(crate) fn push_after(query: &mut QueryBuilder<'_, Postgres>, after: &EventReference) {
    query.push(" AND (tx, position) > (");
    push_reference(query, after);
    query.push(")");
}

/// Appends ` AND (tx, position) < (<before>)`: the cursor of a backward read's next page.
pub(crate) fn push_before(query: &mut QueryBuilder<'_, Postgres>, before: &EventReference) {
    query.push(" AND (tx, position) < (");
    push_reference(query, before);
    query.push(")");
}

fn push_item(query: &mut QueryBuilder<'_, Postgres>, item: &FilterItem) {
    query.push("(true");
    if let Some(types) = &item.types {
        let types: Vec<String> = types.iter().map(|t| t.0.clone()).collect();
        query
            .push(" AND event_type = ANY(")
            .push_bind(types)
            .push(")");
    }
    if !item.tags.is_empty() {
        query
            .push(" AND tags @> ")
            .push_bind(tags_column::to_texts(&item.tags))
            .push("::text[]");
    }
    query.push(")");
}

/// Binds a reference as `(xid8, bigint)`, comparable with `(tx, position)`.
fn push_reference(query: &mut QueryBuilder<'_, Postgres>, reference: &EventReference) {
    query
        .push_bind(reference.tx.to_string())
        .push("::xid8, ")
        .push_bind(i64::try_from(reference.position).unwrap_or(i64::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventstore_api::Tags;

    fn sql_of(filter: &EventFilter) -> String {
        let mut query = QueryBuilder::<Postgres>::new("WHERE true");
        push_filter(&mut query, filter);
        query.into_sql()
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
            "WHERE true AND ((true AND event_type = ANY($1) AND tags @> $2::text[]) OR \
             (true AND event_type = ANY($3)))"
        );
    }
}
