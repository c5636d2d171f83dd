//! The error for bytes on disk that are not what this backend wrote.

use std::fmt;
use std::path::{Path, PathBuf};

/// A record (or file header) that fails its checksum or does not decode, somewhere a torn
/// write cannot explain. Opening refuses such a store rather than skipping data silently.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Corruption {
    /// The damaged file.
    pub file: PathBuf,
    /// The byte offset in `file` where the damaged record or header starts.
    pub offset: u64,
    /// What is wrong there.
    pub problem: String,
}

impl Corruption {
    pub(crate) fn new(file: &Path, offset: u64, problem: impl Into<String>) -> Self {
        Corruption {
            file: file.to_owned(),
            offset,
            problem: problem.into(),
        }
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "corrupt data in {} at byte offset {}: {}",
            self.file.display(),
            self.offset,
            self.problem
        )
    }
}

impl std::error::Error for Corruption {}

/// Why opening a file of the store failed: an I/O error or damaged content.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenFailure {
    /// Reading or repairing the file failed.
    #[error("{action} {}: {source}", .path.display())]
    Io {
        /// What was being done, e.g. `cannot read`.
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A read-only open found no event log in the directory.
    #[error("{} holds no event store: no segment file events-<position>.log", .dir.display())]
    NotAStore {
        /// The directory.
        dir: PathBuf,
    },
    /// The content is damaged.
    #[error(transparent)]
    Corrupt(#[from] Corruption),
}

impl OpenFailure {
    /// A closure mapping an I/O error on `path` into an [`OpenFailure::Io`].
    pub(crate) fn io<'a>(
        action: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> OpenFailure + 'a {
        move |source| OpenFailure::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}
