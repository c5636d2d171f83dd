//! Scenarios: leases.

/// The scenarios of this module, one `#[tokio::test]` each (used by [`crate::tck_tests`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_leases_tests {
    ($factory:expr) => {};
}
