//! The mutation check of the conformance kit: a small backend without leases, and a backend
//! with leases and fenced writes, first as written, then with each of a list of deliberate
//! mistakes, run against the whole kit.
//!
//! Run as `cargo test -p eventstore-tests --test mutation_check`. The kit's tests here run
//! the backend as written ([`Mutation::from_environment`] finds no mutation), and
//! `every_listed_mistake_is_caught_and_every_allowed_choice_passes` runs this same test
//! binary once per mutation with `EVENTSTORE_MUTATION=<name>`, expecting a failure for every
//! mistake and a pass for every choice the contract leaves to the backend. It prints the
//! score and the tests that caught each mistake; `docs/MUTATIONS.md` reports it. To see one
//! mutation's failures: `EVENTSTORE_MUTATION=timestamp_per_event cargo test -p
//! eventstore-tests --test mutation_check`.

#[path = "mutation_check/fence_mutant.rs"]
mod fence_mutant;
#[path = "mutation_check/mutant_storage.rs"]
mod mutant_storage;
#[path = "mutation_check/mutations.rs"]
mod mutations;

use std::process::Command;

use async_trait::async_trait;
use eventstore_tck::StorageFactory;

use fence_mutant::FenceMutant;
use mutant_storage::MutantStorage;
use mutations::{Mutation, Verdict};

/// Fresh storages making the mutation the environment selects; another handle is a clone.
struct Mutant;

#[async_trait]
impl StorageFactory for Mutant {
    type Storage = MutantStorage;

    async fn create(&self) -> MutantStorage {
        MutantStorage::new(Mutation::from_environment())
    }

    async fn another_handle(&self, storage: &MutantStorage) -> MutantStorage {
        storage.clone()
    }
}

mod kit {
    eventstore_tck::tck_tests!(super::Mutant, capabilities = []);
}

/// Fresh storages with leases and fenced writes making the mutation the environment selects,
/// when it is one of those; another handle is a clone.
struct LeasingMutant;

#[async_trait]
impl StorageFactory for LeasingMutant {
    type Storage = FenceMutant;

    async fn create(&self) -> FenceMutant {
        FenceMutant::new(Mutation::from_environment())
    }

    async fn another_handle(&self, storage: &FenceMutant) -> FenceMutant {
        storage.clone()
    }

    async fn step_clock(&self, storage: &FenceMutant, by: chrono::TimeDelta) -> Option<()> {
        storage.clock().advance(by);
        Some(())
    }
}

mod leasing {
    eventstore_tck::tck_tests!(super::LeasingMutant, capabilities = [Lease, FencedWrites]);
}

#[test]
fn every_listed_mistake_is_caught_and_every_allowed_choice_passes() {
    if Mutation::from_environment().is_some() {
        // A run this test started: only the kit's tests matter.
        return;
    }
    let binary = std::env::current_exe().expect("the test binary's path");
    let mut wrong = Vec::new();
    let mut caught = 0;
    let mut mistakes = 0;
    println!("| mutation | expected | result | tests that failed (the first three by name) |");
    println!("|---|---|---|---|");
    for mutation in Mutation::ALL {
        let kit = mutation.kit();
        let output = Command::new(&binary)
            .env(Mutation::VARIABLE, mutation.name())
            // The kit's tests of the backend the mutation is made in, not the checks of this
            // file.
            .args([kit, "--test-threads", "4"])
            .output()
            .unwrap_or_else(|err| panic!("running the kit with {}: {err}", mutation.name()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut failed: Vec<&str> = stdout
            .lines()
            .filter_map(|line| {
                line.strip_prefix("test ")?
                    .strip_prefix(kit)?
                    .strip_suffix(" ... FAILED")
            })
            .collect();
        failed.sort_unstable();
        let passed = output.status.success();
        let (expected, right) = match mutation.verdict() {
            Verdict::Caught => {
                mistakes += 1;
                caught += usize::from(!passed);
                ("caught", !passed)
            }
            Verdict::Allowed => ("passes", passed),
        };
        let result = if passed { "passes" } else { "caught" };
        let shown: Vec<&str> = failed.iter().take(3).copied().collect();
        println!(
            "| `{}` | {expected} | {result} | {} |",
            mutation.name(),
            shown.join(", ")
        );
        if !right {
            wrong.push(format!(
                "{}: expected the kit to have it {expected}, but it {result}{}",
                mutation.name(),
                if passed {
                    String::new()
                } else {
                    format!(
                        "\n{}",
                        String::from_utf8_lossy(&output.stderr)
                            .lines()
                            .filter(|line| line.contains("panicked") || line.contains("rule"))
                            .take(6)
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                }
            ));
        }
    }
    println!("score: {caught} of {mistakes} mistakes caught");
    assert!(
        wrong.is_empty(),
        "the kit judged these mutations wrongly:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_mutation_is_reported_in_the_docs() {
    let report = include_str!("../../docs/MUTATIONS.md");
    for mutation in Mutation::ALL {
        assert!(
            report.contains(&format!("`{}`", mutation.name())),
            "docs/MUTATIONS.md reports every mutation the check applies, not {}",
            mutation.name()
        );
    }
}
