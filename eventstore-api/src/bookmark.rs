//! Bookmarks: how far a named reader got.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{EventReference, Tags};

/// A reader's stored position.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bookmark {
    /// The reader's name, unique in the storage.
    pub reader: String,
    /// The last event the reader processed, in the storage's own coordinates.
    pub reference: EventReference,
    /// Labels the reader stored with its position.
    pub tags: Tags,
    /// When the bookmark was last placed, on the storage's clock.
    pub updated_at: DateTime<Utc>,
}
