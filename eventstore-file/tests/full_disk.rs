//! A full disk, for real: the store fills a small tmpfs it mounts. The failed append and every
//! later refusal name the cause (operation, file, OS error), reads keep working, nothing
//! acknowledged is lost after a reopen, and appends work again once space is freed. A lease
//! batch whose fencing tokens cannot be made durable stops every lease call until a reopen.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`). Where the mount fails the test prints why and
//! skips, except under `CI=true`, where it fails.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventId, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Fence, FencingToken, LeaseRequest, Limit,
};
use eventstore_file::FileEventStorage;
use eventstore_tck::support::assert_chain_repeats_no_text;
use serde_json::json;

/// The size of the file system the store fills.
const SIZE: &str = "3m";

/// Space taken up front and freed after the disk filled, so that appends can work again.
const RESERVE_BYTES: usize = 512 * 1024;

/// A tmpfs mounted on a fresh directory, unmounted when dropped (the test passing or not).
struct MountedTmpfs {
    dir: tempfile::TempDir,
}

impl MountedTmpfs {
    /// Mounts a tmpfs of [`SIZE`], or says why it cannot.
    fn mount() -> Result<MountedTmpfs, String> {
        let dir =
            tempfile::tempdir().map_err(|error| format!("no temporary directory: {error}"))?;
        let output = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={SIZE},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(MountedTmpfs { dir })
    }

    /// Mounts one, or says on stderr why not and gives `None`; under `CI=true` a tmpfs that
    /// cannot be mounted fails the test.
    fn mount_or_skip() -> Option<MountedTmpfs> {
        match MountedTmpfs::mount() {
            Ok(mounted) => Some(mounted),
            Err(why) if required() => panic!("a tmpfs is required under CI=true: {why}"),
            Err(why) => {
                // Straight to stderr, past the test harness's capture, so that the skip shows.
                let _ = writeln!(
                    std::io::stderr(),
                    "skipping: cannot mount a tmpfs to fill ({why}); run as root"
                );
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for MountedTmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|status| status.success());
        if !unmounted {
            // Still busy (a file left open by a failing test): detach it now, gone once closed.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

fn required() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1")
}

fn stream() -> EventStreamId {
    EventStreamId::for_context("filling")
}

fn batch(round: usize) -> Vec<EventToStore> {
    (0..8)
        .map(|n| {
            EventToStore::new(
                "Filled",
                json!({ "round": round, "n": n, "text": "x".repeat(400) }),
            )
        })
        .collect()
}

async fn stored_ids(storage: &FileEventStorage) -> HashSet<EventId> {
    storage
        .query(
            &EventFilter::match_all(),
            &EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .expect("reading the store")
        .into_iter()
        .map(|event| event.reference.id)
        .collect()
}

/// Asserts that `error` names the full disk: the operation, a file of the store, and the OS
/// error, in its own message (the OS error's kind) and in its source (the OS error itself).
fn assert_names_the_full_disk(error: &EventStorageError, store: &Path, what: &str) {
    let message = error.to_string();
    assert!(
        matches!(error, EventStorageError::Backend { .. }),
        "{what}: {message}"
    );
    assert!(
        message.contains("cannot write events to") || message.contains("cannot preallocate"),
        "{what} names the operation: {message}"
    );
    assert!(
        message.contains(&store.display().to_string()) && message.contains(".log"),
        "{what} names the file: {message}"
    );
    assert!(
        message.contains("no storage space"),
        "{what} names the kind of OS error: {message}"
    );
    let os_error = std::error::Error::source(error).map(ToString::to_string);
    assert!(
        os_error
            .as_deref()
            .is_some_and(|text| text.contains("os error 28")),
        "{what}'s source is the OS error ENOSPC: {os_error:?}"
    );
    assert_chain_repeats_no_text(error, what);
}

#[tokio::test]
async fn a_full_disk_is_named_loses_nothing_and_is_recovered_from_after_a_reopen() {
    let Some(mounted) = MountedTmpfs::mount_or_skip() else {
        return;
    };
    let store: PathBuf = mounted.path().join("store");
    let reserve = mounted.path().join("reserve");
    std::fs::write(&reserve, vec![1_u8; RESERVE_BYTES]).expect("writing the reserve");

    let storage = FileEventStorage::open(&store).await.expect("open");
    let mut acknowledged = HashSet::new();
    let mut first_failure = None;
    for round in 0..100_000 {
        match storage
            .append(AppendCriteria::none(), &stream(), batch(round))
            .await
        {
            Ok(stored) => acknowledged.extend(stored.into_iter().map(|e| e.reference.id)),
            Err(error) => {
                first_failure = Some(error);
                break;
            }
        }
    }
    let first_failure = first_failure.expect("a 3 MB file system must fill up");
    let _ = writeln!(
        std::io::stderr(),
        "full disk: {} events acknowledged before the 3 MB tmpfs filled",
        acknowledged.len()
    );
    assert!(
        !acknowledged.is_empty(),
        "appends worked before the disk filled"
    );
    assert_names_the_full_disk(&first_failure, &store, "the failed append");

    // Every later change is refused naming the same cause; reads keep working.
    let refused = storage
        .append(AppendCriteria::none(), &stream(), batch(0))
        .await
        .expect_err("a store whose write failed refuses appends until reopened");
    assert!(
        refused
            .to_string()
            .contains("refuses writes since an earlier failure"),
        "{refused}"
    );
    assert_names_the_full_disk(&refused, &store, "a later append");
    let read = stored_ids(&storage).await;
    assert_eq!(
        read, acknowledged,
        "reads see exactly the acknowledged events"
    );
    storage.close().await.expect("close");

    // Space freed, reopened: nothing acknowledged is lost, and appends work again.
    std::fs::remove_file(&reserve).expect("freeing the reserve");
    let reopened = FileEventStorage::open(&store).await.expect("reopen");
    let after = stored_ids(&reopened).await;
    assert!(
        acknowledged.is_subset(&after),
        "{} acknowledged events lost after the reopen",
        acknowledged.difference(&after).count()
    );
    let appended = reopened
        .append(AppendCriteria::none(), &stream(), batch(0))
        .await
        .expect("appends work again once space is freed");
    assert_eq!(appended.len(), 8);
    assert_eq!(stored_ids(&reopened).await.len(), after.len() + 8);
    reopened.close().await.expect("close");
}

/// Fills the file system holding `dir` with a file there, up to the last byte it takes.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("creating the filler");
    let chunk = vec![1_u8; 64 * 1024];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(28) => break,
            Err(error) => panic!("filling the disk: {error}"),
        }
    }
    path
}

#[tokio::test]
async fn a_lease_batch_whose_tokens_cannot_be_written_stops_every_lease_call_until_a_reopen() {
    let Some(mounted) = MountedTmpfs::mount_or_skip() else {
        return;
    };
    let store: PathBuf = mounted.path().join("store");
    let storage = FileEventStorage::open(&store).await.expect("open");
    let ttl = Duration::from_secs(60);
    let held = storage
        .request_lease(LeaseRequest::new("held", "pod-a", 0, ttl))
        .await
        .expect("a lease granted while there is space");
    assert_eq!(held.fencing_token, FencingToken(1));
    let filler = fill(mounted.path());

    // Ceilings for 4,000 new leases outgrow the zeros ahead in the token journal (64 KiB), so
    // the file must grow, and cannot. The table answers while they are written, so it has
    // granted these leases in memory when the write fails.
    let batch: Vec<LeaseRequest> = (0..4_000)
        .map(|n| LeaseRequest::new(format!("partition-{n:05}"), "pod-a", 0, ttl))
        .collect();
    let failed = storage
        .request_leases(batch.clone())
        .await
        .expect_err("no space for the new ceilings");
    let message = failed.to_string();
    assert!(
        matches!(failed, EventStorageError::Backend { .. }),
        "{message}"
    );
    assert!(
        message.contains("cannot make fencing tokens durable in")
            && message.contains("lease-tokens.log")
            && message.contains("no storage space"),
        "the failure names what, where and why: {message}"
    );

    // From now on every lease call is refused, naming the cause: a token the table granted
    // may not be durable, and a restart could grant it again.
    let refusals = [
        storage
            .request_lease(LeaseRequest::new("held", "pod-a", 0, ttl))
            .await
            .map(drop),
        storage
            .request_leases(vec![LeaseRequest::new("partition-00000", "pod-a", 0, ttl)])
            .await
            .map(drop),
        storage.get_leases().await.map(drop),
        storage.release_lease("held", "pod-a").await,
        storage
            .append_fenced(
                &Fence::new("held", held.fencing_token),
                AppendCriteria::none(),
                &stream(),
                batch_of_one(),
            )
            .await
            .map(drop),
    ];
    for (call, refused) in refusals.into_iter().enumerate() {
        let error = refused.expect_err("refused after the failed write");
        let text = error.to_string();
        assert!(
            text.contains("refuses lease operations") && text.contains("no storage space"),
            "call {call}: {text}"
        );
    }
    storage.close().await.expect("close");

    // Space freed and reopened: leases work again, and every token is above the ones that
    // were answered before (the holders themselves are forgotten).
    std::fs::remove_file(filler).expect("freeing the disk");
    let reopened = FileEventStorage::open(&store).await.expect("reopen");
    let again = reopened
        .request_lease(LeaseRequest::new("held", "pod-b", 0, ttl))
        .await
        .expect("leases work after the reopen");
    assert!(again.fencing_token > held.fencing_token, "{again:?}");
    let answers = reopened
        .request_leases(batch)
        .await
        .expect("the batch again");
    assert!(answers.iter().all(|answer| answer.status.is_leader()));
    reopened.close().await.expect("close");
}

fn batch_of_one() -> Vec<EventToStore> {
    vec![EventToStore::new("Fenced", json!({ "n": 1 }))]
}
