//! Bookmarks on disk: a journal of "placed" and "removed" records, replayed on open.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use eventstore_api::{Bookmark, EventId, EventReference, Tag, Tags};
use uuid::Uuid;

use crate::disk::corruption::{Corruption, OpenFailure};
use crate::journals::journal::{Journal, Kind, Record};
use crate::log::codec::{put_str, put_time, put_u32, put_u64, put_u8, DecodeError, Decoder};

/// The journal's file name inside the store's directory.
pub(crate) const BOOKMARKS_FILE: &str = "bookmarks.log";

const KIND: Kind = *b"ESFBMK";
const PLACED: u8 = 1;
const REMOVED: u8 = 2;

/// Every bookmark, by reader.
pub(crate) type Bookmarks = BTreeMap<String, Bookmark>;

/// One change to the bookmarks.
#[derive(Debug, Clone)]
pub(crate) enum BookmarkChange {
    /// A reader's bookmark placed (or moved).
    Placed(Bookmark),
    /// A reader's bookmark removed.
    Removed(String),
}

impl BookmarkChange {
    /// Applies the change to `bookmarks`.
    pub(crate) fn apply_to(self, bookmarks: &mut Bookmarks) {
        match self {
            BookmarkChange::Placed(bookmark) => {
                bookmarks.insert(bookmark.reader.clone(), bookmark);
            }
            BookmarkChange::Removed(reader) => {
                bookmarks.remove(&reader);
            }
        }
    }

    fn encode(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(96);
        match self {
            BookmarkChange::Placed(bookmark) => {
                put_u8(&mut out, PLACED);
                put_str(&mut out, &bookmark.reader)?;
                out.extend_from_slice(bookmark.reference.id.0.as_bytes());
                put_u64(&mut out, bookmark.reference.position);
                put_u64(&mut out, bookmark.reference.tx);
                put_time(&mut out, bookmark.updated_at);
                put_u32(&mut out, bookmark.tags.len() as u32);
                for tag in &bookmark.tags {
                    put_str(&mut out, &tag.key)?;
                    put_str(&mut out, &tag.value)?;
                }
            }
            BookmarkChange::Removed(reader) => {
                put_u8(&mut out, REMOVED);
                put_str(&mut out, reader)?;
            }
        }
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Result<BookmarkChange, DecodeError> {
        let mut decoder = Decoder::new(bytes);
        let change = match decoder.u8("the bookmark record kind")? {
            PLACED => {
                let reader = decoder.str("the reader")?.to_owned();
                let id = Uuid::from_bytes(decoder.array("the event id")?);
                let position = decoder.u64("the position")?;
                let tx = decoder.u64("the tx")?;
                let updated_at = decoder.time("the update time")?;
                let count = decoder.u32("the tag count")?;
                let mut tags = Tags::none();
                for _ in 0..count {
                    let key = decoder.str("a tag key")?;
                    let value = decoder.str("a tag value")?;
                    tags = tags.with(Tag::new(key, value));
                }
                BookmarkChange::Placed(Bookmark {
                    reader,
                    reference: EventReference {
                        id: EventId(id),
                        position,
                        tx,
                    },
                    tags,
                    updated_at,
                })
            }
            REMOVED => BookmarkChange::Removed(decoder.str("the reader")?.to_owned()),
            kind => return Err(DecodeError(format!("unknown bookmark record kind {kind}"))),
        };
        decoder.finish("the bookmark record")?;
        Ok(change)
    }
}

/// The bookmark journal of one store.
#[derive(Debug)]
pub(crate) struct BookmarkJournal {
    journal: Journal,
}

impl BookmarkJournal {
    /// Opens the journal in `dir` and replays it.
    ///
    /// # Errors
    /// I/O failure or damage (see [`Journal::open`]).
    pub(crate) fn open(dir: &Path) -> Result<(BookmarkJournal, Bookmarks), OpenFailure> {
        let path = dir.join(BOOKMARKS_FILE);
        let (journal, records) = Journal::open(&path, KIND)?;
        let bookmarks = replay(&path, &records)?;
        Ok((BookmarkJournal { journal }, bookmarks))
    }

    /// Reads the bookmarks in `dir` without changing any file (see [`Journal::read_only`]).
    ///
    /// # Errors
    /// I/O failure or damage.
    pub(crate) fn read_only(dir: &Path) -> Result<Bookmarks, OpenFailure> {
        let path = dir.join(BOOKMARKS_FILE);
        let records = Journal::read_only(&path, KIND)?;
        replay(&path, &records)
    }

    /// Records `changes` durably.
    ///
    /// # Errors
    /// Writing or syncing failed.
    pub(crate) fn record(&mut self, changes: &[BookmarkChange]) -> io::Result<()> {
        let records = changes
            .iter()
            .map(BookmarkChange::encode)
            .collect::<io::Result<Vec<_>>>()?;
        self.journal.append(&records)
    }

    /// Rewrites the journal with only `bookmarks` when most of its records are superseded.
    ///
    /// # Errors
    /// Writing failed; the old journal stays, which is still correct.
    pub(crate) fn compact_if_worthwhile(&mut self, bookmarks: &Bookmarks) -> io::Result<()> {
        if !self.journal.wants_rewrite(bookmarks.len()) {
            return Ok(());
        }
        let records = bookmarks
            .values()
            .map(|bookmark| BookmarkChange::Placed(bookmark.clone()).encode())
            .collect::<io::Result<Vec<_>>>()?;
        self.journal.rewrite(&records)
    }
}

/// The bookmarks that the journal's `records` leave, in order.
fn replay(path: &Path, records: &[Record]) -> Result<Bookmarks, OpenFailure> {
    let mut bookmarks = Bookmarks::new();
    for record in records {
        let change = BookmarkChange::decode(&record.payload).map_err(|error| {
            Corruption::new(
                path,
                record.offset,
                format!("the bookmark record does not decode: {error}"),
            )
        })?;
        change.apply_to(&mut bookmarks);
    }
    Ok(bookmarks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_that_does_not_decode_is_named_by_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BOOKMARKS_FILE);
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
        let removed = BookmarkChange::Removed("reader".to_owned())
            .encode()
            .unwrap();
        journal.append(std::slice::from_ref(&removed)).unwrap();
        journal.append(&[vec![9, 9, 9]]).unwrap();
        drop(journal);
        let error = BookmarkJournal::open(dir.path()).unwrap_err();
        // The second frame starts after the 8-byte header and the first 12-byte frame header
        // with its payload, the record after its 4-byte length.
        let offset = 8 + 12 + 4 + removed.len();
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains(&format!("at byte offset {offset}:")),
            "{message}"
        );
    }
}
