//! The writer: the one thread that orders, checks and makes durable every change, the
//! commands the storage handles send it, and how it gathers them into groups.

pub(crate) mod command;
mod gathering;
mod thread;

pub(crate) use thread::{SharedState, Writer};
