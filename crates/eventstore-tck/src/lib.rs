//! The conformance kit: scenarios every `EventStorage` backend runs against itself.
//!
//! (The guide for backend authors is written below once the kit is complete.)

mod factory;
pub mod support;

pub use factory::StorageFactory;

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
