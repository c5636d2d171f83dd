//! Telling a group write whose pages reached the disk out of order from damage.
//!
//! The writer writes a group of frames in one piece and syncs it before it answers anyone,
//! and writes the next group only after that sync: at most the last group of the last
//! segment is ever unacknowledged. A crash during its write can keep any of its pages and
//! lose others, in any order. A lost page keeps what the disk held before, the zeros the
//! segment was preallocated with, so a scan finds damage followed by more of the group's
//! frames, which is not a torn tail (nothing but zeros after it).
//!
//! Every batch frame records where its group's write began. A group whose later frame is
//! whole on disk while an earlier part of it is not was never completely synced, so it was
//! never acknowledged: damage followed by a whole frame of its own group, and by no frame of
//! a later group, is such a write. Damage followed by a frame of a later group lies in a group
//! that was synced, and is corruption; so is damage followed by a frame from before batches
//! recorded their group, which cannot tell.
//!
//! A group of one frame whose first sector was lost leaves no whole frame to ask: zeros from
//! the end of the frames before it up to a sector boundary, then the rest of the frame. The
//! disk writes whole sectors, so zeros that run from the damage to a sector boundary are a
//! sector it never wrote, and a write that lost a sector was never synced either. Damage
//! followed by no whole frame and not starting with such zeros is corruption.

use std::fs::File;
use std::io;

use crate::event_record::group_start;
use crate::frame::{HEADER_LEN, MAX_PAYLOAD};
use crate::positioned_io::read_exact_at;

/// Bytes read at a time while looking for frames after damage.
const CHUNK: usize = 1 << 20;

/// The smallest unit a disk writes: a write cut short by a crash loses whole sectors.
const SECTOR: u64 = 512;

/// What follows damage found at some offset of the last segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterDamage {
    /// Whole frames of the damaged frame's own group, the first at `offset`, and none of a
    /// later group: a group write that never completed its sync.
    ItsOwnGroup {
        /// Where the first whole frame of the group after the damage starts.
        offset: u64,
    },
    /// A whole frame of a later group, at `offset`: the damage lies in a synced group.
    LaterGroup {
        /// Where the later group's frame starts.
        offset: u64,
    },
    /// A whole frame, at `offset`, that does not record its group.
    Unrecorded {
        /// Where that frame starts.
        offset: u64,
    },
    /// No whole frame, and zeros from the damage up to a sector boundary: a write whose
    /// first sectors never reached the disk.
    LostSectors,
    /// No whole frame, and data before the next sector boundary.
    NoFrame,
}

/// Looks at every offset of `file` after `damaged` up to `end` for an intact frame, and
/// says what the frames found there make of the damage.
///
/// # Errors
/// Reading failed.
pub(crate) fn after_damage(file: &File, damaged: u64, end: u64) -> io::Result<AfterDamage> {
    let mut chunk = vec![0u8; CHUNK];
    let mut at = damaged + 1;
    let mut own_group = None;
    while at + HEADER_LEN as u64 <= end {
        let read = (end - at).min(CHUNK as u64) as usize;
        read_exact_at(file, &mut chunk[..read], at)?;
        let mut skip_to = None;
        for start in 0..=read - HEADER_LEN {
            let offset = at + start as u64;
            if skip_to.is_some_and(|skip_to| offset < skip_to) {
                continue;
            }
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&chunk[start..start + HEADER_LEN]);
            let Some((length, payload_crc)) = intact_header(&header, offset, end) else {
                continue;
            };
            let mut payload = vec![0u8; length];
            read_exact_at(file, &mut payload, offset + HEADER_LEN as u64)?;
            if crc32c::crc32c(&payload) != payload_crc {
                continue;
            }
            match group_start(&payload) {
                Ok(Some(group)) if group <= damaged => {
                    own_group = own_group.or(Some(offset));
                    // Frames do not overlap: the next one starts after this one.
                    skip_to = Some(offset + (HEADER_LEN + length) as u64);
                }
                Ok(Some(_)) => return Ok(AfterDamage::LaterGroup { offset }),
                Ok(None) | Err(_) => return Ok(AfterDamage::Unrecorded { offset }),
            }
        }
        // The next chunk starts where a header could begin that this one did not hold whole,
        // or after the last frame found.
        let next = at + (read - HEADER_LEN + 1) as u64;
        at = skip_to.map_or(next, |skip_to| skip_to.max(next));
    }
    if let Some(offset) = own_group {
        return Ok(AfterDamage::ItsOwnGroup { offset });
    }
    let boundary = (damaged / SECTOR + 1) * SECTOR;
    let mut first_sector = vec![0u8; (boundary.min(end) - damaged) as usize];
    read_exact_at(file, &mut first_sector, damaged)?;
    if first_sector.iter().all(|&byte| byte == 0) {
        return Ok(AfterDamage::LostSectors);
    }
    Ok(AfterDamage::NoFrame)
}

/// The payload length and checksum of `header`, read at `offset`, if it is an intact frame
/// header whose frame fits before `end`.
fn intact_header(header: &[u8; HEADER_LEN], offset: u64, end: u64) -> Option<(usize, u32)> {
    let word = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    if crc32c::crc32c(&header[0..8]) != word(8) {
        return None;
    }
    let length = word(0) as usize;
    let fits = offset + (HEADER_LEN + length) as u64 <= end;
    (length > 0 && length <= MAX_PAYLOAD && fits).then_some((length, word(4)))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use eventstore_api::{EventId, EventReference, EventStreamId, StoredEvent, Tags};

    use super::*;
    use crate::event_record::{encode_batch, stamp_group_start};

    /// A file of `filler` bytes up to `at`, then a batch frame stamped with `group`.
    fn file_with_frame_at(at: usize, filler: u8, group: u64) -> File {
        let event = StoredEvent {
            stream: EventStreamId::new("orders", "eu"),
            event_type: "OrderPlaced".into(),
            reference: EventReference::at(EventId::new(), 1),
            payload: serde_json::json!({ "n": 1 }),
            tags: Tags::default(),
            timestamp: Utc::now(),
            idempotency_key: None,
        };
        let mut frame = encode_batch(&[event]).unwrap().frame;
        stamp_group_start(&mut frame, group);
        let mut bytes = vec![filler; at];
        bytes.extend_from_slice(&frame);
        bytes.extend_from_slice(&[0; 100]);
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        file
    }

    fn length(file: &File) -> u64 {
        file.metadata().unwrap().len()
    }

    #[test]
    fn a_frame_of_the_damaged_group_is_found_across_a_chunk_boundary() {
        // The frame's header starts five bytes before the end of the first chunk read.
        let at = 1 + CHUNK - 5;
        let file = file_with_frame_at(at, 0, 0);
        let found = after_damage(&file, 0, length(&file)).unwrap();
        assert_eq!(found, AfterDamage::ItsOwnGroup { offset: at as u64 });
    }

    #[test]
    fn a_frame_of_a_later_group_is_found_after_bytes_that_are_no_frame() {
        let file = file_with_frame_at(3_000, 0xAA, 2_000);
        let found = after_damage(&file, 1_000, length(&file)).unwrap();
        assert_eq!(found, AfterDamage::LaterGroup { offset: 3_000 });
    }

    #[test]
    fn bytes_that_hold_no_whole_frame_hold_no_group() {
        let file = file_with_frame_at(3_000, 0xAA, 2_000);
        let cut = tempfile::tempfile().unwrap();
        let mut bytes = vec![0u8; 3_020];
        crate::positioned_io::read_exact_at(&file, &mut bytes, 0).unwrap();
        std::io::Write::write_all(&mut &cut, &bytes).unwrap();
        // The frame's header is there, its payload cut short.
        assert_eq!(
            after_damage(&cut, 1_000, 3_020).unwrap(),
            AfterDamage::NoFrame
        );
    }
}
