//! Little-endian primitives that records are built from.

use std::io;

use chrono::{DateTime, Utc};

/// Appends primitives to a byte buffer.
pub(crate) fn put_u8(out: &mut Vec<u8>, value: u8) {
    out.push(value);
}

pub(crate) fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// A string as a `u32` byte count and its UTF-8 bytes.
///
/// # Errors
/// `InvalidInput` when the string is 4 GiB or longer (validated names are far shorter).
pub(crate) fn put_str(out: &mut Vec<u8>, text: &str) -> io::Result<()> {
    put_u32(out, u32_length(text.len(), "a string")?);
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// `length` as the `u32` byte count the formats store.
///
/// # Errors
/// `InvalidInput` when `length` is 4 GiB or more.
pub(crate) fn u32_length(length: usize, what: &str) -> io::Result<u32> {
    u32::try_from(length).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} of {length} bytes is too long to store"),
        )
    })
}

/// A timestamp as seconds (`i64`) and nanoseconds (`u32`), exact.
pub(crate) fn put_time(out: &mut Vec<u8>, time: DateTime<Utc>) {
    out.extend_from_slice(&time.timestamp().to_le_bytes());
    put_u32(out, time.timestamp_subsec_nanos());
}

/// Why a record did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct DecodeError(pub(crate) String);

/// Reads primitives back, in the order they were put.
#[derive(Debug)]
pub(crate) struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Decoder { bytes, at: 0 }
    }

    /// How many bytes were read so far.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    pub(crate) fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(count)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.too_short(count, what))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// The next `N` bytes, as an array.
    pub(crate) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], DecodeError> {
        let (&array, _) = self.bytes[self.at..]
            .split_first_chunk::<N>()
            .ok_or_else(|| self.too_short(N, what))?;
        self.at += N;
        Ok(array)
    }

    fn too_short(&self, count: usize, what: &str) -> DecodeError {
        DecodeError(format!(
            "the record ends after {} bytes, reading {what} needs {count} more from byte {}",
            self.bytes.len(),
            self.at
        ))
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn str(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        let length = self.u32(what)? as usize;
        let bytes = self.take(length, what)?;
        std::str::from_utf8(bytes)
            .map_err(|error| DecodeError(format!("{what} is not UTF-8: {error}")))
    }

    pub(crate) fn time(&mut self, what: &str) -> Result<DateTime<Utc>, DecodeError> {
        let seconds = i64::from_le_bytes(self.array(what)?);
        let nanos = self.u32(what)?;
        DateTime::from_timestamp(seconds, nanos)
            .ok_or_else(|| DecodeError(format!("{what} {seconds}s {nanos}ns is out of range")))
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.at..];
        self.at = self.bytes.len();
        rest
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self, what: &str) -> Result<(), DecodeError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(DecodeError(format!(
                "{} unexpected bytes after {what}",
                self.bytes.len() - self.at
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip_and_short_input_is_named() {
        let mut out = Vec::new();
        let now = Utc::now();
        put_u8(&mut out, 7);
        put_u64(&mut out, u64::MAX - 1);
        put_str(&mut out, "héllo").unwrap();
        put_time(&mut out, now);
        let mut decoder = Decoder::new(&out);
        assert_eq!(decoder.u8("a").unwrap(), 7);
        assert_eq!(decoder.u64("b").unwrap(), u64::MAX - 1);
        assert_eq!(decoder.str("c").unwrap(), "héllo");
        assert_eq!(decoder.time("d").unwrap(), now);
        assert!(decoder.finish("all").is_ok());
        let error = Decoder::new(&out[..3]).u64("the position").unwrap_err();
        assert!(error.0.contains("the position"), "{error}");
    }
}
