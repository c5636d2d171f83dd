//! Tests that need several backends at once (the tracing spans every backend opens, the kit's
//! mutation check), and the examples of the README and of `docs/LEASES.md`.

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/LEASES.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/LEASES.md")]
pub struct LeasesDoctests;
