//! A small append-only file of framed records, for state that is replaced rather than
//! accumulated (bookmarks, lease token ceilings).
//!
//! Every change appends one record and syncs; opening replays the records (the last record
//! for a key wins, which the owner of the journal decides). When most records are
//! superseded, the journal is rewritten whole: into a temporary file, synced, renamed over
//! the old one, and the directory synced, so a crash leaves either the old or the new file,
//! never a torn one.
//!
//! The file is zero-filled ahead of its last record (as the event log's last segment is), so
//! that an append overwrites blocks the file already has and its sync writes data only; an
//! append to a growing file also commits the new file size with every sync, about twice the
//! time on a journaling file system. Only an append that outgrows the zeros grows the file,
//! and then by zeros ahead again. Opening reads the zeros as the end of the records.
//!
//! After a failed write, sync or rewrite, what reached the disk is unknown (a later sync that
//! succeeds says nothing about the pages of the failed one), so the journal refuses every
//! later change until it is opened again and its content read back.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::corruption::{Corruption, OpenFailure};
use crate::directory::{parent_of, sync_dir};
use crate::frame::{write_frame, FrameScanner, Scanned};
use crate::positioned_io::{only_zeros, write_all_at};

/// Bytes of the file header: an 8-byte magic naming the file's kind and format version.
const MAGIC_LEN: usize = 8;

/// Rewrite when more than this many records are on disk and most of them are superseded.
const REWRITE_THRESHOLD: usize = 1024;

/// How far ahead of its last record the file is zero-filled when it grows: as far as its
/// records reach, within these bounds (a batch of 1,000 lease token records is about 40 KiB).
const PREALLOCATION: RangeInclusive<u64> = (64 << 10)..=(1 << 20);

/// One record read back on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Where the record's frame starts in the file, for naming it when it does not decode.
    pub(crate) offset: u64,
    /// What was appended.
    pub(crate) payload: Vec<u8>,
}

/// An open journal file.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    /// The directory holding `path`, synced after a rewrite renames the new file into place.
    dir: PathBuf,
    magic: [u8; MAGIC_LEN],
    file: File,
    records: usize,
    /// Where the next record goes: the end of the last one.
    end: u64,
    /// The file's length; zeros from `end` on.
    allocated: u64,
    /// Why the journal refuses changes, once a write, sync or rewrite failed.
    failure: Option<String>,
}

impl Journal {
    /// Opens (or creates) the journal at `path`, cutting off a torn last record and starting
    /// afresh a file whose header never reached the disk, and returns it with every record in
    /// the order written.
    ///
    /// # Errors
    /// I/O failure, a wrong magic, or a damaged record anywhere but at the tail.
    pub(crate) fn open(
        path: &Path,
        magic: [u8; MAGIC_LEN],
    ) -> Result<(Journal, Vec<Record>), OpenFailure> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(OpenFailure::io("cannot open", path))?;
        let length = file
            .metadata()
            .map_err(OpenFailure::io("cannot inspect", path))?
            .len();
        let never_written = length < MAGIC_LEN as u64
            || only_zeros(&file, length).map_err(OpenFailure::io("cannot read", path))?;
        if never_written {
            // New, or created by a crash before its header was synced (which can keep the
            // file's length and lose its bytes): start it afresh. No record was acknowledged,
            // as records are appended only once the header is synced.
            let allocated = write_header(&mut file, &magic)
                .map_err(OpenFailure::io("cannot initialise", path))?;
            let journal = Journal::at(path, magic, file, 0, (MAGIC_LEN as u64, allocated));
            // The new file's directory entry must be durable before any record in it is.
            sync_dir(&journal.dir)
                .map_err(OpenFailure::io("cannot sync the directory of", path))?;
            return Ok((journal, Vec::new()));
        }
        let mut reader = BufReader::new(&file);
        let mut found = [0u8; MAGIC_LEN];
        reader
            .read_exact(&mut found)
            .map_err(OpenFailure::io("cannot read", path))?;
        if found != magic {
            return Err(Corruption::new(
                path,
                0,
                format!(
                    "the file starts with {found:?}, not the header {:?} of this kind of file",
                    String::from_utf8_lossy(&magic)
                ),
            )
            .into());
        }
        let mut scanner = FrameScanner::new(reader, MAGIC_LEN as u64, length);
        let mut records = Vec::new();
        // The end of the records and the file's length, zeros between them.
        let extent = loop {
            match scanner
                .next_frame()
                .map_err(OpenFailure::io("cannot read", path))?
            {
                Scanned::Frame { offset, payload } => records.push(Record { offset, payload }),
                Scanned::End { offset } => break (offset, length),
                Scanned::Torn { offset, reason } => {
                    let why = format!("cutting off a torn record at the end of the file: {reason}");
                    cut_tail(&file, path, offset, &why)?;
                    break (offset, offset);
                }
                Scanned::Corrupt { offset, problem } => {
                    return Err(Corruption::new(path, offset, problem).into())
                }
            }
        };
        let count = records.len();
        Ok((Journal::at(path, magic, file, count, extent), records))
    }

    /// Reads the records of the journal at `path` without changing the file: a missing or
    /// headerless file holds no records, and the records end before a torn one (which a
    /// writer in another process may be completing right now).
    ///
    /// # Errors
    /// I/O failure, a wrong magic, or a damaged record followed by more data.
    pub(crate) fn read_only(
        path: &Path,
        magic: [u8; MAGIC_LEN],
    ) -> Result<Vec<Record>, OpenFailure> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(OpenFailure::io("cannot open", path)(error)),
        };
        let length = file
            .metadata()
            .map_err(OpenFailure::io("cannot inspect", path))?
            .len();
        if length < MAGIC_LEN as u64
            || only_zeros(&file, length).map_err(OpenFailure::io("cannot read", path))?
        {
            // Being created, or left by a crash before its header was synced: no records.
            return Ok(Vec::new());
        }
        let mut reader = BufReader::new(&file);
        let mut found = [0u8; MAGIC_LEN];
        reader
            .read_exact(&mut found)
            .map_err(OpenFailure::io("cannot read", path))?;
        if found != magic {
            return Err(Corruption::new(
                path,
                0,
                format!(
                    "the file starts with {found:?}, not the header {:?} of this kind of file",
                    String::from_utf8_lossy(&magic)
                ),
            )
            .into());
        }
        let mut scanner = FrameScanner::new(reader, MAGIC_LEN as u64, length);
        let mut records = Vec::new();
        loop {
            match scanner
                .next_frame()
                .map_err(OpenFailure::io("cannot read", path))?
            {
                Scanned::Frame { offset, payload } => records.push(Record { offset, payload }),
                Scanned::End { .. } | Scanned::Torn { .. } => return Ok(records),
                Scanned::Corrupt { offset, problem } => {
                    return Err(Corruption::new(path, offset, problem).into())
                }
            }
        }
    }

    /// The journal of `file`, holding `records`, its `(end, allocated)` as the fields say.
    fn at(
        path: &Path,
        magic: [u8; MAGIC_LEN],
        file: File,
        records: usize,
        (end, allocated): (u64, u64),
    ) -> Journal {
        Journal {
            path: path.to_owned(),
            dir: parent_of(path).to_owned(),
            magic,
            file,
            records,
            end,
            allocated,
            failure: None,
        }
    }

    /// Appends `records` and syncs them to disk.
    ///
    /// # Errors
    /// Writing or syncing failed, now or earlier (see the module documentation).
    pub(crate) fn append(&mut self, records: &[Vec<u8>]) -> io::Result<()> {
        self.refuse_after_failure()?;
        let mut bytes = Vec::new();
        for record in records {
            write_frame(&mut bytes, record)?;
        }
        let end = self.end + bytes.len() as u64;
        if end > self.allocated {
            // The file grows anyway: by zeros ahead too, so that the next appends need not.
            bytes.resize(bytes.len() + preallocation(end), 0);
        }
        let written =
            write_all_at(&self.file, &bytes, self.end).and_then(|()| self.file.sync_data());
        self.latch(written)?;
        self.allocated = self.allocated.max(self.end + bytes.len() as u64);
        self.end = end;
        self.records += records.len();
        Ok(())
    }

    /// Whether the journal holds so many superseded records that it should be rewritten with
    /// the `live` ones only.
    pub(crate) fn wants_rewrite(&self, live: usize) -> bool {
        self.records > REWRITE_THRESHOLD && self.records > 2 * live
    }

    /// Replaces the journal's content with `records`, atomically.
    ///
    /// # Errors
    /// Writing, syncing or renaming failed, now or earlier. A failure before the rename leaves
    /// the old journal in place and usable; one after it (the directory sync) leaves it unknown
    /// which file a crash would keep, so the journal refuses further changes.
    pub(crate) fn rewrite(&mut self, records: &[Vec<u8>]) -> io::Result<()> {
        self.refuse_after_failure()?;
        let mut bytes = self.magic.to_vec();
        for record in records {
            write_frame(&mut bytes, record)?;
        }
        let end = bytes.len() as u64;
        bytes.resize(bytes.len() + preallocation(end), 0);
        let temporary = self.path.with_extension("rewrite");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, &self.path)?;
        // From here on the old file is unlinked: appends must go to the new one.
        self.file = file;
        self.records = records.len();
        (self.end, self.allocated) = (end, bytes.len() as u64);
        let synced = sync_dir(&self.dir);
        self.latch(synced)
    }

    fn refuse_after_failure(&self) -> io::Result<()> {
        match &self.failure {
            None => Ok(()),
            Some(failure) => Err(io::Error::other(format!(
                "{} refuses changes after an earlier failure ({failure}); reopen the store",
                self.path.display()
            ))),
        }
    }

    /// Passes `result` on, remembering a failure so that every later change is refused.
    fn latch(&mut self, result: io::Result<()>) -> io::Result<()> {
        if let Err(error) = &result {
            tracing::error!(file = %self.path.display(), %error, "journal write failed; refusing changes until reopened");
            self.failure = Some(error.to_string());
        }
        result
    }
}

/// Cuts the file at `offset`, durably, saying why.
fn cut_tail(file: &File, path: &Path, offset: u64, why: &str) -> Result<(), OpenFailure> {
    tracing::warn!(file = %path.display(), offset, "{why}");
    file.set_len(offset)
        .and_then(|()| file.sync_data())
        .map_err(OpenFailure::io("cannot cut the tail of", path))
}

/// Zeros to write ahead of a journal's records that end at `end` (see [`PREALLOCATION`]).
fn preallocation(end: u64) -> usize {
    end.clamp(*PREALLOCATION.start(), *PREALLOCATION.end()) as usize
}

/// Starts `file` afresh: the header, zeros ahead of it; returns the file's length.
fn write_header(file: &mut File, magic: &[u8; MAGIC_LEN]) -> io::Result<u64> {
    let mut bytes = magic.to_vec();
    bytes.resize(MAGIC_LEN + preallocation(MAGIC_LEN as u64), 0);
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    Ok(bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: [u8; 8] = *b"TESTJRN1";

    fn payloads(records: Vec<Record>) -> Vec<Vec<u8>> {
        records.into_iter().map(|record| record.payload).collect()
    }

    /// Appends "a" and "bb", lets `tear` damage the file given where "bb" ends, and checks
    /// that a reopen keeps "a" alone and appends after it.
    fn torn_last_record_is_cut(tear: impl FnOnce(&File, u64)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, records) = Journal::open(&path, MAGIC).unwrap();
        assert!(records.is_empty());
        journal.append(&[b"a".to_vec(), b"bb".to_vec()]).unwrap();
        let end = journal.end;
        drop(journal);
        tear(&OpenOptions::new().write(true).open(&path).unwrap(), end);
        let (mut journal, records) = Journal::open(&path, MAGIC).unwrap();
        assert_eq!(payloads(records), vec![b"a".to_vec()]);
        journal.append(&[b"c".to_vec()]).unwrap();
        drop(journal);
        let records = payloads(Journal::open(&path, MAGIC).unwrap().1);
        assert_eq!(records, vec![b"a".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_cut() {
        // A crash cut the last record short: the file ends inside it.
        torn_last_record_is_cut(|file, end| file.set_len(end - 1).unwrap());
    }

    #[test]
    fn a_record_torn_inside_the_zeros_ahead_is_cut() {
        // A crash wrote all of the last record but its last byte: zeros follow it.
        torn_last_record_is_cut(|file, end| write_all_at(file, &[0], end - 1).unwrap());
    }

    #[test]
    fn appends_fill_the_zeros_ahead_and_grow_the_file_only_past_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let length = || fs::metadata(&path).unwrap().len();
        let (mut journal, _) = Journal::open(&path, MAGIC).unwrap();
        let created = length();
        assert_eq!(created, MAGIC_LEN as u64 + *PREALLOCATION.start());
        journal.append(&[b"small".to_vec()]).unwrap();
        assert_eq!(
            length(),
            created,
            "an append that fits keeps the file's length"
        );
        drop(journal);

        let (mut journal, records) = Journal::open(&path, MAGIC).unwrap();
        assert_eq!(payloads(records), vec![b"small".to_vec()]);
        assert_eq!(length(), created, "opening keeps the zeros ahead");
        let large = vec![7u8; *PREALLOCATION.start() as usize];
        journal.append(std::slice::from_ref(&large)).unwrap();
        let grown = length();
        assert!(
            grown >= journal.end + *PREALLOCATION.start(),
            "a file that grows gets zeros ahead again: {grown} for records ending at {}",
            journal.end
        );
        journal.append(&[b"after".to_vec()]).unwrap();
        assert_eq!(length(), grown);
        drop(journal);
        let records = payloads(Journal::open(&path, MAGIC).unwrap().1);
        assert_eq!(records, vec![b"small".to_vec(), large, b"after".to_vec()]);
    }

    #[test]
    fn a_rewrite_replaces_everything_and_a_wrong_magic_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, MAGIC).unwrap();
        journal.append(&[b"old".to_vec()]).unwrap();
        journal.rewrite(&[b"new".to_vec()]).unwrap();
        let rewritten = fs::metadata(&path).unwrap().len();
        journal.append(&[b"newer".to_vec()]).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            rewritten,
            "a rewritten file has zeros ahead too"
        );
        drop(journal);
        let records = payloads(Journal::open(&path, MAGIC).unwrap().1);
        assert_eq!(records, vec![b"new".to_vec(), b"newer".to_vec()]);
        let error = Journal::open(&path, *b"OTHERJR1").unwrap_err();
        assert!(error.to_string().contains("at byte offset 0"), "{error}");
    }

    #[test]
    fn after_a_failed_write_every_later_append_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, MAGIC).unwrap();
        journal.append(&[b"kept".to_vec()]).unwrap();
        // A read-only handle makes the next write fail with a real I/O error.
        let writable = std::mem::replace(&mut journal.file, File::open(&path).unwrap());
        assert!(journal.append(&[b"failed".to_vec()]).is_err());
        // The disk "recovers": what reached it after a failure is unknown, so the journal
        // still refuses (a later sync succeeding says nothing about the failed write).
        journal.file = writable;
        let error = journal.append(&[b"after".to_vec()]).unwrap_err();
        assert!(error.to_string().contains("earlier failure"), "{error}");
        assert!(journal.rewrite(&[b"rewritten".to_vec()]).is_err());
        drop(journal);
        let records = payloads(Journal::open(&path, MAGIC).unwrap().1);
        assert_eq!(records, vec![b"kept".to_vec()]);
    }

    #[test]
    fn a_rewrite_failing_after_its_rename_loses_no_acknowledged_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, MAGIC).unwrap();
        journal.append(&[b"old".to_vec()]).unwrap();
        // The rename succeeds, then syncing the (missing) directory fails.
        journal.dir = dir.path().join("missing");
        assert!(journal.rewrite(&[b"new".to_vec()]).is_err());
        let later = journal.append(&[b"later".to_vec()]);
        drop(journal);
        let records = payloads(Journal::open(&path, MAGIC).unwrap().1);
        if later.is_ok() {
            assert!(
                records.contains(&b"later".to_vec()),
                "an acknowledged append is gone: {records:?}"
            );
        }
        assert!(
            later.is_err(),
            "a journal whose rewrite may not be durable refuses appends"
        );
    }
}
