//! The event log on disk: segment files `events-<first position>.log`, each a header and
//! then batch frames, appended to one at a time.
//!
//! A segment is closed for writing ("sealed") once it is full: cut to the end of its last
//! frame and synced. Only the last segment can end in a torn frame.
//!
//! The last segment is zero-filled ahead of its last frame between groups, as far as the
//! segment is long (64 KiB to 4 MiB at a time). An append then overwrites blocks that already belong to the file, so its sync
//! writes data only; appending to a growing file would also commit the new file size (a
//! journal commit of the file system) with every sync. Recovery reads the zeros as the end.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::disk::directory::sync_dir;
use crate::disk::file_failure::FileFailure;
use crate::disk::positioned_io::write_all_at;
use crate::log::codec::{DecodeError, Decoder};
use crate::log::event_record::stamp_group_start;

/// Bytes of a segment header: magic, first position, checksum of both.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 20;

const MAGIC: &[u8; 8] = b"ESFLOG01";
const PREFIX: &str = "events-";
const SUFFIX: &str = ".log";

/// How far ahead of its last frame the last segment is zero-filled: as far as the segment is
/// long, within these bounds, so that a small store stays small.
const PREALLOCATION: std::ops::RangeInclusive<u64> = (64 << 10)..=(4 << 20);

/// Zeros to fill preallocated space with.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// The file name of the segment whose first event has `first_position`.
pub(crate) fn segment_file_name(first_position: u64) -> String {
    format!("{PREFIX}{first_position:020}{SUFFIX}")
}

/// The segments in `dir`, by first position.
///
/// # Errors
/// Listing the directory failed.
pub(crate) fn list_segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let first_position = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_suffix(SUFFIX))
            .and_then(|digits| digits.parse::<u64>().ok());
        if let Some(first_position) = first_position {
            segments.push((first_position, entry.path()));
        }
    }
    segments.sort();
    Ok(segments)
}

/// A segment header for a segment starting at `first_position`.
pub(crate) fn encode_header(first_position: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    header[0..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&first_position.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..16]);
    header[16..20].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The first position a segment header records.
///
/// # Errors
/// What is wrong with the header.
pub(crate) fn decode_header(
    header: &[u8; SEGMENT_HEADER_LEN as usize],
) -> Result<u64, DecodeError> {
    let mut fields = Decoder::new(header);
    let magic: [u8; 8] = fields.array("the segment magic")?;
    let first_position = fields.u64("the first position")?;
    let crc = fields.u32("the segment header checksum")?;
    if &magic != MAGIC {
        return Err(DecodeError(format!(
            "the segment header starts with {:?}, not {:?}",
            String::from_utf8_lossy(&magic),
            String::from_utf8_lossy(MAGIC)
        )));
    }
    if crc32c::crc32c(&header[0..16]) != crc {
        return Err(DecodeError(
            "the segment header fails its checksum".to_owned(),
        ));
    }
    Ok(first_position)
}

/// Creates a segment for `first_position` in `dir` with its header synced, and syncs `dir`.
///
/// # Errors
/// Creating, writing or syncing failed.
pub(crate) fn create_segment(dir: &Path, first_position: u64) -> io::Result<File> {
    let path = dir.join(segment_file_name(first_position));
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    file.write_all(&encode_header(first_position))?;
    file.sync_all()?;
    sync_dir(dir)?;
    Ok(file)
}

/// Appends frames to the last segment, starting a new segment when it is full.
///
/// Frames are buffered by [`SegmentWriter::append`] and reach the disk with
/// [`SegmentWriter::sync`], so that a whole group of appends costs one write and one sync.
#[derive(Debug)]
pub(crate) struct SegmentWriter {
    dir: PathBuf,
    max_bytes: u64,
    file: File,
    /// The active segment's path, named in errors.
    path: PathBuf,
    segment: u32,
    /// Where the next frame goes: the end of the active segment's frames, buffered ones
    /// included.
    length: u64,
    /// Where the buffered frames go.
    written: u64,
    /// The file's size; the bytes from `length` to it are zeros.
    allocated: u64,
    buffer: Vec<u8>,
    opened: Vec<Arc<File>>,
}

impl SegmentWriter {
    /// A writer appending to `file` (at `path`), segment number `segment`, whose frames end
    /// at `length` and which is `allocated` bytes long (zeros after `length`).
    pub(crate) fn new(
        dir: &Path,
        max_bytes: u64,
        file: File,
        path: &Path,
        segment: u32,
        length: u64,
        allocated: u64,
    ) -> Self {
        SegmentWriter {
            dir: dir.to_owned(),
            max_bytes,
            file,
            path: path.to_owned(),
            segment,
            length,
            written: length,
            allocated: allocated.max(length),
            buffer: Vec::new(),
            opened: Vec::new(),
        }
    }

    /// Buffers `frame`, a batch frame whose first event has `first_position`, stamped with
    /// where its group's write begins; returns the segment number and offset it will lie at.
    /// A full segment is synced and sealed first.
    ///
    /// # Errors
    /// Sealing the full segment or starting the next one failed.
    pub(crate) fn append(
        &mut self,
        frame: &[u8],
        first_position: u64,
    ) -> Result<(u32, u64), FileFailure> {
        let full = self.length + frame.len() as u64 > self.max_bytes;
        if full && self.length > SEGMENT_HEADER_LEN {
            self.sync()?;
            // Sealed segments end with their last frame: no preallocated zeros stay behind.
            self.file
                .set_len(self.length)
                .and_then(|()| self.file.sync_all())
                .map_err(FileFailure::of("seal the full segment", &self.path))?;
            let path = self.dir.join(segment_file_name(first_position));
            self.file = create_segment(&self.dir, first_position)
                .map_err(FileFailure::of("create the next segment", &path))?;
            self.path = path;
            self.segment += 1;
            self.length = SEGMENT_HEADER_LEN;
            self.written = SEGMENT_HEADER_LEN;
            self.allocated = SEGMENT_HEADER_LEN;
            let reader =
                File::open(&self.path).map_err(FileFailure::of("open for reading", &self.path))?;
            self.opened.push(Arc::new(reader));
        }
        let offset = self.length;
        let at = self.buffer.len();
        self.buffer.extend_from_slice(frame);
        // The buffer is written in one piece at `written`: where this group's write begins.
        stamp_group_start(&mut self.buffer[at..], self.written);
        self.length += frame.len() as u64;
        Ok((self.segment, offset))
    }

    /// Writes what is buffered and syncs it to disk.
    ///
    /// # Errors
    /// Writing or syncing failed; what was buffered is then dropped.
    pub(crate) fn sync(&mut self) -> Result<(), FileFailure> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let result = write_all_at(&self.file, &self.buffer, self.written)
            .and_then(|()| self.file.sync_data())
            .map_err(FileFailure::of("write events to", &self.path));
        self.written = self.length;
        self.allocated = self.allocated.max(self.length);
        self.buffer.clear();
        if self.buffer.capacity() > 16 << 20 {
            self.buffer.shrink_to(1 << 20);
        }
        result
    }

    /// Zero-fills the active segment ahead of its last frame when less than half of the
    /// [`PREALLOCATION`] it wants is left (never past the segment's size limit), so that the
    /// next appends' syncs need not grow the file. Meant for the time between groups.
    ///
    /// # Errors
    /// Writing or syncing the zeros failed.
    pub(crate) fn preallocate(&mut self) -> Result<(), FileFailure> {
        debug_assert!(self.buffer.is_empty(), "preallocate between groups");
        let ahead = self
            .length
            .clamp(*PREALLOCATION.start(), *PREALLOCATION.end());
        let target = (self.length + ahead).min(self.max_bytes);
        if target <= self.allocated || self.allocated - self.length >= ahead / 2 {
            return Ok(());
        }
        let failing = FileFailure::of("preallocate space in", &self.path);
        let mut at = self.allocated;
        let mut zero_fill = || {
            while at < target {
                let chunk = (target - at).min(ZEROS.len() as u64) as usize;
                write_all_at(&self.file, &ZEROS[..chunk], at)?;
                at += chunk as u64;
            }
            self.file.sync_data()
        };
        zero_fill().map_err(failing)?;
        self.allocated = target;
        Ok(())
    }

    /// Puts `file` in place of the active segment's handle and returns the old one, so that a
    /// test can make writes fail with a real I/O error (a read-only handle).
    #[cfg(test)]
    pub(crate) fn replace_file(&mut self, file: File) -> File {
        std::mem::replace(&mut self.file, file)
    }

    /// Read handles of the segments started since the last call, in order.
    pub(crate) fn take_opened(&mut self) -> Vec<Arc<File>> {
        std::mem::take(&mut self.opened)
    }
}
