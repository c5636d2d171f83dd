//! Reads in keyset pages: each statement asks for a bounded number of events in
//! `(tx, position)` order, and the next page starts after the last event of the one before.
//! A stream's pages hold [`PAGE_ROWS`] events; a read that returns everything at once lets
//! its pages grow to [`LARGEST_PAGE_ROWS`], since each statement costs a round trip.
//!
//! A bounded `LIMIT` is what lets the planner walk an ordered index and stop, where a read
//! of a whole stream in one statement would be planned as a scan and a sort of everything
//! it returns (spilling to disk beyond `work_mem`). Every page applies the visibility
//! barrier again: the barrier only moves up, so the pages together never skip an event that
//! a follower could later see below the last one returned.

use eventstore_api::{Direction, EventFilter, EventReference, EventStreamId, Limit};
use futures_util::TryStreamExt;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{PgConnection, Postgres};

use super::filter_sql::{push_filter, push_order, push_stream_between, VISIBILITY_BARRIER};
use super::rows::{decode_reference, read_columns, ReadEvent};
use super::sql_writer::{PageSql, SqlWriter};
use super::tags_column::RepeatedTags;
use super::walks::{self, Walk};
use crate::shared::Shared;

/// The events one statement of a streamed read asks for, and the first page of any read:
/// a page is held in memory whole.
pub(crate) const PAGE_ROWS: u64 = 1_000;

/// The most events one statement asks for: small enough that the planner walks an ordered
/// index for every read shape (at 4,000, a type and a tag in a stream is planned as a sort),
/// while halving the statements of a long read (which reads about 7% faster for it).
pub(crate) const LARGEST_PAGE_ROWS: u64 = 2_000;

/// Where a read stands: its bounds, what is left of its limit, and whether it is over.
#[derive(Debug, Clone)]
pub(crate) struct Pages {
    filter: EventFilter,
    stream: EventStreamId,
    /// Only events strictly after this one: the caller's `after`, then, reading forward, the
    /// last event returned.
    after: Option<EventReference>,
    /// Reading backward: only events strictly before the last one returned.
    before: Option<EventReference>,
    remaining: Option<u64>,
    direction: Direction,
    /// The events the next statement asks for, unless fewer remain of the limit.
    page_rows: u64,
    /// Whether each full page doubles the next, up to [`LARGEST_PAGE_ROWS`].
    growing: bool,
    done: bool,
}

impl Pages {
    /// A read of what `query` would return for these arguments.
    pub(crate) fn new(
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> Self {
        Pages {
            filter: filter.clone(),
            stream: stream.clone(),
            after: after.copied(),
            before: None,
            remaining: limit.0,
            direction,
            page_rows: PAGE_ROWS,
            growing: false,
            done: limit.0 == Some(0) || filter.items.is_empty(),
        }
    }

    /// The same read for a caller that keeps every event: pages double after each full
    /// one, up to [`LARGEST_PAGE_ROWS`].
    pub(crate) fn growing(self) -> Self {
        Pages {
            growing: true,
            ..self
        }
    }

    /// The same read with every page as large as any read asks for: the statement whose
    /// plan decides whether reads walk an index or sort.
    pub(crate) fn largest(self) -> Self {
        Pages {
            page_rows: LARGEST_PAGE_ROWS,
            ..self
        }
    }

    /// Whether every page has been read.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The statement of the next page: the [`walks::page_columns`] of its events.
    pub(crate) fn statement(&self, shared: &Shared) -> PageStatement {
        let rows = self
            .remaining
            .map_or(self.page_rows, |n| n.min(self.page_rows));
        let mut sql = PageSql::default();
        if walks::walks(&self.filter) {
            let walk = Walk {
                stream: &self.stream,
                after: self.after.as_ref(),
                before: self.before.as_ref(),
                below_barrier: true,
                direction: self.direction,
                rows,
            };
            walks::push_walks(&mut sql, shared, &self.filter, walk);
            return PageStatement {
                sql,
                rows,
                gathered: false,
            };
        }
        sql.sql(format_args!(
            "SELECT {columns} FROM {events} WHERE {VISIBILITY_BARRIER}",
            columns = walks::page_columns(""),
            events = shared.prefix.name("events")
        ));
        push_stream_between(
            &mut sql,
            &self.stream,
            self.after.as_ref(),
            self.before.as_ref(),
        );
        push_filter(&mut sql, &self.filter);
        // Too many walks to merge: the matches are gathered and sorted.
        let gathered = !self.filter.is_match_all();
        if gathered {
            walks::push_gathered_candidates(&mut sql, shared, &self.filter, &self.stream);
        }
        push_order(&mut sql, &self.stream, self.direction);
        sql.sql(format_args!(" LIMIT {rows}"));
        PageStatement {
            sql,
            rows,
            gathered,
        }
    }

    /// Reads the next page on `connection`, each row decoded as it arrives and dropped at
    /// once, so that neither the rows nor the page are held twice: empty once the read is
    /// over.
    pub(crate) async fn next<E: ReadEvent>(
        &mut self,
        shared: &Shared,
        connection: &mut PgConnection,
        operation: &str,
    ) -> eventstore_api::StorageResult<Vec<E>> {
        if self.done {
            return Ok(Vec::new());
        }
        let failing = shared.settings.failing(operation);
        let statement = self.statement(shared);
        let rows = statement.rows;
        let sql = statement.reading(shared, &self.stream);
        let mut page = Vec::with_capacity(usize::try_from(rows).unwrap_or(0));
        {
            let mut fetched = statement.bind(&sql, shared).fetch(connection);
            let mut tags = RepeatedTags::default();
            while let Some(row) = fetched.try_next().await.map_err(|e| failing.map(e))? {
                page.push(E::decode(&row, &self.stream, &mut tags).map_err(|e| failing.map(e))?);
            }
        }
        self.advance(page.len(), page.last().map(E::reference), rows);
        Ok(page)
    }

    /// Reads the next page's rows on `connection` without decoding them, and moves past
    /// them: the next statement can then be sent while these rows are decoded (see
    /// [`decode_rows`]). Empty once the read is over.
    pub(crate) async fn next_rows(
        &mut self,
        shared: &Shared,
        connection: &mut PgConnection,
        operation: &str,
    ) -> eventstore_api::StorageResult<Vec<PgRow>> {
        if self.done {
            return Ok(Vec::new());
        }
        let failing = shared.settings.failing(operation);
        let statement = self.statement(shared);
        let rows = statement.rows;
        let sql = statement.reading(shared, &self.stream);
        let page = statement
            .bind(&sql, shared)
            .fetch_all(connection)
            .await
            .map_err(|e| failing.map(e))?;
        let last = page
            .last()
            .map(decode_reference)
            .transpose()
            .map_err(|e| failing.map(e))?;
        self.advance(page.len(), last, rows);
        Ok(page)
    }

    /// The stream this read covers, which [`decode_rows`] decodes its rows for.
    pub(crate) fn stream(&self) -> &EventStreamId {
        &self.stream
    }

    /// Moves past a page of `count` events ending with `last`, which a statement asking for
    /// `rows` events returned.
    fn advance(&mut self, count: usize, last: Option<EventReference>, rows: u64) {
        let count = count as u64;
        self.remaining = self.remaining.map(|n| n.saturating_sub(count));
        self.done = count < rows || self.remaining == Some(0);
        if self.growing {
            self.page_rows = (self.page_rows * 2).min(LARGEST_PAGE_ROWS);
        }
        if let Some(last) = last {
            match self.direction {
                Direction::Forward => self.after = Some(last),
                Direction::Backward => self.before = Some(last),
            }
        }
    }
}

/// The statement of a page, and how it is run.
#[derive(Debug)]
pub(crate) struct PageStatement {
    /// The [`walks::page_columns`] of the page's events.
    pub(crate) sql: PageSql,
    /// The most rows it returns.
    pub(crate) rows: u64,
    /// Whether it gathers and sorts its matches (a filter of more walks than one statement
    /// merges): planned by the server as it sees fit, not by the page function, which rules
    /// sorts out.
    pub(crate) gathered: bool,
}

impl PageStatement {
    /// The statement that reads the page, selecting the [`read_columns`] of `stream`.
    ///
    /// Through the page function but for a gathered page: the function's statement (`$1`)
    /// and values (`$2`). Its text is then the same for every page of every read of such a
    /// stream, so it is prepared once per connection, while the function plans each page
    /// for its values.
    pub(crate) fn reading(&self, shared: &Shared, stream: &EventStreamId) -> String {
        let columns = read_columns(stream);
        if self.gathered {
            format!("SELECT {columns} FROM ({}) AS events", self.sql.text)
        } else {
            format!(
                "SELECT {columns} FROM {read_page}($1, $2)",
                read_page = shared.prefix.name("read_page")
            )
        }
    }

    /// `reading` (from [`Self::reading`]) with its values bound, which move into it.
    fn bind<'q>(
        self,
        reading: &'q str,
        shared: &Shared,
    ) -> sqlx::query::Query<'q, Postgres, PgArguments> {
        let query = sqlx::query(reading);
        if self.gathered {
            // Planned for its values each time: its text differs from read to read.
            query.bind(self.sql.arguments).persistent(false)
        } else {
            query
                .bind(self.sql.text)
                .bind(self.sql.arguments)
                .persistent(shared.settings.prepared_statements)
        }
    }
}

/// Rows decoded between two yields of [`decode_rows`].
const ROWS_BETWEEN_YIELDS: usize = 256;

/// Decodes the rows of a page of a read of `stream` (from [`Pages::next_rows`]) onto the end
/// of `events`, dropping each row once decoded; `tags` holds the tags of the read's row
/// before.
///
/// It yields every [`ROWS_BETWEEN_YIELDS`] rows, so that a statement sent beside it goes
/// on: an unnamed statement is parsed first, and only sent to run once the client has
/// heard back, which a decoding that never yielded held back until it was done.
pub(crate) async fn decode_rows<E: ReadEvent>(
    rows: Vec<PgRow>,
    stream: &EventStreamId,
    tags: &mut RepeatedTags,
    events: &mut Vec<E>,
) -> Result<(), sqlx::Error> {
    events.reserve(rows.len());
    for (index, row) in rows.into_iter().enumerate() {
        if index % ROWS_BETWEEN_YIELDS == ROWS_BETWEEN_YIELDS - 1 {
            tokio::task::yield_now().await;
        }
        events.push(E::decode(&row, stream, tags)?);
    }
    Ok(())
}
