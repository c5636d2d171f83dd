//! Reads and writes at a given offset, with no shared cursor: readers run beside the writer,
//! and the writer fills preallocated space without seeking.

use std::fs::File;
use std::io;

/// Reads exactly `buffer.len()` bytes of `file` at `offset`.
///
/// # Errors
/// The read failed or the file ends first.
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buffer, offset)
}

/// Whether the first `length` bytes of `file` are all zeros: what a crash can leave of a new
/// file whose length reached the disk and whose bytes did not.
///
/// # Errors
/// The read failed or the file ends first.
pub(crate) fn only_zeros(file: &File, length: u64) -> io::Result<bool> {
    let mut chunk = vec![0u8; 1 << 16];
    let mut at = 0;
    while at < length {
        let read = (length - at).min(chunk.len() as u64) as usize;
        read_exact_at(file, &mut chunk[..read], at)?;
        if chunk[..read].iter().any(|&byte| byte != 0) {
            return Ok(false);
        }
        at += read as u64;
    }
    Ok(true)
}

/// Writes the bytes of `file` from `start` to `end` again, as they read, and syncs the file's
/// data: they are then on disk whatever the page cache said of them. After a failed sync the
/// kernel keeps the pages it could not write, counted clean, so a sync alone would not.
///
/// # Errors
/// Reading, writing or syncing failed.
pub(crate) fn write_again(file: &File, start: u64, end: u64) -> io::Result<()> {
    let length = usize::try_from(end.saturating_sub(start))
        .map_err(|_| io::Error::other("the bytes to write again do not fit in memory"))?;
    let mut bytes = vec![0; length];
    read_exact_at(file, &mut bytes, start)?;
    write_all_at(file, &bytes, start)?;
    file.sync_data()
}

/// Writes all of `bytes` to `file` at `offset`.
///
/// # Errors
/// The write failed.
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Reads exactly `buffer.len()` bytes of `file` at `offset`.
///
/// # Errors
/// The read failed or the file ends first.
#[cfg(windows)]
pub(crate) fn read_exact_at(file: &File, mut buffer: &mut [u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buffer.is_empty() {
        match file.seek_read(buffer, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(read) => {
                buffer = &mut buffer[read..];
                offset += read as u64;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Writes all of `bytes` to `file` at `offset`.
///
/// # Errors
/// The write failed.
#[cfg(windows)]
pub(crate) fn write_all_at(file: &File, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !bytes.is_empty() {
        match file.seek_write(bytes, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => {
                bytes = &bytes[written..];
                offset += written as u64;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
