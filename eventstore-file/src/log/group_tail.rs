//! Telling a group write whose pages reached the disk out of order from damage.
//!
//! The writer writes a group of frames in one piece and syncs it before it answers anyone,
//! and writes the next group only after that sync: at most the last group of the last
//! segment is ever unacknowledged. A crash during its write can keep any of its pages and
//! lose others, in any order. A lost page keeps what the disk held before, the zeros the
//! segment was preallocated with, so a scan finds damage followed by more of the group's
//! frames, which is not a torn tail (nothing but zeros after it).
//!
//! Every batch frame records where its group's write began. A lost sector keeps what the
//! disk held before: zeros, where the frames after the last synced group go (preallocated,
//! or past the end of the file). Damage that shows such a sector, followed by a whole frame
//! of its own group and by no frame of a later group, is a group that never completed its
//! sync, so it was never acknowledged; so is damage that shows such a sector and is
//! followed by no whole frame at all (a group of one frame whose first sector was lost).
//! Damage followed by a frame of a later group lies in a group that was synced, and is
//! corruption; so is damage followed by a frame from before batches recorded their group,
//! which cannot tell, and damage that shows no lost sector (a flipped byte).
//!
//! The journals (`journal`) sync each frame before they write the next, so only the last
//! verdict there tells a torn append from damage: a lost sector and no whole frame after it.

use std::fs::File;
use std::io;

use crate::disk::positioned_io::read_exact_at;
use crate::log::event_record::group_start;
use crate::log::frame::{FrameHeader, HEADER_LEN};

/// Bytes read at a time while looking for frames after damage.
const CHUNK: usize = 1 << 20;

/// The smallest unit a disk writes: a write cut short by a crash loses whole sectors.
const SECTOR: u64 = 512;

/// What follows damage found at some offset of the last segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterDamage {
    /// Whole frames of the damaged frame's own group, the first at `offset`, none of a later
    /// group, and a sector before it that the disk never wrote: a group write that never
    /// completed its sync.
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
    /// No whole frame, and a sector of the damage the disk never wrote: a write whose
    /// sectors reached the disk out of order.
    LostSectors,
    /// No later group's frame, but no sector of the damage reads as one the disk never wrote.
    NoLostSector,
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
            let mut header = [[0u8; 4]; HEADER_LEN / 4];
            header
                .as_flattened_mut()
                .copy_from_slice(&chunk[start..start + HEADER_LEN]);
            let Some(FrameHeader {
                length,
                payload_crc,
            }) = FrameHeader::read(header)
            else {
                continue;
            };
            let fits = offset + (HEADER_LEN + length) as u64 <= end;
            if !FrameHeader::is_possible(length) || !fits {
                continue;
            }
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
    // The damage must show a sector the disk never wrote: a flipped byte in a group that was
    // synced, followed by its own later frames, is corruption, not a torn write.
    if let Some(offset) = own_group {
        return Ok(if lost_sector(file, damaged, offset)? {
            AfterDamage::ItsOwnGroup { offset }
        } else {
            AfterDamage::NoLostSector
        });
    }
    let data_end = data_end(file, damaged, end)?;
    Ok(if lost_sector(file, damaged, data_end)? {
        AfterDamage::LostSectors
    } else {
        AfterDamage::NoLostSector
    })
}

/// Whether the bytes from `damaged` to `until` show a sector the disk never wrote: zeros from
/// `damaged` to the next sector boundary where a frame's header belonged, or a whole sector of
/// zeros. No frame holds that many zeros in a row: a batch's binary fields are short and its
/// payloads are JSON text.
fn lost_sector(file: &File, damaged: u64, until: u64) -> io::Result<bool> {
    let boundary = (damaged / SECTOR + 1) * SECTOR;
    if boundary <= until && lost_header_start(file, damaged, boundary, until)? {
        return Ok(true);
    }
    let mut sector = [0u8; SECTOR as usize];
    let mut at = boundary;
    while at + SECTOR <= until {
        read_exact_at(file, &mut sector, at)?;
        if sector.iter().all(|&byte| byte == 0) {
            return Ok(true);
        }
        at += SECTOR;
    }
    Ok(false)
}

/// Whether the header of the frame at `damaged` lost its start, up to the sector `boundary`
/// after it, to a sector the disk never wrote: those bytes read as zeros, and a header never
/// starts with them. Four zeros or more are a payload length of 0, which no frame has. Fewer
/// are the low bytes of a length that may well be there, so they count as lost only when the
/// rest of the header restores them: some low bytes make its checksum hold, and the frame
/// they give is whole (its payload has the checksum it records), or runs on past `until`,
/// where the data ends, from a sector boundary or by a header's worth or more: its last
/// sectors never reached the disk either (a whole frame ends in fewer zeros, if any).
fn lost_header_start(file: &File, damaged: u64, boundary: u64, until: u64) -> io::Result<bool> {
    let lost = (boundary - damaged) as usize;
    let mut start = vec![0u8; lost];
    read_exact_at(file, &mut start, damaged)?;
    if start.iter().any(|&byte| byte != 0) {
        return Ok(false);
    }
    if lost >= 4 {
        return Ok(true);
    }
    // A record may end in zeros, so the frame may end after the last byte that is not one.
    let end = file.metadata()?.len();
    if damaged + HEADER_LEN as u64 > end {
        return Ok(false);
    }
    let mut header = [[0u8; 4]; HEADER_LEN / 4];
    read_exact_at(file, header.as_flattened_mut(), damaged)?;
    let high = u32::from_le_bytes(header[0]);
    for low in 1..1u32 << (8 * lost) {
        header[0] = (high | low).to_le_bytes();
        let Some(FrameHeader {
            length,
            payload_crc,
        }) = FrameHeader::read(header)
        else {
            continue;
        };
        let payload_at = damaged + HEADER_LEN as u64;
        if !FrameHeader::is_possible(length) {
            continue;
        }
        let frame_end = payload_at + length as u64;
        if frame_end >= until + HEADER_LEN as u64
            || frame_end > until && until.is_multiple_of(SECTOR)
        {
            return Ok(true);
        }
        if frame_end <= end {
            let mut payload = vec![0u8; length];
            read_exact_at(file, &mut payload, payload_at)?;
            if crc32c::crc32c(&payload) == payload_crc {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Where the data after `damaged` ends: after its last byte that is not zero (the zeros after
/// it are the preallocated space, not a lost sector).
fn data_end(file: &File, damaged: u64, end: u64) -> io::Result<u64> {
    let mut chunk = vec![0u8; CHUNK];
    let mut to = end;
    while to > damaged {
        let from = to.saturating_sub(CHUNK as u64).max(damaged);
        let read = (to - from) as usize;
        read_exact_at(file, &mut chunk[..read], from)?;
        if let Some(last) = chunk[..read].iter().rposition(|&byte| byte != 0) {
            return Ok(from + last as u64 + 1);
        }
        to = from;
    }
    Ok(damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::event_record::{stamp_group_start, test_frame};

    /// A file of `filler` bytes up to `at`, then a batch frame stamped with `group`.
    fn file_with_frame_at(at: usize, filler: u8, group: u64) -> File {
        let mut frame = test_frame(1, "");
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

    /// A file of `0xAA` up to `at`, then `frame`, then zeros.
    fn file_with(at: usize, frame: &[u8]) -> File {
        let mut bytes = vec![0xAA; at];
        bytes.extend_from_slice(frame);
        bytes.extend_from_slice(&[0; 100]);
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        file
    }

    #[test]
    fn a_header_whose_start_before_a_sector_boundary_was_never_written_is_a_lost_sector() {
        for lost in 1..=HEADER_LEN + 1 {
            let mut frame = test_frame(1, &"x".repeat(lost));
            frame[..lost].fill(0);
            let at = SECTOR as usize - lost;
            let file = file_with(at, &frame);
            assert_eq!(
                after_damage(&file, at as u64, length(&file)).unwrap(),
                AfterDamage::LostSectors,
                "{lost} bytes of the header lost"
            );
        }
    }

    #[test]
    fn zeros_that_are_a_headers_own_length_bytes_are_damage_not_a_lost_sector() {
        // A payload of a multiple of 256 bytes: its length's first byte is a zero of its own.
        let base = test_frame(1, "").len() - HEADER_LEN;
        let mut frame = test_frame(1, &"x".repeat(256 - base % 256));
        assert_eq!((frame.len() - HEADER_LEN) % 256, 0);
        assert_eq!(frame[0], 0);
        // A flipped bit in the payload's checksum: the header fails its own.
        frame[5] ^= 0x10;
        let at = SECTOR as usize - 1;
        let file = file_with(at, &frame);
        assert_eq!(
            after_damage(&file, at as u64, length(&file)).unwrap(),
            AfterDamage::NoLostSector
        );
    }

    #[test]
    fn bytes_that_hold_no_whole_frame_and_no_lost_sector_are_damage() {
        let file = file_with_frame_at(3_000, 0xAA, 2_000);
        let cut = tempfile::tempfile().unwrap();
        let mut bytes = vec![0u8; 3_020];
        crate::disk::positioned_io::read_exact_at(&file, &mut bytes, 0).unwrap();
        std::io::Write::write_all(&mut &cut, &bytes).unwrap();
        // The frame's header is there, its payload cut short.
        assert_eq!(
            after_damage(&cut, 1_000, 3_020).unwrap(),
            AfterDamage::NoLostSector
        );
    }
}
