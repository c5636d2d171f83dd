//! Events: conditional appends under a per-stream lock ([`append`](mod@append)), and reads
//! behind the visibility barrier ([`read`]), both decoding the rows of the events table
//! ([`rows`]); and bookmarks, a reader's position among them ([`bookmarks`]).

mod append;
pub(crate) mod bookmarks;
mod filter_sql;
pub(crate) mod own_appends;
mod pages;
mod read;
mod rows;
mod sql_writer;
mod tags_column;
mod visibility;
mod walks;

pub(crate) use append::append;
pub(crate) use read::{explain_query, get_by_id, head, query, query_stream, Pages};
pub(crate) use rows::ReadEvent;
