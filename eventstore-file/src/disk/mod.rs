//! What every file of the store shares: the directory and its lock, reads and writes at an
//! offset, and the errors of a file that failed or holds damaged bytes.

pub(crate) mod corruption;
pub(crate) mod directory;
pub(crate) mod file_failure;
pub(crate) mod positioned_io;
