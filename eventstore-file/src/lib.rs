//! An [`EventStorage`](eventstore_api::EventStorage) in a local directory: events and
//! bookmarks are durable, leases live in process memory.
//!
//! The embedded default: a single-process service, a desktop tool or a test keeps its events
//! in a directory with no server, and its tasks and components still elect leaders among
//! themselves through leases.
//!
//! ```no_run
//! # async fn demo() -> Result<(), eventstore_api::EventStorageError> {
//! use eventstore_api::{AppendCriteria, EventStorage, EventStreamId, EventToStore};
//! use eventstore_file::FileEventStorage;
//!
//! let storage = FileEventStorage::open("/var/lib/orders/events").await?;
//! let stream = EventStreamId::for_context("orders");
//! storage
//!     .append(AppendCriteria::none(), &stream, vec![EventToStore::new("OrderPlaced", serde_json::json!({"id": 1}))])
//!     .await?;
//! storage.close().await?;
//! # Ok(()) }
//! ```
//!
//! # On disk
//!
//! | file | holds |
//! |---|---|
//! | `LOCK` | the pid of the process that has the directory open, locked exclusively |
//! | `events-<first position>.log` | segments of the event log: one checksummed frame per batch; the last segment is zero-filled ahead of its last frame, as far as the segment is long (64 KiB to 4 MiB) |
//! | `bookmarks.log` | a journal of bookmark changes, rewritten atomically when mostly superseded; zero-filled ahead of its last record like the last segment |
//! | `lease-tokens.log` | the highest fencing token reserved per lease, never a holder; a journal like `bookmarks.log` |
//!
//! # Guarantees
//!
//! - **Durable appends.** An append is answered only after its frame is synced (`fdatasync`).
//!   Appends that arrive together share one write and one sync (group commit). A batch is one
//!   frame, so a crash keeps all of it or none of it. The log is zero-filled ahead of its end
//!   between groups, so that a sync writes data only, not a new file size as well.
//! - **Recovery.** Opening scans the log once and keeps an index (positions, ids, streams,
//!   types, tags, keys), not payloads; reads fetch payloads from disk. The log ends where only
//!   zeros follow. A torn frame at the end of the last segment (a write cut short by a crash,
//!   never acknowledged: incomplete, or failing its checksum with only zeros after it) is cut
//!   off with a warning. So is a write whose sectors reached the disk out of order (a crash
//!   during it kept later sectors and lost earlier ones), which was never completely synced,
//!   so never acknowledged: every frame records where its group's write began, and damage
//!   that shows a sector the disk never wrote (zeros where frames go), followed by no frame
//!   of a later group, is such a write. Damage anywhere else (in a sealed segment, followed
//!   by a later group's frame, or showing no lost sector, as a flipped byte does) fails the
//!   open with an error naming the file and offset. A flipped byte inside the very last
//!   frame cannot be told from a torn write and is cut off too. Once the last segment is
//!   scanned, its last group is written again and synced, and so is each journal's last
//!   change: what a killed process wrote and never synced, or a write whose sync failed
//!   (whose pages the kernel keeps, counted clean, so that a sync alone would not write them)
//!   is on disk before anything is answered from it. Stores written before frames
//!   recorded their group are read as they are; a version before that cannot read a store
//!   this one has written to.
//! - **Journals recover alike.** `bookmarks.log` and `lease-tokens.log` write each change as
//!   one frame, synced before it is answered: a torn last frame, or damage showing a lost
//!   sector with no frame after it, is cut off; a file whose header never reached the disk
//!   (nothing but zeros) is started afresh. Journals of a frame per record, as versions
//!   before wrote them, are read, and rewritten in frames per change when the store is opened
//!   for writing; those versions cannot read them afterwards.
//! - **One process at a time.** The directory is locked while open; a second open, here or in
//!   another process, fails naming the directory and the holder's pid. Share one storage
//!   between tasks by cloning the handle. An operator's tool reads a store beside the process
//!   that holds it with [`FileEventStorage::open_read_only`]: no lock, nothing written, a
//!   frame still being written at the end of the log read as the end.
//! - **Leases in memory.** A reopened store lists no leases (their holders may be long gone),
//!   but its fencing tokens continue above every token handed out before.
//! - **Write failures.** If a write or sync fails, what reached the disk is unknown (and a later
//!   sync that succeeds proves nothing about it): the storage refuses further appends and
//!   bookmark changes, until the store is reopened and recovery has read the disk. A failed
//!   write of fencing-token ceilings stops every lease operation (requests, releases, lease
//!   reads, fence checks) until the reopen: the batch that needed them was answered in memory
//!   while they were written, so the table holds tokens a restart could grant again. An append answered with such an error may or may not be
//!   stored. That error and every later refusal name the first failure: the operation, the
//!   file and the kind of OS error (`cannot write events to /srv/events/events-….log (no
//!   storage space)`), with the OS error itself as the source. Reads keep working meanwhile.
//!   After a full disk: free space, reopen, and appends work again; a test fills a 3 MB tmpfs
//!   to show that every acknowledged event is still there.

// Library code proves its failures impossible instead of unwrapping; tests may unwrap.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod disk;
mod journals;
mod log;
mod options;
mod storage;
mod writer;

pub use disk::corruption::Corruption;
pub use options::FileStorageOptions;
pub use storage::FileEventStorage;
