//! Fetching events from the segments by location: positioned reads (no shared cursor, so
//! any number of readers run beside the writer), neighbouring events fetched in one read.

use std::fs::File;
use std::io;
use std::sync::Arc;

use crate::disk::positioned_io::read_exact_at;
use crate::log::codec::DecodeError;
use crate::log::event_record::{EventFields, FromFields};
use crate::log::index::Location;

/// Events this close together are fetched with one read (the bytes between are frame and
/// length headers).
const MAX_GAP: u64 = 64;

/// The most one read fetches.
const MAX_SPAN: u64 = 1 << 20;

/// Why reading an event failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadFailure {
    /// The read itself failed.
    #[error("cannot read an event from segment {segment} at offset {offset}: {source}")]
    Io {
        segment: u32,
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// The bytes read do not decode.
    #[error("the event in segment {segment} at offset {offset} does not decode: {source}")]
    Decode {
        segment: u32,
        offset: u64,
        #[source]
        source: DecodeError,
    },
}

/// Reads the events at `locations`, in that order. Runs of neighbours in ascending order
/// (forward reads, or backward reads turned around by the caller) share one read.
///
/// # Errors
/// A read failed or its bytes did not decode.
pub(crate) fn read_events<E: FromFields>(
    locations: &[(Arc<File>, Location)],
) -> Result<Vec<E>, ReadFailure> {
    let mut events = Vec::with_capacity(locations.len());
    let mut buffer = Vec::new();
    let mut start = 0;
    while start < locations.len() {
        let (file, first) = &locations[start];
        let mut end = start + 1;
        let mut span_end = first.offset + u64::from(first.length);
        while let Some((_, next)) = locations.get(end) {
            let next_end = next.offset + u64::from(next.length);
            let close = next.segment == first.segment
                && next.offset >= span_end
                && next.offset - span_end <= MAX_GAP
                && next_end - first.offset <= MAX_SPAN;
            if !close {
                break;
            }
            span_end = next_end;
            end += 1;
        }
        buffer.resize((span_end - first.offset) as usize, 0);
        read_exact_at(file, &mut buffer, first.offset).map_err(|source| ReadFailure::Io {
            segment: first.segment,
            offset: first.offset,
            source,
        })?;
        for (_, location) in &locations[start..end] {
            let from = (location.offset - first.offset) as usize;
            let bytes = &buffer[from..from + location.length as usize];
            let decode_failure = |source| ReadFailure::Decode {
                segment: location.segment,
                offset: location.offset,
                source,
            };
            let event = EventFields::decode(bytes)
                .and_then(E::from_fields)
                .map_err(decode_failure)?;
            events.push(event);
        }
        start = end;
    }
    Ok(events)
}
