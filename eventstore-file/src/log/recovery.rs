//! Opening the event log: every segment is scanned once, frame by frame, to rebuild the index.
//! A torn frame at the end of the last segment is cut off, and so is damage in the last
//! segment that only frames of its own group follow (see `group_tail`); damage anywhere else
//! stops the open with an error naming the file and offset.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use crate::disk::corruption::{Corruption, OpenFailure};
use crate::disk::positioned_io::{only_zeros, write_again};
use crate::log::event_record::{decode_batch, group_start, EventFields};
use crate::log::frame::{FrameScanner, Scanned, HEADER_LEN};
use crate::log::group_tail::{after_damage, AfterDamage};
use crate::log::index::{EventIndex, IndexedEvent, Location};
use crate::log::segments::{
    create_segment, decode_header, encode_header, list_segments, SegmentWriter, SEGMENT_HEADER_LEN,
};

/// Rebuilds the index of the log in `dir` and returns it with a writer for its last segment.
///
/// # Errors
/// I/O failure, or damage that a torn write cannot explain.
pub(crate) fn recover_log(
    dir: &Path,
    max_segment_bytes: u64,
) -> Result<(EventIndex, SegmentWriter), OpenFailure> {
    let mut segments =
        list_segments(dir).map_err(OpenFailure::io("cannot list the segments of", dir))?;
    // The last segment is appended to; the ones before it are sealed.
    let (last_first, last_path) = match segments.pop() {
        Some(last) => last,
        None => {
            create_segment(dir, 1)
                .map_err(OpenFailure::io("cannot create the first segment in", dir))?;
            (1, dir.join(crate::log::segments::segment_file_name(1)))
        }
    };
    let mut index = EventIndex::default();
    for (number, (named_first, path)) in segments.iter().enumerate() {
        index_segment(path, *named_first, Mode::Sealed, number as u32, &mut index)?;
    }
    let number = segments.len() as u32;
    let extent = index_segment(&last_path, last_first, Mode::RepairLast, number, &mut index)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&last_path)
        .map_err(OpenFailure::io("cannot open for appending", &last_path))?;
    // What the scan read of the last group may be only in the page cache: a write that a
    // killed process never synced, or one whose sync failed (the kernel then counts its
    // pages clean, so a sync now would not write them). Once indexed, a retry can be answered
    // from it, so it is written again and synced first.
    write_again(&file, extent.last_group_start, extent.frames_end).map_err(OpenFailure::io(
        "cannot write again the last group of",
        &last_path,
    ))?;
    let writer = SegmentWriter::new(
        dir,
        max_segment_bytes,
        file,
        &last_path,
        number,
        extent.frames_end,
        extent.file_length,
    );
    Ok((index, writer))
}

/// Indexes the log in `dir` as it is on disk, changing nothing: for a reader beside a writer
/// that may be in the middle of an append. The log ends before a torn frame at the end of the
/// last segment, or before a last segment whose header is not written yet.
///
/// # Errors
/// `dir` holds no segment; I/O failure; damage that a write in progress cannot explain.
pub(crate) fn read_log(dir: &Path) -> Result<EventIndex, OpenFailure> {
    let segments =
        list_segments(dir).map_err(OpenFailure::io("cannot list the segments of", dir))?;
    if segments.is_empty() {
        return Err(OpenFailure::NotAStore {
            dir: dir.to_owned(),
        });
    }
    let mut index = EventIndex::default();
    let last = segments.len() - 1;
    for (number, (named_first, path)) in segments.iter().enumerate() {
        let mode = if number == last {
            Mode::ReadLast
        } else {
            Mode::Sealed
        };
        index_segment(path, *named_first, mode, number as u32, &mut index)?;
    }
    Ok(index)
}

/// How a segment is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A sealed segment: it ends with its last frame, and any damage is corruption.
    Sealed,
    /// The last segment, opened for appending: a torn tail is cut off, a missing header
    /// written.
    RepairLast,
    /// The last segment, read only: a torn tail or a missing header ends the log there.
    ReadLast,
}

impl Mode {
    fn is_last(self) -> bool {
        self != Mode::Sealed
    }
}

/// Indexes segment `number`, named as starting at `named_first`, and makes it readable.
fn index_segment(
    path: &Path,
    named_first: u64,
    mode: Mode,
    number: u32,
    index: &mut EventIndex,
) -> Result<Extent, OpenFailure> {
    let expected_first = index.next_position();
    if named_first != expected_first {
        return Err(Corruption::new(
            path,
            0,
            format!(
                "the segment's name says it starts at position {named_first}, but the \
                 segments before it end at position {}",
                expected_first - 1
            ),
        )
        .into());
    }
    let extent = scan_segment(path, mode, expected_first, number, index)?;
    let reader = File::open(path).map_err(OpenFailure::io("cannot open", path))?;
    index.add_segment(Arc::new(reader));
    Ok(extent)
}

/// Where a scanned segment's frames end, where the write of the last group of them began,
/// and how long the file is (zero-filled after them).
#[derive(Debug, Clone, Copy)]
struct Extent {
    last_group_start: u64,
    frames_end: u64,
    file_length: u64,
}

impl Extent {
    fn exact(length: u64) -> Extent {
        Extent {
            last_group_start: length,
            frames_end: length,
            file_length: length,
        }
    }

    /// This extent, its last group begun at `start` (no earlier than the frames' end, when
    /// the frames were cut before it).
    fn with_last_group(self, start: u64) -> Extent {
        Extent {
            last_group_start: start.min(self.frames_end),
            ..self
        }
    }
}

/// Indexes one segment's events; returns its extent after any repair.
fn scan_segment(
    path: &Path,
    mode: Mode,
    expected_first: u64,
    number: u32,
    index: &mut EventIndex,
) -> Result<Extent, OpenFailure> {
    let is_last = mode.is_last();
    let mut file = OpenOptions::new()
        .read(true)
        .write(mode == Mode::RepairLast)
        .open(path)
        .map_err(OpenFailure::io("cannot open", path))?;
    let length = file
        .metadata()
        .map_err(OpenFailure::io("cannot inspect", path))?
        .len();
    if length < SEGMENT_HEADER_LEN && !is_last {
        return Err(Corruption::new(
            path,
            0,
            format!("a sealed segment is only {length} bytes long, shorter than its header"),
        )
        .into());
    }
    if is_last
        && header_never_written(&file, length).map_err(OpenFailure::io("cannot read", path))?
    {
        if mode == Mode::ReadLast {
            // Being created by the writer right now, or by a crash: no events in it yet.
            return Ok(Extent::exact(length));
        }
        // Created by a crash before its header was synced: write the header afresh.
        tracing::warn!(file = %path.display(), length, "rewriting an incomplete segment header");
        rewrite_header(&mut file, expected_first)
            .map_err(OpenFailure::io("cannot repair", path))?;
        return Ok(Extent::exact(SEGMENT_HEADER_LEN));
    }
    let mut reader = BufReader::with_capacity(1 << 20, &file);
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    reader
        .read_exact(&mut header)
        .map_err(OpenFailure::io("cannot read", path))?;
    let first = decode_header(&header).map_err(|problem| Corruption::new(path, 0, problem.0))?;
    if first != expected_first {
        return Err(Corruption::new(
            path,
            0,
            format!(
                "the segment header says it starts at position {first}, expected {expected_first}"
            ),
        )
        .into());
    }
    let mut scanner = FrameScanner::new(reader, SEGMENT_HEADER_LEN, length);
    // Before any frame, the header is what the last write may have left unsynced.
    let mut last_group = 0;
    loop {
        match scanner
            .next_frame()
            .map_err(OpenFailure::io("cannot read", path))?
        {
            Scanned::Frame { offset, payload } => {
                index_frame(path, offset, &payload, number, index)?;
                // A frame of kind 1 does not say where its group began: itself, at least.
                last_group = match group_start(&payload) {
                    Ok(Some(start)) if start <= offset => start,
                    _ => offset,
                };
            }
            Scanned::End { offset } if is_last || offset == length => {
                return Ok(Extent {
                    last_group_start: last_group.min(offset),
                    frames_end: offset,
                    file_length: length,
                })
            }
            Scanned::End { offset } => {
                return Err(Corruption::new(
                    path,
                    offset,
                    format!(
                        "a sealed segment holds {} zero bytes after its last frame",
                        length - offset
                    ),
                )
                .into())
            }
            Scanned::Torn { offset, reason } if is_last => {
                return end_before_unacknowledged(&file, path, mode, offset, length, reason)
                    .map(|extent| extent.with_last_group(last_group));
            }
            Scanned::Torn { offset, reason } => {
                return Err(Corruption::new(
                    path,
                    offset,
                    format!("a sealed segment ends in {reason}"),
                )
                .into())
            }
            Scanned::Corrupt { offset, problem } if is_last => {
                let after = after_damage(&file, offset, length)
                    .map_err(OpenFailure::io("cannot read", path))?;
                let unacknowledged = |reason| {
                    end_before_unacknowledged(&file, path, mode, offset, length, reason)
                        .map(|extent| extent.with_last_group(last_group))
                };
                let problem = match after {
                    AfterDamage::ItsOwnGroup { .. } => {
                        return unacknowledged(
                            "a group write whose pages reached the disk out of order",
                        )
                    }
                    AfterDamage::LostSectors => {
                        return unacknowledged("a write whose first sectors never reached the disk")
                    }
                    AfterDamage::NoLostSector => problem,
                    AfterDamage::LaterGroup { offset: later } => {
                        format!("{problem}, before a later group's frame at byte offset {later}")
                    }
                    AfterDamage::Unrecorded { offset: later } => format!(
                        "{problem}, before a frame at byte offset {later} that does not record \
                         its group"
                    ),
                };
                return Err(Corruption::new(path, offset, problem).into());
            }
            Scanned::Corrupt { offset, problem } => {
                return Err(Corruption::new(path, offset, problem).into())
            }
        }
    }
}

/// Ends the last segment at `offset`, before a write that was never acknowledged (`reason`
/// says what was found there): a read-only open reads up to it (a write may be in progress,
/// or a crash cut one short), an open for appending cuts it off.
fn end_before_unacknowledged(
    file: &File,
    path: &Path,
    mode: Mode,
    offset: u64,
    length: u64,
    reason: &'static str,
) -> Result<Extent, OpenFailure> {
    if mode == Mode::RepairLast {
        tracing::warn!(
            file = %path.display(),
            offset,
            cut_bytes = length - offset,
            reason,
            "cutting off a torn, never acknowledged append at the end of the log"
        );
        file.set_len(offset)
            .and_then(|()| file.sync_data())
            .map_err(OpenFailure::io("cannot cut the torn tail of", path))?;
    }
    Ok(Extent::exact(offset))
}

fn index_frame(
    path: &Path,
    frame_offset: u64,
    payload: &[u8],
    segment: u32,
    index: &mut EventIndex,
) -> Result<(), OpenFailure> {
    let corrupt = |problem: String| Corruption::new(path, frame_offset, problem);
    let events = decode_batch(payload).map_err(|error| corrupt(error.0))?;
    for (offset, bytes) in events {
        let fields = EventFields::decode(bytes).map_err(|error| corrupt(error.0))?;
        let expected = index.next_position();
        if fields.position != expected {
            return Err(corrupt(format!(
                "the event {} records position {}, but the log before it ends at position {}",
                fields.id,
                fields.position,
                expected - 1
            ))
            .into());
        }
        index.insert(&IndexedEvent {
            id: fields.id,
            context: fields.context,
            purpose: fields.purpose,
            event_type: fields.event_type,
            tags: fields.tags,
            idempotency_key: fields.idempotency_key,
            location: Location {
                segment,
                length: bytes.len() as u32,
                offset: frame_offset + HEADER_LEN as u64 + offset,
            },
        });
    }
    Ok(())
}

/// Whether the last segment's header never reached the disk: the file is shorter than its
/// header, or holds nothing but zeros (a crash can keep a new file's length and lose its
/// bytes). Such a segment holds no event, as an append is acknowledged only after its segment's
/// header was synced; a zeroed header before any written byte is damage, not this.
fn header_never_written(file: &File, length: u64) -> std::io::Result<bool> {
    Ok(length < SEGMENT_HEADER_LEN || only_zeros(file, length)?)
}

fn rewrite_header(file: &mut File, first_position: u64) -> std::io::Result<()> {
    use std::io::Write;
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&encode_header(first_position))?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::event_record::test_frame;
    use crate::log::frame::write_frame;
    use crate::log::segments::segment_file_name;

    /// A batch frame holding the event at `position`, over three sectors long.
    fn frame(position: u64) -> Vec<u8> {
        test_frame(position, &"x".repeat(1_500))
    }

    /// A store in `dir` whose first segment holds `groups`, each a group of frames written and
    /// synced together, one event each, positions from 1; returns where each frame starts.
    fn write_groups(dir: &Path, groups: &[usize]) -> Vec<Vec<u64>> {
        let file = create_segment(dir, 1).unwrap();
        let path = dir.join(segment_file_name(1));
        let (len, max) = (SEGMENT_HEADER_LEN, 1 << 30);
        let mut writer = SegmentWriter::new(dir, max, file, &path, 0, len, len);
        let mut position = 1;
        let mut offsets = Vec::new();
        for &frames in groups {
            let mut group = Vec::new();
            for _ in 0..frames {
                let (_, offset) = writer.append(&frame(position), position).unwrap();
                group.push(offset);
                position += 1;
            }
            writer.sync().unwrap();
            offsets.push(group);
        }
        offsets
    }

    fn segment(dir: &Path) -> std::path::PathBuf {
        dir.join(segment_file_name(1))
    }

    /// Zeros `length` bytes of the first segment from `offset`, as a write the disk lost.
    fn lose(dir: &Path, offset: u64, length: usize) {
        let file = OpenOptions::new().write(true).open(segment(dir)).unwrap();
        crate::disk::positioned_io::write_all_at(&file, &vec![0; length], offset).unwrap();
    }

    fn corruption(failure: OpenFailure) -> String {
        match failure {
            OpenFailure::Corrupt(corruption) => corruption.to_string(),
            other => panic!("corruption expected, got {other}"),
        }
    }

    #[test]
    fn a_group_whose_later_frame_is_whole_without_an_earlier_one_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 3]);
        let lost = offsets[1][0];
        // The group's first frame never reached the disk; its two later frames did.
        lose(dir.path(), lost, frame(2).len());

        let read = read_log(dir.path()).unwrap();
        assert_eq!(
            read.next_position(),
            2,
            "a read-only open reads up to the group"
        );
        let on_disk = std::fs::metadata(segment(dir.path())).unwrap().len();
        assert!(on_disk > lost, "a read-only open changes nothing");

        let (index, _) = recover_log(dir.path(), 1 << 30).unwrap();
        assert_eq!(
            index.next_position(),
            2,
            "the acknowledged group stays, whole"
        );
        let on_disk = std::fs::metadata(segment(dir.path())).unwrap().len();
        assert_eq!(on_disk, lost, "the unacknowledged group is cut off");
    }

    #[test]
    fn a_group_missing_a_middle_frame_keeps_the_frames_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 3]);
        let lost = offsets[1][1];
        // At least one of its sectors, whole or from its start to the sector's end.
        lose(dir.path(), lost, 700);

        let (index, _) = recover_log(dir.path(), 1 << 30).unwrap();
        assert_eq!(
            index.next_position(),
            3,
            "the whole frames before the damage are kept: each is a whole batch"
        );
        assert_eq!(std::fs::metadata(segment(dir.path())).unwrap().len(), lost);
    }

    #[test]
    fn a_lone_frame_whose_first_sector_was_lost_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 1]);
        let lost = offsets[1][0];
        // From the end of the first group to the next sector boundary: the rest of the
        // frame, in the sectors after, reached the disk.
        let boundary = (lost / 512 + 1) * 512;
        lose(dir.path(), lost, (boundary - lost) as usize);

        let (index, _) = recover_log(dir.path(), 1 << 30).unwrap();
        assert_eq!(index.next_position(), 2);
        assert_eq!(std::fs::metadata(segment(dir.path())).unwrap().len(), lost);
    }

    #[test]
    fn zeros_that_end_before_a_sector_boundary_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 1]);
        let damaged = offsets[1][0];
        let boundary = (damaged / 512 + 1) * 512;
        // Zeros up to one byte short of the boundary: no sector the disk lost whole.
        lose(dir.path(), damaged, (boundary - damaged - 1) as usize);

        let report = corruption(recover_log(dir.path(), 1 << 30).unwrap_err());
        assert!(report.contains(&format!("offset {damaged}")), "{report}");
    }

    #[test]
    fn a_flipped_byte_in_a_synced_last_group_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 3]);
        let damaged = offsets[1][0];
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(segment(dir.path()))
            .unwrap();
        let mut byte = [0u8; 1];
        let at = damaged + 100;
        crate::disk::positioned_io::read_exact_at(&file, &mut byte, at).unwrap();
        crate::disk::positioned_io::write_all_at(&file, &[byte[0] ^ 1], at).unwrap();

        let report = corruption(recover_log(dir.path(), 1 << 30).unwrap_err());
        assert!(report.contains(&format!("offset {damaged}")), "{report}");
    }

    #[test]
    fn a_lost_sector_across_two_frames_of_an_unsynced_group_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 2]);
        // The sector holding the end of the group's first frame and the second's header.
        let second = offsets[1][1];
        lose(dir.path(), second / 512 * 512, 512);

        let (index, _) = recover_log(dir.path(), 1 << 30).unwrap();
        assert_eq!(index.next_position(), 2);
        let on_disk = std::fs::metadata(segment(dir.path())).unwrap().len();
        assert_eq!(on_disk, offsets[1][0]);
    }

    #[test]
    fn damage_before_a_later_group_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 1, 2]);
        let damaged = offsets[1][0];
        lose(dir.path(), damaged, 12);
        let length = std::fs::metadata(segment(dir.path())).unwrap().len();

        let report = corruption(recover_log(dir.path(), 1 << 30).unwrap_err());
        assert!(
            report.contains(&format!("offset {damaged}"))
                && report.contains(&format!(
                    "later group's frame at byte offset {}",
                    offsets[2][0]
                )),
            "{report}"
        );
        let report = corruption(read_log(dir.path()).unwrap_err());
        assert!(report.contains("later group's frame"), "{report}");
        assert_eq!(
            std::fs::metadata(segment(dir.path())).unwrap().len(),
            length,
            "nothing is cut"
        );
    }

    #[test]
    fn damage_before_a_frame_that_does_not_record_its_group_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = write_groups(dir.path(), &[1, 1]);
        let damaged = offsets[1][0];
        lose(dir.path(), damaged, 12);
        // A batch as written before batches recorded their group, appended after the damage.
        let mut old = Vec::new();
        write_frame(&mut old, &ungrouped(&frame(3))).unwrap();
        let file = OpenOptions::new()
            .append(true)
            .open(segment(dir.path()))
            .unwrap();
        crate::disk::positioned_io::write_all_at(&file, &old, file.metadata().unwrap().len())
            .unwrap();

        let report = corruption(recover_log(dir.path(), 1 << 30).unwrap_err());
        assert!(report.contains("does not record its group"), "{report}");
    }

    #[test]
    fn batches_written_before_they_recorded_their_group_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment_bytes = crate::log::segments::encode_header(1).to_vec();
        for position in 1..=3 {
            write_frame(&mut segment_bytes, &ungrouped(&frame(position))).unwrap();
        }
        std::fs::write(segment(dir.path()), &segment_bytes).unwrap();

        let (index, _) = recover_log(dir.path(), 1 << 30).unwrap();
        assert_eq!(index.next_position(), 4);
    }

    /// The payload of batch `frame` as a batch of kind 1: without its group's start.
    fn ungrouped(frame: &[u8]) -> Vec<u8> {
        let payload = &frame[HEADER_LEN..];
        assert_eq!(payload[0], 2, "a batch that records its group");
        [&[1u8][..], &payload[9..]].concat()
    }
}
