//! Journals: small files of framed records for state that is replaced rather than
//! accumulated, the bookmarks and the ceilings of the lease tokens.

pub(crate) mod bookmark_journal;
mod journal;
pub(crate) mod lease_tokens;
