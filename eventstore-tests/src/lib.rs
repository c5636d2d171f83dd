//! Tests of `eventstore-api` and `eventstore-tck` that need a backend, and the examples of
//! the README and of `docs/LEASES.md`.
//!
//! Every backend depends on both crates, so neither can name one as a dev-dependency without
//! a loop: on the registry each would wait for the other to be published first. Tests that
//! run on the in-memory backend therefore live here, in a crate that is never published.

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/LEASES.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/LEASES.md")]
pub struct LeasesDoctests;
