//! A failed operation on one file of the store: what was done, to which file, and the OS
//! error, so that the error and every later refusal name the cause (a full disk, say).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An I/O operation on one file that failed.
#[derive(Debug, Clone)]
pub(crate) struct FileFailure {
    /// What was done, e.g. `write events to`.
    operation: &'static str,
    /// The file (or directory) it was done to.
    path: PathBuf,
    /// The OS error.
    cause: Arc<io::Error>,
}

impl FileFailure {
    /// A failure of `operation` on `path`.
    pub(crate) fn new(operation: &'static str, path: &Path, cause: io::Error) -> Self {
        FileFailure {
            operation,
            path: path.to_owned(),
            cause: Arc::new(cause),
        }
    }

    /// Maps an I/O error of `operation` on `path` into a failure, for `map_err`.
    pub(crate) fn of<'a>(
        operation: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(io::Error) -> Self + 'a {
        move |cause| FileFailure::new(operation, path, cause)
    }

    /// The OS error.
    pub(crate) fn cause(&self) -> Arc<io::Error> {
        Arc::clone(&self.cause)
    }
}

/// `cannot write events to /srv/events/events-00000000000000000001.log (no storage space)`:
/// the operation, the file and the kind of OS error in one line, for logs that print errors
/// without their sources. The OS error's own text (`No space left on device (os error 28)`)
/// is left to the source, so that a report of the whole chain shows each text once.
impl fmt::Display for FileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} {} ({})",
            self.operation,
            self.path.display(),
            self.cause.kind()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_operation_the_path_and_the_os_error() {
        let failure = FileFailure::new(
            "write events to",
            Path::new("/srv/events/1.seg"),
            io::Error::from_raw_os_error(28),
        );
        let text = failure.to_string();
        assert_eq!(
            text,
            "cannot write events to /srv/events/1.seg (no storage space)"
        );
        assert!(!text.contains(&failure.cause().to_string()), "{text}");
        assert_eq!(failure.cause().raw_os_error(), Some(28));
    }
}
