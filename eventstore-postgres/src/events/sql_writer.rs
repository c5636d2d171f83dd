//! Where the SQL of a read is written: a statement with bound parameters, or the text and
//! arguments of a page that the storage's page function plans and runs (see
//! [`PageSql`]). The conditions of streams, filters and walks are written once for both.

use std::fmt::Display;

use eventstore_api::EventReference;
use sqlx::{Postgres, QueryBuilder};

/// Writes SQL and the values it compares with.
pub(crate) trait SqlWriter {
    /// Appends SQL text.
    fn sql(&mut self, sql: impl Display) -> &mut Self;
    /// Appends a `text` value.
    fn text(&mut self, value: String) -> &mut Self;
    /// Appends a `text[]` value.
    fn texts(&mut self, values: Vec<String>) -> &mut Self;
    /// Appends a reference as `xid8, bigint`: inside parentheses, comparable with
    /// `(tx, position)`.
    fn reference(&mut self, reference: &EventReference) -> &mut Self;
}

/// A position as PostgreSQL's `bigint`; no event stands beyond `i64::MAX`.
fn position(reference: &EventReference) -> i64 {
    i64::try_from(reference.position).unwrap_or(i64::MAX)
}

impl SqlWriter for QueryBuilder<'_, Postgres> {
    fn sql(&mut self, sql: impl Display) -> &mut Self {
        self.push(sql)
    }

    fn text(&mut self, value: String) -> &mut Self {
        self.push_bind(value)
    }

    fn texts(&mut self, values: Vec<String>) -> &mut Self {
        self.push_bind(values).push("::text[]")
    }

    fn reference(&mut self, reference: &EventReference) -> &mut Self {
        self.push_bind(reference.tx.to_string())
            .push("::xid8, ")
            .push_bind(position(reference))
    }
}

/// A statement whose values are the elements of one `text[]`, its `$1`: what the page
/// function takes, so that one function runs the statement of any read.
#[derive(Debug, Clone, Default)]
pub(crate) struct PageSql {
    /// The statement, `$1[n]` where its values go.
    pub(crate) text: String,
    /// Its values, in the order the statement numbers them.
    pub(crate) arguments: Vec<String>,
}

impl PageSql {
    /// Appends `value` as the next element, returning its subscript.
    fn argument(&mut self, value: String) -> usize {
        self.arguments.push(value);
        self.arguments.len()
    }
}

impl SqlWriter for PageSql {
    fn sql(&mut self, sql: impl Display) -> &mut Self {
        use std::fmt::Write;
        // Writing into a String cannot fail.
        let _ = write!(self.text, "{sql}");
        self
    }

    fn text(&mut self, value: String) -> &mut Self {
        let at = self.argument(value);
        self.sql(format_args!("$1[{at}]"))
    }

    fn texts(&mut self, values: Vec<String>) -> &mut Self {
        let count = values.len();
        if count == 0 {
            return self.sql("'{}'::text[]");
        }
        let first = self.arguments.len() + 1;
        self.arguments.extend(values);
        self.sql(format_args!("$1[{first}:{last}]", last = first + count - 1))
    }

    fn reference(&mut self, reference: &EventReference) -> &mut Self {
        let tx = self.argument(reference.tx.to_string());
        let position = self.argument(position(reference).to_string());
        self.sql(format_args!("$1[{tx}]::xid8, $1[{position}]::bigint"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventstore_api::EventId;

    #[test]
    fn values_become_elements_of_the_one_array_and_arrays_its_slices() {
        let mut page = PageSql::default();
        page.sql("WHERE a = ")
            .text("x".into())
            .sql(" AND b = ANY(")
            .texts(vec!["y".into(), "z".into()])
            .sql(") AND c @> ")
            .texts(Vec::new())
            .sql(" AND (tx, position) > (")
            .reference(&EventReference {
                id: EventId::new(),
                position: 7,
                tx: 9,
            })
            .sql(")");
        assert_eq!(
            page.text,
            "WHERE a = $1[1] AND b = ANY($1[2:3]) AND c @> '{}'::text[] \
             AND (tx, position) > ($1[4]::xid8, $1[5]::bigint)"
        );
        assert_eq!(page.arguments, ["x", "y", "z", "9", "7"]);
    }
}
