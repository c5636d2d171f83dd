//! Which scenarios apply to a backend: those whose capabilities it declares.
//!
//! Each scenario needs the capabilities its module declares in code, in a constant the
//! compiler checks (`pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];`, or
//! `NEEDS_<SCENARIO>` for one scenario); [`tck_tests!`](crate::tck_tests) ignores, with the reason, the test of a
//! scenario that needs a capability the backend does not declare, and runs one more test,
//! `declared_capabilities::match_the_storage_and_decide_which_scenarios_run`, that holds the
//! declaration to what the storage's `supports` answers and prints how many scenarios ran and
//! how many did not apply, and why.

use std::collections::BTreeMap;
use std::fmt;

use eventstore_api::{Capability, EventStorage};

use crate::StorageFactory;

/// One scenario of the kit and the capabilities it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScenarioNeeds {
    /// The scenario module, e.g. `leases`.
    pub module: &'static str,
    /// The scenario, e.g. `first_request_gets_token_one`.
    pub name: &'static str,
    /// The capabilities it needs, in the order they are checked.
    pub needs: &'static [Capability],
}

impl ScenarioNeeds {
    /// The first capability it needs that `declared` lacks: why it does not apply.
    pub fn missing_from(&self, declared: &[Capability]) -> Option<Capability> {
        self.needs
            .iter()
            .copied()
            .find(|need| !declared.contains(need))
    }
}

/// Every scenario of the kit with the capabilities it needs, in the order of
/// [`SCENARIOS`](crate::SCENARIOS). Generated from the scenario modules by the build script,
/// naming the `NEEDS` constant that declares each scenario's needs.
///
/// ```
/// use eventstore_api::Capability;
/// use eventstore_tck::applicability::NEEDS;
///
/// let first_lease = NEEDS.iter().find(|s| s.module == "leases").unwrap();
/// assert_eq!(first_lease.needs, &[Capability::Lease]);
/// ```
pub const NEEDS: &[ScenarioNeeds] = include!(concat!(env!("OUT_DIR"), "/scenario_needs.rs"));

/// Every capability a scenario may need, in the order the kit checks them.
pub const CAPABILITIES: &[Capability] = &[
    Capability::Lease,
    Capability::FencedWrites,
    Capability::LeaseChanges,
    Capability::LeaseOutcomes,
    Capability::AppendHints,
];

/// How many scenarios run for a backend that declares some capabilities, and how many do
/// not apply, by the capability they miss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applicability {
    /// The capabilities declared.
    pub declared: Vec<Capability>,
    /// How many scenarios run.
    pub run: usize,
    /// How many scenarios do not apply, by the first capability they need and the backend
    /// does not declare.
    pub not_applicable: BTreeMap<String, usize>,
}

impl Applicability {
    /// The applicability of the kit's scenarios to a backend that declares `declared`.
    ///
    /// ```
    /// use eventstore_tck::applicability::{Applicability, NEEDS};
    ///
    /// let events_only = Applicability::of(&[]);
    /// assert_eq!(events_only.run + events_only.not_applicable_count(), NEEDS.len());
    /// assert!(events_only.not_applicable["Lease"] > 0);
    /// ```
    pub fn of(declared: &[Capability]) -> Self {
        let mut run = 0;
        let mut not_applicable = BTreeMap::new();
        for scenario in NEEDS {
            match scenario.missing_from(declared) {
                None => run += 1,
                Some(missing) => {
                    *not_applicable.entry(format!("{missing:?}")).or_insert(0) += 1;
                }
            }
        }
        Applicability {
            declared: declared.to_vec(),
            run,
            not_applicable,
        }
    }

    /// How many scenarios do not apply.
    pub fn not_applicable_count(&self) -> usize {
        self.not_applicable.values().sum()
    }

    /// The check `tck_tests!` runs for the capabilities it was given: each must be one the
    /// storage's `supports` answers `true` for, and each the storage supports must be declared,
    /// so that the ignored scenarios are exactly those that do not apply. Prints the
    /// [`Applicability`] past the test harness's capture.
    ///
    /// # Panics
    /// Naming every capability declared but not supported, or supported but not declared.
    pub async fn check_declared<F: StorageFactory>(factory: &F, declared: &[Capability]) {
        if let Some(reason) = factory.unavailable().await {
            print_uncaptured(&format!("skipped the capability check: {reason}"));
            return;
        }
        let storage = factory.create().await;
        let applicability = Self::of(declared);
        print_uncaptured(&format!(
            "eventstore-tck on `{}`: {applicability}",
            storage.name()
        ));
        let mismatches = mismatches(&storage, declared);
        storage
            .close()
            .await
            .unwrap_or_else(|err| panic!("close failed: {err}"));
        assert!(
            mismatches.is_empty(),
            "the capabilities given to tck_tests! must be exactly those the storage's `supports` \
             answers true for:\n  {}",
            mismatches.join("\n  ")
        );
    }
}

impl fmt::Display for Applicability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} scenarios: {} run, {} not applicable",
            self.run + self.not_applicable_count(),
            self.run,
            self.not_applicable_count()
        )?;
        for (capability, count) in &self.not_applicable {
            write!(
                f,
                "\n  {count} need Capability::{capability}, which this backend does not declare"
            )?;
        }
        Ok(())
    }
}

/// A sentence for each capability `declared` and `supports` disagree on.
fn mismatches<S: EventStorage + ?Sized>(storage: &S, declared: &[Capability]) -> Vec<String> {
    let mut mismatches = Vec::new();
    for &capability in CAPABILITIES {
        match (declared.contains(&capability), storage.supports(capability)) {
            (true, false) => mismatches.push(format!(
                "Capability::{capability:?} is declared, but supports(Capability::{capability:?}) \
                 answers false"
            )),
            (false, true) => mismatches.push(format!(
                "supports(Capability::{capability:?}) answers true, but the capability is not \
                 declared, so its scenarios are ignored"
            )),
            _ => {}
        }
    }
    mismatches
}

/// Writes `line` to stderr directly, past the test harness's capture, so that it shows in
/// the output of a passing test.
pub(crate) fn print_uncaptured(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "\n{line}");
}
