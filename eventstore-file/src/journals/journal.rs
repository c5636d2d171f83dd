//! A small append-only file of framed records, for state that is replaced rather than
//! accumulated (bookmarks, lease token ceilings).
//!
//! Every change appends one frame holding its records and syncs (records that one frame of at
//! most 1 GiB cannot hold go in several, each synced before the next is written); opening
//! replays the records (the last record for a key wins, which the owner of the journal
//! decides). When most records are superseded, the journal is rewritten whole: into a
//! temporary file, synced, renamed over the old one, and the directory synced, so a crash
//! leaves either the old or the new file, never a torn one.
//!
//! The file is zero-filled ahead of its last frame (as the event log's last segment is), so
//! that an append overwrites blocks the file already has and its sync writes data only; an
//! append to a growing file also commits the new file size with every sync, about twice the
//! time on a journaling file system. Only an append that outgrows the zeros grows the file,
//! and then by zeros ahead again. Opening reads the zeros as the end of the records.
//!
//! Only the last append can be unsynced, and a crash (a power loss) can keep any of its
//! sectors and lose others, which keep the zeros they held. Only the last frame is ever
//! unsynced: a torn one is cut off, and so is damage that shows a lost sector and
//! has no whole frame after it (see `group_tail`); damage with a whole frame after it lies in
//! a synced append, and is corruption. Files of the first format, a frame per record, are read
//! too, and rewritten in this one when a writer opens them.
//!
//! After a failed write, sync or rewrite, what reached the disk is unknown (a later sync that
//! succeeds says nothing about the pages of the failed one), so the journal refuses every
//! later change until it is opened again and its content read back.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::disk::corruption::{Corruption, OpenFailure};
use crate::disk::directory::{parent_of, sync_dir};
use crate::disk::positioned_io::{only_zeros, write_again, write_all_at};
use crate::log::codec::{put_u32, u32_length, Decoder};
use crate::log::frame::{write_frame, FrameScanner, Scanned, MAX_PAYLOAD};
use crate::log::group_tail::{after_damage, AfterDamage};

/// What kind of journal a file is: the first six bytes of its header, e.g. `ESFBMK`.
pub(crate) type Kind = [u8; 6];

/// Bytes of the file header: the kind, then the format's two-digit version.
const MAGIC_LEN: usize = 8;

/// Rewrite when more than this many records are on disk and most of them are superseded.
const REWRITE_THRESHOLD: usize = 1024;

/// How far ahead of its last record the file is zero-filled when it grows: as far as its
/// records reach, within these bounds (a batch of 1,000 lease token records is about 40 KiB).
const PREALLOCATION: RangeInclusive<u64> = (64 << 10)..=(1 << 20);

/// How a journal file lays its records out in frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Version `01`: a frame per record. Read, and rewritten as [`Format::FramePerAppend`].
    FramePerRecord,
    /// Version `02`: a frame per append, holding its records, each after its `u32` length.
    FramePerAppend,
}

impl Format {
    const ALL: [Format; 2] = [Format::FramePerRecord, Format::FramePerAppend];

    fn version(self) -> &'static [u8; 2] {
        match self {
            Format::FramePerRecord => b"01",
            Format::FramePerAppend => b"02",
        }
    }

    /// The header of a journal of `kind` in this format.
    fn magic(self, kind: &Kind) -> [u8; MAGIC_LEN] {
        let mut magic = [0u8; MAGIC_LEN];
        magic[..6].copy_from_slice(kind);
        magic[6..].copy_from_slice(self.version());
        magic
    }
}

/// One record read back on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Where the frame holding the record starts in the file, for naming it when it does not
    /// decode.
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
    kind: Kind,
    file: File,
    records: usize,
    /// Where the next frame goes: the end of the last one.
    end: u64,
    /// The file's length; zeros from `end` on.
    allocated: u64,
    /// Why the journal refuses changes, once a write, sync or rewrite failed.
    failure: Option<String>,
}

/// What reading a journal file found.
struct Contents {
    format: Format,
    records: Vec<Record>,
    /// Where the last append's frame begins (the header's start, before any append).
    last_append: u64,
    /// Where the intact frames end, and what is to be cut off there, if anything: why.
    end: u64,
    cut: Option<String>,
}

impl Journal {
    /// Opens (or creates) the journal of `kind` at `path`, and returns it with every record
    /// in the order written. A file whose header never reached the disk is started afresh, an
    /// append a crash cut short is cut off, and a file of the first format is rewritten in
    /// the current one.
    ///
    /// # Errors
    /// I/O failure, a header of another kind or format, or damage in a synced append.
    pub(crate) fn open(path: &Path, kind: Kind) -> Result<(Journal, Vec<Record>), OpenFailure> {
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
        if never_written(&file, path, length)? {
            // New, or created by a crash before its header was synced (which can keep the
            // file's length and lose its bytes): start it afresh. No record was acknowledged,
            // as records are appended only once the header is synced.
            let magic = Format::FramePerAppend.magic(&kind);
            let allocated = write_header(&mut file, &magic)
                .map_err(OpenFailure::io("cannot initialise", path))?;
            let journal = Journal::at(path, kind, file, 0, (MAGIC_LEN as u64, allocated));
            // The new file's directory entry must be durable before any record in it is.
            sync_dir(&journal.dir)
                .map_err(OpenFailure::io("cannot sync the directory of", path))?;
            return Ok((journal, Vec::new()));
        }
        let contents = read(&file, path, &kind, length)?;
        let extent = match &contents.cut {
            Some(why) => {
                cut_tail(&file, path, contents.end, why)?;
                (contents.end, contents.end)
            }
            None => (contents.end, length),
        };
        // The last append read may be only in the page cache: unsynced by a killed process, or
        // its sync failed (its pages then count as clean, and a sync now would not write
        // them). It is written again and synced before anyone is answered from it.
        write_again(&file, contents.last_append, contents.end).map_err(OpenFailure::io(
            "cannot write again the last append of",
            path,
        ))?;
        let mut journal = Journal::at(path, kind, file, contents.records.len(), extent);
        if contents.format == Format::FramePerRecord {
            // Appends go in frames of their own only in the current format.
            let payloads: Vec<Vec<u8>> = contents
                .records
                .iter()
                .map(|record| record.payload.clone())
                .collect();
            journal.rewrite(&payloads).map_err(OpenFailure::io(
                "cannot rewrite in the current format",
                path,
            ))?;
        }
        Ok((journal, contents.records))
    }

    /// Reads the records of the journal of `kind` at `path` without changing the file: a
    /// missing or headerless file holds no records, and the records end before a torn append
    /// (which a writer in another process may be completing right now).
    ///
    /// # Errors
    /// I/O failure, a header of another kind or format, or damage in a synced append.
    pub(crate) fn read_only(path: &Path, kind: Kind) -> Result<Vec<Record>, OpenFailure> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(OpenFailure::io("cannot open", path)(error)),
        };
        let length = file
            .metadata()
            .map_err(OpenFailure::io("cannot inspect", path))?
            .len();
        if never_written(&file, path, length)? {
            // Being created, or left by a crash before its header was synced: no records.
            return Ok(Vec::new());
        }
        Ok(read(&file, path, &kind, length)?.records)
    }

    /// The journal of `file`, holding `records`, its `(end, allocated)` as the fields say.
    fn at(
        path: &Path,
        kind: Kind,
        file: File,
        records: usize,
        (end, allocated): (u64, u64),
    ) -> Journal {
        Journal {
            path: path.to_owned(),
            dir: parent_of(path).to_owned(),
            kind,
            file,
            records,
            end,
            allocated,
            failure: None,
        }
    }

    /// Appends `records`, in one frame (or several, each synced before the next, when one
    /// cannot hold them), and syncs them to disk.
    ///
    /// # Errors
    /// Writing or syncing failed, now or earlier (see the module documentation).
    pub(crate) fn append(&mut self, records: &[Vec<u8>]) -> io::Result<()> {
        self.append_within(records, MAX_PAYLOAD)
    }

    /// As [`Journal::append`], in frames of at most `most` bytes each: records that one frame
    /// cannot hold are appended in several, each synced before the next is written, so that
    /// only the last can be torn.
    fn append_within(&mut self, records: &[Vec<u8>], most: usize) -> io::Result<()> {
        for frame in frames_within(records, most)? {
            self.append_frame(frame)?;
        }
        Ok(())
    }

    fn append_frame(&mut self, records: &[Vec<u8>]) -> io::Result<()> {
        self.refuse_after_failure()?;
        let mut bytes = Vec::new();
        write_group(&mut bytes, records)?;
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
        self.rewrite_within(records, MAX_PAYLOAD)
    }

    /// As [`Journal::rewrite`], in frames of at most `most` bytes each.
    fn rewrite_within(&mut self, records: &[Vec<u8>], most: usize) -> io::Result<()> {
        self.refuse_after_failure()?;
        let mut bytes = Format::FramePerAppend.magic(&self.kind).to_vec();
        for frame in frames_within(records, most)? {
            write_group(&mut bytes, frame)?;
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

/// Whether the file at `path`, `length` bytes long, is one whose header never reached the
/// disk: shorter than a header, or nothing but zeros.
fn never_written(file: &File, path: &Path, length: u64) -> Result<bool, OpenFailure> {
    Ok(length < MAGIC_LEN as u64
        || only_zeros(file, length).map_err(OpenFailure::io("cannot read", path))?)
}

/// Reads the header and every intact record of the journal of `kind` in `file`, `length`
/// bytes long, and says where a torn last append begins.
fn read(file: &File, path: &Path, kind: &Kind, length: u64) -> Result<Contents, OpenFailure> {
    let mut reader = BufReader::new(file);
    reader
        .seek(SeekFrom::Start(0))
        .map_err(OpenFailure::io("cannot read", path))?;
    let mut found = [0u8; MAGIC_LEN];
    reader
        .read_exact(&mut found)
        .map_err(OpenFailure::io("cannot read", path))?;
    let Some(format) = Format::ALL
        .into_iter()
        .find(|format| format.magic(kind) == found)
    else {
        return Err(Corruption::new(
            path,
            0,
            format!(
                "the file starts with {found:?}, not the header {:?} of this kind of file",
                String::from_utf8_lossy(&Format::FramePerAppend.magic(kind))
            ),
        )
        .into());
    };
    let mut scanner = FrameScanner::new(reader, MAGIC_LEN as u64, length);
    let mut records = Vec::new();
    // Before any frame, the header is what the last write may have left unsynced.
    let mut last_append = 0;
    loop {
        let scanned = scanner
            .next_frame()
            .map_err(OpenFailure::io("cannot read", path))?;
        let (end, cut) = match scanned {
            Scanned::Frame { offset, payload } => {
                last_append = offset;
                match format {
                    Format::FramePerRecord => records.push(Record { offset, payload }),
                    Format::FramePerAppend => read_group(&payload, offset, &mut records)
                        .map_err(|problem| Corruption::new(path, offset, problem))?,
                }
                continue;
            }
            Scanned::End { offset } => (offset, None),
            Scanned::Torn { offset, reason } => (
                offset,
                Some(format!(
                    "cutting off a torn append at the end of the file: {reason}"
                )),
            ),
            Scanned::Corrupt { offset, problem } => {
                let after = after_damage(file, offset, length)
                    .map_err(OpenFailure::io("cannot read", path))?;
                if after != AfterDamage::LostSectors {
                    return Err(Corruption::new(path, offset, problem).into());
                }
                (
                    offset,
                    Some(format!(
                        "cutting off the last append, whose write lost a sector: {problem}"
                    )),
                )
            }
        };
        return Ok(Contents {
            format,
            records,
            last_append: last_append.min(end),
            end,
            cut,
        });
    }
}

/// `records` cut into runs that each fit one frame's payload of at most `most` bytes (each
/// record after its `u32` length).
///
/// # Errors
/// A record too large for any frame.
fn frames_within(records: &[Vec<u8>], most: usize) -> io::Result<Vec<&[Vec<u8>]>> {
    let mut frames = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, record) in records.iter().enumerate() {
        let size = 4 + record.len();
        if size > most {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a journal record of {} bytes is more than a frame holds",
                    record.len()
                ),
            ));
        }
        if bytes + size > most {
            frames.push(&records[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += size;
    }
    if start < records.len() {
        frames.push(&records[start..]);
    }
    Ok(frames)
}

/// Appends one frame holding `records`, each after its `u32` length.
fn write_group(out: &mut Vec<u8>, records: &[Vec<u8>]) -> io::Result<()> {
    let mut payload = Vec::new();
    for record in records {
        put_u32(&mut payload, u32_length(record.len(), "a journal record")?);
        payload.extend_from_slice(record);
    }
    write_frame(out, &payload)
}

/// Adds the records of the frame at `offset`, whose payload is `group`, to `records`.
///
/// # Errors
/// A length that runs past the frame.
fn read_group(group: &[u8], offset: u64, records: &mut Vec<Record>) -> Result<(), String> {
    let mut decoder = Decoder::new(group);
    while decoder.position() < group.len() {
        let length = decoder.u32("a record's length").map_err(|e| e.0)?;
        let payload = decoder.take(length as usize, "a record").map_err(|e| e.0)?;
        records.push(Record {
            offset,
            payload: payload.to_vec(),
        });
    }
    Ok(())
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

    const KIND: Kind = *b"TESTJR";

    fn payloads(records: Vec<Record>) -> Vec<Vec<u8>> {
        records.into_iter().map(|record| record.payload).collect()
    }

    /// Appends "a", then "bb" and "cc" together, lets `tear` damage the file given where the
    /// second append begins and ends, and checks that a reopen keeps "a" alone and appends
    /// after it.
    fn torn_last_record_is_cut(tear: impl FnOnce(&File, u64, u64)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, records) = Journal::open(&path, KIND).unwrap();
        assert!(records.is_empty());
        journal.append(&[b"a".to_vec()]).unwrap();
        let start = journal.end;
        journal.append(&[b"bb".to_vec(), b"cc".to_vec()]).unwrap();
        let end = journal.end;
        drop(journal);
        tear(
            &OpenOptions::new().write(true).open(&path).unwrap(),
            start,
            end,
        );
        let (mut journal, records) = Journal::open(&path, KIND).unwrap();
        assert_eq!(payloads(records), vec![b"a".to_vec()]);
        journal.append(&[b"c".to_vec()]).unwrap();
        drop(journal);
        let records = payloads(Journal::open(&path, KIND).unwrap().1);
        assert_eq!(records, vec![b"a".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_cut() {
        // A crash cut the last record short: the file ends inside it.
        torn_last_record_is_cut(|file, _, end| file.set_len(end - 1).unwrap());
    }

    #[test]
    fn a_record_torn_inside_the_zeros_ahead_is_cut() {
        // A crash wrote all of the last record but its last byte: zeros follow it.
        torn_last_record_is_cut(|file, _, end| write_all_at(file, &[0], end - 1).unwrap());
    }

    /// A journal with "a", then an append of records long enough to span sectors, whose
    /// first sector then reads as zeros (as a power loss that kept its later sectors leaves
    /// it), then "d"; returns the path and where "d" begins.
    fn a_lost_first_sector(dir: &Path) -> (PathBuf, u64) {
        let path = dir.join("j.log");
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
        journal.append(&[b"a".to_vec()]).unwrap();
        let start = journal.end;
        journal.append(&[vec![b'b'; 700], vec![b'c'; 700]]).unwrap();
        let after = journal.end;
        journal.append(&[b"d".to_vec()]).unwrap();
        drop(journal);
        let boundary = (start / 512 + 1) * 512;
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        write_all_at(&file, &vec![0; (boundary - start) as usize], start).unwrap();
        (path, after)
    }

    #[test]
    fn a_lost_sector_with_a_later_append_after_it_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = a_lost_first_sector(dir.path());
        // "d" was appended after it: the damaged append had been synced.
        let error = Journal::open(&path, KIND).unwrap_err();
        assert!(error.to_string().contains("at byte offset"), "{error}");
        assert!(Journal::read_only(&path, KIND).is_err());
    }

    #[test]
    fn a_lost_sector_in_the_last_append_ends_the_records_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, after) = a_lost_first_sector(dir.path());
        // Without "d", the damaged append is the last one: a write that never completed.
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let length = file.metadata().unwrap().len();
        write_all_at(&file, &vec![0; (length - after) as usize], after).unwrap();
        let read = payloads(Journal::read_only(&path, KIND).unwrap());
        assert_eq!(read, vec![b"a".to_vec()], "a reader stops before it");
        assert_eq!(
            payloads(Journal::open(&path, KIND).unwrap().1),
            vec![b"a".to_vec()],
            "a writer cuts it off"
        );
    }

    #[test]
    fn a_journal_of_a_frame_per_record_is_read_and_rewritten_in_frames_per_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let mut bytes = Format::FramePerRecord.magic(&KIND).to_vec();
        for record in [&b"a"[..], b"bb", b"ccc"] {
            write_frame(&mut bytes, record).unwrap();
        }
        bytes.resize(bytes.len() + 4096, 0);
        fs::write(&path, &bytes).unwrap();
        let expected = vec![b"a".to_vec(), b"bb".to_vec(), b"ccc".to_vec()];
        assert_eq!(payloads(Journal::read_only(&path, KIND).unwrap()), expected);
        assert_eq!(fs::read(&path).unwrap(), bytes, "a reader changes nothing");

        let (mut journal, records) = Journal::open(&path, KIND).unwrap();
        assert_eq!(payloads(records), expected);
        assert_eq!(
            fs::read(&path).unwrap()[..MAGIC_LEN],
            Format::FramePerAppend.magic(&KIND),
            "a writer rewrites it in the current format"
        );
        journal.append(&[b"dddd".to_vec()]).unwrap();
        drop(journal);
        let mut all = expected;
        all.push(b"dddd".to_vec());
        assert_eq!(payloads(Journal::open(&path, KIND).unwrap().1), all);
    }

    #[test]
    fn appends_fill_the_zeros_ahead_and_grow_the_file_only_past_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let length = || fs::metadata(&path).unwrap().len();
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
        let created = length();
        assert_eq!(created, MAGIC_LEN as u64 + *PREALLOCATION.start());
        journal.append(&[b"small".to_vec()]).unwrap();
        assert_eq!(
            length(),
            created,
            "an append that fits keeps the file's length"
        );
        drop(journal);

        let (mut journal, records) = Journal::open(&path, KIND).unwrap();
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
        let records = payloads(Journal::open(&path, KIND).unwrap().1);
        assert_eq!(records, vec![b"small".to_vec(), large, b"after".to_vec()]);
    }

    #[test]
    fn a_rewrite_replaces_everything_and_a_wrong_magic_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
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
        let records = payloads(Journal::open(&path, KIND).unwrap().1);
        assert_eq!(records, vec![b"new".to_vec(), b"newer".to_vec()]);
        let error = Journal::open(&path, *b"OTHERJ").unwrap_err();
        assert!(error.to_string().contains("at byte offset 0"), "{error}");
    }

    #[test]
    fn records_one_frame_cannot_hold_are_appended_and_rewritten_in_several() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
        let records: Vec<Vec<u8>> = (0..10_u8).map(|n| vec![b'a' + n; 7]).collect();
        // Two records (4 + 7 bytes each) to a frame of at most 25 bytes.
        journal.append_within(&records, 25).unwrap();
        drop(journal);
        let (mut journal, read) = Journal::open(&path, KIND).unwrap();
        assert_eq!(payloads(read), records);
        journal.rewrite_within(&records[..5], 25).unwrap();
        drop(journal);
        let (mut journal, read) = Journal::open(&path, KIND).unwrap();
        assert_eq!(payloads(read), records[..5]);
        let error = journal.append_within(&[vec![0; 30]], 25).unwrap_err();
        assert!(
            error.to_string().contains("more than a frame holds"),
            "{error}"
        );
    }

    #[test]
    fn after_a_failed_write_every_later_append_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
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
        let records = payloads(Journal::open(&path, KIND).unwrap().1);
        assert_eq!(records, vec![b"kept".to_vec()]);
    }

    #[test]
    fn a_rewrite_failing_after_its_rename_loses_no_acknowledged_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let (mut journal, _) = Journal::open(&path, KIND).unwrap();
        journal.append(&[b"old".to_vec()]).unwrap();
        // The rename succeeds, then syncing the (missing) directory fails.
        journal.dir = dir.path().join("missing");
        assert!(journal.rewrite(&[b"new".to_vec()]).is_err());
        let later = journal.append(&[b"later".to_vec()]);
        drop(journal);
        let records = payloads(Journal::open(&path, KIND).unwrap().1);
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
