//! Framing: one record on disk as `[payload length][payload crc][header crc][payload]`.
//!
//! The header carries its own checksum, so a damaged length is recognised as damage instead
//! of being read as "the record runs past the end of the file" (which would look torn and be
//! cut off). Scanning tells a torn tail (an unacknowledged write cut short by a crash) from
//! corruption (anything else), and the caller decides what a torn record means where it was
//! found.
//!
//! Zeros after the last frame are not data: a log preallocates zero-filled space ahead of its
//! end, and a crash can leave a file longer than what was written. So the data ends where only
//! zeros follow, and a damaged frame followed by nothing but zeros is torn, not corrupt.

use std::io::{self, Read};

use crate::log::codec::u32_length;

/// Bytes of a frame header.
pub(crate) const HEADER_LEN: usize = 12;

/// The largest payload one frame may hold (1 GiB).
pub(crate) const MAX_PAYLOAD: usize = 1 << 30;

/// Starts a frame at the end of `out`; returns where it starts, for [`finish_frame`].
pub(crate) fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    start
}

/// Writes the header of the frame begun at `start`, whose payload is everything after it.
///
/// # Errors
/// `InvalidInput` when the payload is 4 GiB or longer.
pub(crate) fn finish_frame(out: &mut [u8], start: usize) -> io::Result<()> {
    let (header, payload) = out[start..].split_at_mut(HEADER_LEN);
    let length = u32_length(payload.len(), "a frame payload")?;
    header[0..4].copy_from_slice(&length.to_le_bytes());
    header[4..8].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&header[0..8]);
    header[8..12].copy_from_slice(&header_crc.to_le_bytes());
    Ok(())
}

/// Brings the checksums of `frame`, a whole frame whose payload was changed in place, up to
/// date.
pub(crate) fn reseal_frame(frame: &mut [u8]) {
    let (header, payload) = frame.split_at_mut(HEADER_LEN);
    header[4..8].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&header[0..8]);
    header[8..12].copy_from_slice(&header_crc.to_le_bytes());
}

/// Appends one complete frame holding `payload` to `out`.
///
/// # Errors
/// As [`finish_frame`].
pub(crate) fn write_frame(out: &mut Vec<u8>, payload: &[u8]) -> io::Result<()> {
    let start = begin_frame(out);
    out.extend_from_slice(payload);
    finish_frame(out, start)
}

/// What scanning found at one offset.
#[derive(Debug)]
pub(crate) enum Scanned {
    /// A whole, intact frame.
    Frame {
        /// Where the frame's header starts.
        offset: u64,
        /// The payload.
        payload: Vec<u8>,
    },
    /// The end of the data, at a frame boundary; the file holds only zeros after it.
    End {
        /// Where the data ends.
        offset: u64,
    },
    /// A frame that a write cut short: incomplete, or failing its checksum with nothing but
    /// zeros after it.
    Torn {
        /// Where the torn frame starts.
        offset: u64,
        /// What was seen.
        reason: &'static str,
    },
    /// Damage a torn write cannot explain.
    Corrupt {
        /// Where the damaged frame starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
}

/// The fields of a frame header whose own checksum holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameHeader {
    /// The payload's length, as the header claims it.
    pub(crate) length: usize,
    /// The payload's checksum.
    pub(crate) payload_crc: u32,
}

impl FrameHeader {
    /// The header's fields, or `None` when it fails its checksum. Its words are
    /// little-endian u32s: the payload length, the payload crc, the header crc.
    pub(crate) fn read(header: [[u8; 4]; HEADER_LEN / 4]) -> Option<FrameHeader> {
        let [length, payload_crc, header_crc] = header.map(u32::from_le_bytes);
        (crc32c::crc32c(&header.as_flattened()[0..8]) == header_crc).then_some(FrameHeader {
            length: length as usize,
            payload_crc,
        })
    }

    /// Whether a frame may have a payload of `length` bytes.
    pub(crate) fn is_possible(length: usize) -> bool {
        length > 0 && length <= MAX_PAYLOAD
    }
}

/// Reads frames one after the other from `reader`, which holds `end` bytes in all and is
/// positioned at `offset`. Holds one frame in memory at a time.
#[derive(Debug)]
pub(crate) struct FrameScanner<R> {
    reader: R,
    offset: u64,
    end: u64,
}

impl<R: Read> FrameScanner<R> {
    /// A scanner over `reader`, positioned at `offset` of a file `end` bytes long.
    pub(crate) fn new(reader: R, offset: u64, end: u64) -> Self {
        FrameScanner {
            reader,
            offset,
            end,
        }
    }

    /// The next frame, or why there is none.
    ///
    /// # Errors
    /// Reading failed.
    pub(crate) fn next_frame(&mut self) -> io::Result<Scanned> {
        let offset = self.offset;
        let remaining = self.end - offset;
        if remaining == 0 {
            return Ok(Scanned::End { offset });
        }
        // Little-endian u32s: the payload length, the payload crc, the header crc.
        let mut header = [[0u8; 4]; HEADER_LEN / 4];
        let header_len = HEADER_LEN.min(remaining as usize);
        self.reader
            .read_exact(&mut header.as_flattened_mut()[..header_len])?;
        if header.as_flattened().iter().all(|&b| b == 0) {
            if self.rest_is_zero()? {
                return Ok(Scanned::End { offset });
            }
            return Ok(Scanned::Corrupt {
                offset,
                problem: "zeros where a frame header belongs, and data after them".to_owned(),
            });
        }
        if header_len < HEADER_LEN {
            return Ok(Scanned::Torn {
                offset,
                reason: "an incomplete frame header",
            });
        }
        let Some(FrameHeader {
            length,
            payload_crc,
        }) = FrameHeader::read(header)
        else {
            if self.rest_is_zero()? {
                return Ok(Scanned::Torn {
                    offset,
                    reason: "a partly written frame header",
                });
            }
            return Ok(Scanned::Corrupt {
                offset,
                problem: "the frame header fails its checksum".to_owned(),
            });
        };
        if !FrameHeader::is_possible(length) {
            return Ok(Scanned::Corrupt {
                offset,
                problem: format!("the frame header claims an impossible length of {length} bytes"),
            });
        }
        let frame_end = offset + (HEADER_LEN + length) as u64;
        if frame_end > self.end {
            return Ok(Scanned::Torn {
                offset,
                reason: "a frame that runs past the end of the file",
            });
        }
        let mut payload = vec![0u8; length];
        self.reader.read_exact(&mut payload)?;
        if crc32c::crc32c(&payload) != payload_crc {
            if self.rest_is_zero()? {
                return Ok(Scanned::Torn {
                    offset,
                    reason: "the last frame of the file failing its checksum",
                });
            }
            return Ok(Scanned::Corrupt {
                offset,
                problem: format!(
                    "the {length}-byte frame payload fails its checksum, and more data follows it"
                ),
            });
        }
        self.offset = frame_end;
        Ok(Scanned::Frame { offset, payload })
    }

    /// Whether every byte not read yet is zero; reads them all.
    fn rest_is_zero(&mut self) -> io::Result<bool> {
        let mut buffer = [0u8; 8192];
        loop {
            let read = self.reader.read(&mut buffer)?;
            if read == 0 {
                return Ok(true);
            }
            if buffer[..read].iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(bytes: &[u8]) -> Vec<Scanned> {
        let mut scanner = FrameScanner::new(bytes, 0, bytes.len() as u64);
        let mut found = Vec::new();
        loop {
            let next = scanner.next_frame().unwrap();
            let stop = !matches!(next, Scanned::Frame { .. });
            found.push(next);
            if stop {
                return found;
            }
        }
    }

    fn two_frames() -> Vec<u8> {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, b"first").unwrap();
        write_frame(&mut bytes, b"second!").unwrap();
        bytes
    }

    #[test]
    fn intact_frames_scan_back_in_order() {
        let found = scan_all(&two_frames());
        assert!(matches!(&found[0], Scanned::Frame { offset: 0, payload } if payload == b"first"));
        assert!(
            matches!(&found[1], Scanned::Frame { offset: 17, payload } if payload == b"second!")
        );
        assert!(matches!(found[2], Scanned::End { offset: 36 }));
    }

    #[test]
    fn every_cut_inside_the_last_frame_is_torn_at_its_start() {
        let bytes = two_frames();
        for cut in 18..bytes.len() {
            let found = scan_all(&bytes[..cut]);
            assert!(
                matches!(found[1], Scanned::Torn { offset: 17, .. }),
                "cut at {cut}: {found:?}"
            );
        }
    }

    #[test]
    fn a_flipped_byte_before_the_last_frame_is_corruption() {
        let clean = two_frames();
        for at in 0..17 {
            let mut bytes = clean.clone();
            bytes[at] ^= 0x40;
            let found = scan_all(&bytes);
            assert!(
                matches!(found[0], Scanned::Corrupt { offset: 0, .. }),
                "flip at {at}: {found:?}"
            );
        }
    }

    #[test]
    fn zeros_after_the_last_frame_end_the_data() {
        let mut bytes = two_frames();
        for zeros in [1, 11, 12, 40, 20_000] {
            let mut padded = bytes.clone();
            padded.resize(bytes.len() + zeros, 0);
            let found = scan_all(&padded);
            assert!(
                matches!(found[2], Scanned::End { offset: 36 }),
                "{zeros} zeros: {found:?}"
            );
        }
        bytes.truncate(17);
        bytes.resize(100, 0);
        assert!(matches!(scan_all(&bytes)[1], Scanned::End { offset: 17 }));
    }

    #[test]
    fn every_cut_inside_the_last_frame_followed_by_zeros_is_torn() {
        let bytes = two_frames();
        for cut in 18..bytes.len() {
            let mut padded = bytes[..cut].to_vec();
            padded.resize(bytes.len() + 64, 0);
            let found = scan_all(&padded);
            assert!(
                matches!(found[1], Scanned::Torn { offset: 17, .. }),
                "cut at {cut}: {found:?}"
            );
        }
    }

    #[test]
    fn damage_followed_by_anything_but_zeros_is_corruption() {
        let mut bytes = two_frames();
        bytes.resize(bytes.len() + 64, 0);
        // The second frame's payload, then its header, damaged; one stray byte further on.
        for at in [30, 20] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x01;
            damaged[90] = 1;
            let found = scan_all(&damaged);
            assert!(
                matches!(found[1], Scanned::Corrupt { offset: 17, .. }),
                "damage at {at}: {found:?}"
            );
        }
    }
}
