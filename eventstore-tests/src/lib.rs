//! Tests of `eventstore-api` and `eventstore-tck` that need a backend, and the README's
//! examples.
//!
//! Every backend depends on both crates, so neither can name one as a dev-dependency without
//! a loop: on the registry each would wait for the other to be published first. Tests that
//! run on the in-memory backend therefore live here, in a crate that is never published.

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
