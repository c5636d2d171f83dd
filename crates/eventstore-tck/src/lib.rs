//! The conformance kit: scenarios every `EventStorage` backend runs against itself.
//!
//! (The guide for backend authors is written below once the kit is complete.)

mod factory;
pub mod support;

pub mod bookmarks;
pub mod election;
pub mod events;
pub mod leases;
pub mod lifecycle;

pub use factory::StorageFactory;

/// Stamps out one `#[tokio::test]` per scenario of the kit for the backend whose
/// [`StorageFactory`] `$factory` is (an expression, evaluated once per test).
///
/// The calling crate needs `tokio` (with `macros` and `rt-multi-thread`) as a dev-dependency.
#[macro_export]
macro_rules! tck_tests {
    ($factory:expr) => {
        $crate::__tck_events_tests!($factory);
        $crate::__tck_bookmarks_tests!($factory);
        $crate::__tck_lifecycle_tests!($factory);
        $crate::__tck_leases_tests!($factory);
        $crate::__tck_election_tests!($factory);
    };
}

/// Stamps out one `#[tokio::test]` named `$name` that runs the scenario `$module::$name`.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_test {
    ($factory:expr, $module:ident, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            $crate::$module::$name(&$factory).await;
        }
    };
}
