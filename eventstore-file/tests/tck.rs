//! The conformance kit, run against the file backend: each storage in a fresh directory.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::TimeDelta;
use eventstore_file::FileEventStorage;
use eventstore_tck::StorageFactory;

/// Opens every storage in a new temporary directory. The kit makes one factory per scenario,
/// so the directories are removed when the scenario ends.
#[derive(Default)]
struct FileFactory {
    dirs: Mutex<Vec<tempfile::TempDir>>,
}

#[async_trait]
impl StorageFactory for FileFactory {
    type Storage = FileEventStorage;

    async fn create(&self) -> FileEventStorage {
        let dir = tempfile::Builder::new()
            .prefix("eventstore-file-tck-")
            .tempdir()
            .expect("a temporary directory");
        let storage = FileEventStorage::open(dir.path())
            .await
            .expect("open a fresh store");
        self.dirs.lock().unwrap().push(dir);
        storage
    }

    async fn another_handle(&self, storage: &FileEventStorage) -> FileEventStorage {
        // A second open of one directory is refused by design; handles share by cloning.
        storage.clone()
    }

    /// The storage's clock is in this process: step it.
    async fn step_clock(&self, storage: &FileEventStorage, by: TimeDelta) -> Option<()> {
        storage.clock().advance(by);
        Some(())
    }
}

eventstore_tck::tck_tests!(
    FileFactory::default(),
    capabilities = [
        Lease,
        FencedWrites,
        LeaseChanges,
        LeaseOutcomes,
        AppendHints
    ]
);
