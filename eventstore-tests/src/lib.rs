//! Tests that need several backends at once (the tracing spans every backend opens, the kit's
//! mutation check), and the README's examples.

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
