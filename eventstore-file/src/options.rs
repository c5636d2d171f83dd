//! Settings for opening a store.

/// How a [`crate::FileEventStorage`] lays out its files.
///
/// # Examples
/// ```
/// use eventstore_file::FileStorageOptions;
/// let options = FileStorageOptions::default().max_segment_bytes(16 << 20);
/// assert_eq!(options.segment_bytes(), 16 << 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStorageOptions {
    max_segment_bytes: u64,
}

impl FileStorageOptions {
    /// The default size at which a segment of the log is sealed and the next one started.
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

    /// Seal a segment once it would grow past `bytes` (a single batch larger than that still
    /// gets a segment of its own). Smaller segments mean more files; larger ones, more to
    /// copy when backing up the newest. At least 1 KiB is used.
    pub fn max_segment_bytes(mut self, bytes: u64) -> Self {
        self.max_segment_bytes = bytes.max(1024);
        self
    }

    /// The size at which segments are sealed.
    pub fn segment_bytes(&self) -> u64 {
        self.max_segment_bytes
    }
}

impl Default for FileStorageOptions {
    fn default() -> Self {
        FileStorageOptions {
            max_segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
        }
    }
}
