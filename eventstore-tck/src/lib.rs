//! The conformance kit: scenarios every [`EventStorage`](eventstore_api::EventStorage)
//! backend runs against itself.
//!
//! Each scenario is a plain `pub async fn name<F: StorageFactory>(factory: &F)` named for the
//! behaviour it proves; [`tck_tests!`] stamps out one `#[tokio::test]` per scenario, so every
//! behaviour passes or fails by name in the backend's own test run.
//!
//! Declaring the function registers it: the build script reads the scenario modules and
//! generates [`tck_tests!`]'s test list and [`SCENARIOS`] from their `pub async fn`s, and
//! refuses to build a scenario module with a public function of any other shape, so a
//! scenario cannot exist without running. Helpers of a scenario module stay `pub(crate)` or private.
//!
//! # Guide for backend authors
//!
//! ## 1. Run the kit
//!
//! A backend depends on the API (and on `async-trait`, which `EventStorage` and
//! [`StorageFactory`] are written with); the kit and tokio are dev-dependencies:
//!
//! ```toml
//! [dependencies]
//! eventstore-api = "0.1"
//! async-trait = "0.1"
//!
//! [dev-dependencies]
//! eventstore-tck = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! Then write `tests/tck.rs` with a factory for your backend and one macro call:
//!
//! ```ignore
//! use async_trait::async_trait;
//! use eventstore_tck::StorageFactory;
//!
//! struct MyFactory;
//!
//! #[async_trait]
//! impl StorageFactory for MyFactory {
//!     type Storage = MyStorage;
//!
//!     /// A fresh, empty storage: a new directory, a new table prefix, a new schema...
//!     async fn create(&self) -> MyStorage {
//!         MyStorage::open_fresh().await.expect("open a fresh storage")
//!     }
//!
//!     /// A second handle onto the same storage, as a second process would open it.
//!     async fn another_handle(&self, storage: &MyStorage) -> MyStorage {
//!         storage.reconnect().await.expect("open a second handle")
//!     }
//! }
//!
//! // The capabilities MyStorage::supports answers true for; [] for none.
//! eventstore_tck::tck_tests!(MyFactory, capabilities = []);
//! ```
//!
//! The repository's `tests-external/minimal-backend` is a complete backend written this way:
//! events in a `Vec` behind a mutex, no leases, and a `tests/tck.rs` like this one.
//!
//! `cargo test --test tck` now runs every scenario; `cargo test --test tck leases::` runs one
//! module. Scenarios run in parallel, so `create` must isolate storages from each other (a
//! unique directory, table prefix or schema each time) and must not need cleaning up between
//! runs. Make `another_handle` as independent as your backend allows (a separate connection
//! pool for a database), because the contention scenarios race the two handles against each
//! other. If your backend allows only one handle per storage (an exclusively locked
//! directory, say), return a clone.
//!
//! Scenarios panic with a message naming the rule that failed. Time-based scenarios use short
//! ttls and poll the storage's clock with a deadline ([`support::eventually`]); they never
//! rely on a sleep being long enough.
//!
//! ## 2. What every backend promises
//!
//! Events and bookmarks are not optional ([`events`], [`bookmarks`], [`lifecycle`]):
//!
//! - **Appends** are all or nothing; the condition of a conditional append
//!   ([`AppendCriteria`](eventstore_api::AppendCriteria)) is checked atomically with the
//!   write, so of several racing appends to one boundary exactly one wins.
//! - **Idempotency keys** are unique per stream; a batch whose events are all stored under
//!   their keys is a retry, stores nothing and answers the stored events; a stored key with a
//!   different event, or stored keys mixed with new ones, is `IdempotencyConflict`.
//!   `eventstore_api::idempotency::judge` decides it: look up the stored events, then call it.
//! - **Queries** return the events of the covered streams that match the filter, strictly
//!   after `after`, in the asked direction, at most `limit` of them.
//! - **Bookmarks** name an event the storage holds (else `UnknownEvent`, old bookmark kept) and
//!   are reported in the storage's own coordinates.
//! - **Input rules and their order**: start every method with
//!   `eventstore_api::admission::Admission::admit`. A closed storage answers `Closed`, whatever
//!   the input; an open one refuses invalid input with `InvalidInput` before changing anything,
//!   exactly as every other backend does.
//! - **Close** is idempotent, closes every handle, and leaves only `name` answering.
//!
//! ## 3. Capabilities
//!
//! A capability is a fact your backend declares with
//! [`EventStorage::supports`](eventstore_api::EventStorage::supports); the kit reads it at run
//! time and holds you to it.
//!
//! - **`Capability::Lease`**: `request_lease`, `request_leases`, `release_lease`,
//!   `get_leases` and `storage_time` follow the lease rules exactly ([`leases`]): one call
//!   acquires, renews and registers the contender; expiry is judged on the storage's clock
//!   only; a fencing token is 1 for the first holder, unchanged by renewal, and strictly
//!   higher on every other grant, never repeating, also after a release or a restart;
//!   concurrent requests elect exactly one holder; a release makes the lease acquirable at
//!   once and withdraws the contender; strictly higher live priority asks the holder to step
//!   down and nothing else does; a batch answers exactly as its requests one by one and one
//!   invalid request refuses it whole.
//!   Without this capability, leave the trait's default bodies in place, which answer
//!   `Unsupported`.
//! - **`Capability::FencedWrites`** (needs `Lease`): `append_fenced` and `bookmark_fenced`
//!   write only while the fence's lease is live on the storage's clock with the presented
//!   token as its current one, checked atomically with the write; otherwise `Fenced` and
//!   nothing written ([`election`]). Without it, those methods return `Unsupported`.
//! - **`Capability::LeaseChanges`** (needs `Lease`): `subscribe_lease_changes` pushes every
//!   change of the leases in its scope ([`lease_changes`]): releases (owner, token, preferred
//!   successor), acquisitions (token, and whether they took over an expired tenure),
//!   step-down requests, contenders joining and leaving, from every handle of the storage;
//!   a renewal pushes nothing, and closing the storage ends every subscription. Notifications
//!   are hints that only wake requesters early: every decision stays with `request_lease`.
//!   `eventstore_api::lease_changes::LeaseChangeHub` does the fan-out: publish each change
//!   there and hand out its subscriptions. Without the capability, `subscribe_lease_changes`
//!   returns `Unsupported`.
//!
//! Give [`tck_tests!`] the capabilities `supports` answers true for. The test of a scenario
//! that needs one you do not declare (its documentation says which, on a `Needs` line) is
//! reported as ignored with the reason, `needs Capability::Lease, which this backend does not
//! declare`, and `declared_capabilities::match_the_storage_and_decide_which_scenarios_run`
//! prints how many scenarios ran and how many did not apply, by capability:
//!
//! ```text
//! eventstore-tck on `vec`: 125 scenarios: 63 run, 62 not applicable
//!   4 need Capability::AppendHints, which this backend does not declare
//!   58 need Capability::Lease, which this backend does not declare
//! ```
//!
//! That test fails when the list given to the macro and `supports` disagree. A backend
//! written before leases existed still passes the kit, by refusing them honestly.
//!
//! ## 4. Beyond the scenarios
//!
//! [`wrappers`] holds storages that wrap yours to stage what a healthy backend does not do on
//! demand: [`wrappers::EventsOnly`] hides its capabilities, [`wrappers::Unreliable`] stops
//! answering at the flip of a switch. Use them in your own tests of code that runs on a
//! storage; [`support`] has the polling and assertions the scenarios are written with.

mod factory;
pub mod support;

pub mod applicability;

pub mod append_hints;
pub mod bookmarks;
pub mod capabilities;
pub mod election;
pub mod events;
pub mod handover;
pub mod lease_changes;
pub mod leases;
pub mod lifecycle;
pub mod wrappers;

pub use factory::StorageFactory;

/// Every scenario of the kit: `(module, scenario names)` per scenario module, in declaration
/// order, exactly the tests [`tck_tests!`] stamps out. Generated from the scenario modules by
/// the build script.
///
/// ```
/// let scenarios: usize = eventstore_tck::SCENARIOS.iter().map(|(_, names)| names.len()).sum();
/// assert!(scenarios > 0);
/// ```
pub const SCENARIOS: &[(&str, &[&str])] = include!(concat!(env!("OUT_DIR"), "/scenario_list.rs"));

/// Stamps out one `#[tokio::test]` per scenario of the kit for the backend whose
/// [`StorageFactory`] `$factory` is (an expression, evaluated once per test), in one module
/// per scenario module, so that `cargo test leases::` runs the lease scenarios.
///
/// `capabilities = [...]` lists the [`Capability`](eventstore_api::Capability) variants the
/// backend declares (`[]` for none). The test of a scenario that needs a capability not
/// listed is ignored with the reason (`needs Capability::Lease, which this backend does not
/// declare`), so the run's summary counts it as ignored, not passed. One more test,
/// `declared_capabilities::match_the_storage_and_decide_which_scenarios_run`, fails unless
/// the list is exactly what the storage's `supports` answers, and prints how many scenarios
/// ran and how many did not apply, and why ([`applicability`]).
///
/// The tests are those listed in [`SCENARIOS`]. The calling crate needs `tokio` (with
/// `macros` and `rt-multi-thread`) as a dev-dependency.
///
/// ```ignore
/// eventstore_tck::tck_tests!(MyFactory, capabilities = []);
/// eventstore_tck::tck_tests!(MyLeasingFactory, capabilities = [Lease, FencedWrites]);
/// ```
#[macro_export]
macro_rules! tck_tests {
    ($factory:expr, capabilities = [$($capability:ident),* $(,)?]) => {
        /// The factory under test, reachable from the scenario modules below.
        fn tck_factory() -> impl $crate::StorageFactory {
            $factory
        }
        $crate::__tck_scenario_tests!(super::tck_factory(), [$($capability),*]);

        /// The capabilities declared to `tck_tests!`, held to the storage's `supports`.
        mod declared_capabilities {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn match_the_storage_and_decide_which_scenarios_run() {
                $crate::applicability::Applicability::check_declared(
                    &super::tck_factory(),
                    &[$($crate::__Capability::$capability),*],
                )
                .await;
            }
        }
    };
    ($factory:expr $(,)?) => {
        ::core::compile_error!(
            "tck_tests! needs the capabilities the backend declares, to know which scenarios \
             apply: `tck_tests!(MyFactory, capabilities = [])` for a backend of events and \
             bookmarks only, `capabilities = [Lease, FencedWrites]` for one with those"
        );
    };
}

#[doc(hidden)]
pub use eventstore_api::Capability as __Capability;

// `__tck_scenario_tests!` and `__tck_if_declared!`, generated by the build script: a module
// of `__tck_test!`s per scenario module.
include!(concat!(env!("OUT_DIR"), "/scenario_tests.rs"));

/// Stamps out one `#[tokio::test]` named `$name` that runs the scenario `$module::$name`,
/// ignored with `$reason` when one is given.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_test {
    ($factory:expr, $module:ident, $name:ident $(, ignore = $reason:literal)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $(#[ignore = $reason])?
        async fn $name() {
            let factory = $factory;
            if let Some(reason) = $crate::StorageFactory::unavailable(&factory).await {
                // Straight to stderr, past the test harness's capture, so the skip is seen.
                let _ = ::std::io::Write::write_fmt(
                    &mut ::std::io::stderr(),
                    format_args!("skipped {}: {reason}\n", stringify!($name)),
                );
                return;
            }
            $crate::$module::$name(&factory).await;
        }
    };
}
