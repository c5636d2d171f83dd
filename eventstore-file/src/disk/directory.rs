//! The store's directory: held by one process at a time, and synced when entries change.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the store's directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// An exclusive lock on a store's directory, released when dropped (or when the process
/// dies: the operating system drops the lock with the process). The lock file holds the
/// holder's pid, so that a refused `open` can say who holds it.
#[derive(Debug)]
pub(crate) struct DirectoryLock {
    file: File,
}

/// Why the directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockFailure {
    /// Another handle, in this process or another, holds the directory.
    #[error(
        "the event store directory {} is already open in process {holder} (lock file {}); \
         one process at a time may open it, and within that process share one storage by cloning it",
        .dir.display(), .lock_file.display()
    )]
    Held {
        /// The directory.
        dir: PathBuf,
        /// The lock file.
        lock_file: PathBuf,
        /// The pid recorded by the holder, or a note that none could be read.
        holder: String,
    },
    /// The lock file could not be opened, locked or written.
    #[error("cannot lock the event store directory {}: {source}", .dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl DirectoryLock {
    /// Locks `dir` exclusively, without waiting.
    ///
    /// # Errors
    /// [`LockFailure::Held`] naming the directory and the holder's pid, or an I/O failure.
    pub(crate) fn acquire(dir: &Path) -> Result<DirectoryLock, LockFailure> {
        let lock_file = dir.join(LOCK_FILE);
        let io_failure = |source| LockFailure::Io {
            dir: dir.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_file)
            .map_err(io_failure)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::Error(error)) => return Err(io_failure(error)),
            Err(TryLockError::WouldBlock) => {
                let mut recorded = String::new();
                let holder = match file.read_to_string(&mut recorded) {
                    Ok(_) if !recorded.trim().is_empty() => recorded.trim().to_owned(),
                    _ => "(pid not recorded yet)".to_owned(),
                };
                return Err(LockFailure::Held {
                    dir: dir.to_owned(),
                    lock_file,
                    holder,
                });
            }
        }
        let record = |file: &mut File| -> io::Result<()> {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            writeln!(file, "{}", std::process::id())
        };
        record(&mut file).map_err(io_failure)?;
        Ok(DirectoryLock { file })
    }
}

impl Drop for DirectoryLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the release
        // independent of other descriptors of the same file.
        let _ = self.file.unlock();
    }
}

/// Creates `dir` and its missing parents, syncing the parent of each directory it creates, so
/// that the store's directory survives a crash as surely as the files synced inside it.
///
/// # Errors
/// Creating or syncing a directory failed.
pub(crate) fn create_dir_durably(dir: &Path) -> io::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.is_dir())
        .collect();
    std::fs::create_dir_all(dir)?;
    for created in missing {
        sync_dir(parent_of(created))?;
    }
    Ok(())
}

/// The directory holding `path`: its parent, or the working directory for a bare name.
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Syncs `dir` itself, so that entries created or renamed in it survive a crash.
///
/// # Errors
/// Opening or syncing the directory failed.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_directory_and_pid_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirectoryLock::acquire(dir.path()).unwrap();
        let refused = DirectoryLock::acquire(dir.path()).unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains(&dir.path().display().to_string()),
            "{message}"
        );
        assert!(
            message.contains(&std::process::id().to_string()),
            "{message}"
        );
        drop(first);
        assert!(DirectoryLock::acquire(dir.path()).is_ok());
    }

    #[test]
    fn missing_parents_are_created_and_a_bare_name_lives_in_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a").join("b").join("store");
        create_dir_durably(&nested).unwrap();
        assert!(nested.is_dir());
        create_dir_durably(&nested).unwrap();
        assert_eq!(parent_of(Path::new("store")), Path::new("."));
        assert_eq!(parent_of(&nested), dir.path().join("a").join("b"));
    }
}
