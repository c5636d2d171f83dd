//! The builder of a [`Projector`]: what it reads, where it bookmarks, in which batches.

use std::sync::Arc;

use crate::{validate, EventStorage, EventStorageError, EventStreamId, Fence, Tags};

use super::{BookmarkReading, Projection, Projector};

/// Builds a [`Projector`]; see [`Projector::builder`].
#[derive(Debug)]
pub struct ProjectorBuilder<P> {
    pub(super) storage: Arc<dyn EventStorage>,
    pub(super) projection: P,
    pub(super) stream: EventStreamId,
    pub(super) reader: Option<String>,
    pub(super) bookmark_tags: Tags,
    pub(super) batch_size: u64,
    pub(super) bookmark_reading: BookmarkReading,
    pub(super) fence: Option<Fence>,
}

impl<P: Projection> ProjectorBuilder<P> {
    /// The streams to read (all streams by default).
    pub fn stream(mut self, stream: EventStreamId) -> Self {
        self.stream = stream;
        self
    }

    /// Bookmarks progress under `reader`; without a reader nothing is bookmarked.
    pub fn bookmark(mut self, reader: impl Into<String>) -> Self {
        self.reader = Some(reader.into());
        self
    }

    /// Tags stored with every bookmark.
    pub fn bookmark_tags(mut self, tags: Tags) -> Self {
        self.bookmark_tags = tags;
        self
    }

    /// At most this many events per batch ([`DEFAULT_BATCH_SIZE`](super::DEFAULT_BATCH_SIZE) by default).
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// When the bookmark is read back ([`BookmarkReading::BeforeEachRun`] by default).
    pub fn bookmark_reading(mut self, reading: BookmarkReading) -> Self {
        self.bookmark_reading = reading;
        self
    }

    /// Bookmarks only while `fence` holds.
    pub fn fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The projector.
    ///
    /// # Errors
    /// [`EventStorageError::InvalidInput`] for a batch size of 0, an invalid reader name,
    /// stream or tags.
    pub fn build(self) -> Result<Projector<P>, EventStorageError> {
        if self.batch_size == 0 {
            return Err(EventStorageError::invalid(
                "projector batch size",
                "0",
                "must be at least 1",
            ));
        }
        if let Some(reader) = &self.reader {
            validate::validate_reader(reader)?;
        }
        validate::validate_stream(&self.stream)?;
        validate::validate_bookmark_tags(&self.bookmark_tags)?;
        Ok(Projector {
            storage: self.storage,
            projection: self.projection,
            stream: self.stream,
            reader: self.reader,
            bookmark_tags: self.bookmark_tags,
            batch_size: self.batch_size,
            bookmark_reading: self.bookmark_reading,
            fence: self.fence,
            cursor: None,
            bookmark_due: self.bookmark_reading != BookmarkReading::OnRequest,
            batch_open: false,
        })
    }
}
