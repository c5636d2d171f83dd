//! Events: conditional appends under a per-stream lock ([`append`](mod@append)), and reads
//! behind the visibility barrier ([`read`]), both decoding the rows of the events table
//! ([`rows`]).

mod append;
mod pages;
mod read;
mod rows;
mod visibility;

pub(crate) use append::append;
pub(crate) use read::{explain_query, get_by_id, head, query, query_stream, Pages};
pub(crate) use rows::{decode_reference, ReadEvent};
