//! The event log: segment files of framed batches, how records are encoded, the in-memory
//! index rebuilt by recovery on open, and reads of events by their place on disk.

pub(crate) mod codec;
pub(crate) mod event_reader;
pub(crate) mod event_record;
pub(crate) mod frame;
pub(crate) mod group_tail;
pub(crate) mod index;
mod names;
pub(crate) mod recovery;
pub(crate) mod segments;
