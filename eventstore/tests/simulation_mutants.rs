//! The simulation against the races it was built to catch.
//!
//! Each mutant puts one race that reviews of the electors once found back into a copy of the
//! workspace (`target/mutants/workspace`), builds the simulation there (release, its own
//! target directory, so that the workspace's build is untouched) and runs it over the seed
//! budget of CI, stopping at the first violation. A mutant the simulation runs through
//! without a violation is missed. The last line is `simulation mutants: K of N caught`.
//!
//! `cargo test -p eventstore --release --test simulation_mutants -- --ignored --nocapture`;
//! `SIM_SEEDS=n` sets the budget per mutant (2,000 by default); `SIM_MUTANT=name` runs one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One race, as the change that puts it back.
struct Mutant {
    name: &'static str,
    /// What goes wrong with it.
    race: &'static str,
    /// The file, from the workspace's root.
    file: &'static str,
    /// The code as it is, found exactly once in the file...
    fixed: &'static str,
    /// ...and as the race had it.
    broken: &'static str,
}

const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "leader-shutdown-overtakes-request",
        race: "a leader shut down while a request was on its way released before the request \
               arrived, and the request took the lease back for a stopped elector",
        file: "eventstore/src/elector/task.rs",
        fixed: "            if sending.load(Ordering::Relaxed) {\n                let _ = answer.await;\n            }\n",
        broken: "            let _ = &sending;\n",
    },
    Mutant {
        name: "partition-shutdown-overtakes-requests",
        race: "a partition member shut down while its requests were on their way released \
               before they arrived, and they took partitions back for a stopped member",
        file: "eventstore/src/partitions/task/mod.rs",
        fixed: "    if output.is_none() && started.load(Ordering::Relaxed) {\n        let _ = timeout(ttl, requests).await;\n    }\n",
        broken: "    let _ = (&started, ttl, requests);\n",
    },
    Mutant {
        name: "partition-batch-after-shutdown",
        race: "a partition member shut down while its round read the group still sent the \
               round's batch, which could arrive after the shutdown's releases",
        file: "eventstore/src/partitions/task/rounds.rs",
        fixed: "        if *self.shutdown.borrow() {",
        broken: "        if false && *self.shutdown.borrow() {",
    },
    Mutant {
        name: "renewal-timed-from-the-answer",
        race: "the leader timed its next request from the answer, so the ttl had to cover two \
               latencies, and a slow but answered renewal lost the leadership",
        file: "eventstore/src/elector/task.rs",
        fixed: "            next_request = sent + jittered(self.settings.request_interval);",
        broken: "            next_request = Instant::now() + jittered(self.settings.request_interval);",
    },
    Mutant {
        name: "margin-below-the-clock-catch-up",
        race: "a safety margin below the rate at which a storage's clock may run fast was \
               accepted: the lease lapsed in the storage while its holder still counted on it",
        file: "eventstore/src/elector/timing.rs",
        fixed: "        if safety_margin < least_margin {",
        broken: "        if safety_margin < least_margin / 100 {",
    },
    Mutant {
        name: "released-partition-taken-for-registered",
        race: "a released partition stayed counted as registered, so a partition back in the \
               target was not asked for until the next renewal",
        file: "eventstore/src/partitions/task/releases.rs",
        fixed: "        for partition in &partitions {\n            self.registered.remove(partition);\n        }\n",
        broken: "",
    },
    Mutant {
        name: "hung-group-read-costs-renewals",
        race: "a round gave a hung read of the group up only after a request interval, which \
               pushed the renewal after it past the deadline",
        file: "eventstore/src/partitions/task/rounds.rs",
        fixed: "        let limit = self.before_renewals(self.settings.request_interval);",
        broken: "        let limit = self.settings.request_interval;",
    },
    Mutant {
        name: "look-delays-renewal",
        race: "a look or a claim that started just before a partition member's renewal pushed \
               the renewal past the deadline when the interval left room for one round only",
        file: "eventstore/src/partitions/task/mod.rs",
        fixed: "            Wake::Look | Wake::Claim if due.renewal <= Instant::now() + window => Wake::Renewal,",
        broken: "            Wake::Look | Wake::Claim if false && due.renewal <= Instant::now() + window => Wake::Renewal,",
    },
    Mutant {
        name: "stale-target-at-equal-priority",
        race: "a member that read the group before a move kept asking for a partition another \
               member asked for as its own, at the same priority, until its next renewal",
        file: "eventstore/src/partitions/task/follow_up.rs",
        fixed: "            (GroupLease::Partition(partition), LeaseChangeKind::ContenderJoined { owner, .. })\n                if owner != me\n",
        broken: "            (GroupLease::Partition(partition), LeaseChangeKind::ContenderJoined { owner, .. })\n                if false && owner != me\n",
    },
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace")
        .to_path_buf()
}

/// Copies the workspace's sources (not its builds, not its history) to `to`.
fn copy_sources(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("the copy's directory");
    for entry in std::fs::read_dir(from).expect("a directory of the workspace") {
        let entry = entry.expect("an entry");
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let (source, copy) = (entry.path(), to.join(&name));
        if entry.file_type().expect("a file type").is_dir() {
            copy_sources(&source, &copy);
        } else {
            std::fs::copy(&source, &copy).expect("a file copied");
        }
    }
}

/// What a run of the simulation printed as its summary: seeds run and violations.
fn summary(output: &str) -> Option<(u64, u64)> {
    let line = output
        .lines()
        .find_map(|line| line.strip_prefix("simulation: "))?;
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .map(|part| part.parse().expect("a number"))
        .collect();
    match numbers[..] {
        [seeds, _faults, violations] => Some((seeds, violations)),
        _ => None,
    }
}

/// Runs the simulation in `copy` with `mutant` applied: whether it found a violation, and
/// after how many seeds.
fn run(mutant: &Mutant, copy: &Path, target: &Path, seeds: u64) -> (bool, u64) {
    let file = copy.join(mutant.file);
    let pristine = std::fs::read_to_string(workspace().join(mutant.file)).expect("the source");
    assert_eq!(
        pristine.matches(mutant.fixed).count(),
        1,
        "{}: the fixed code is no longer in {} exactly once; update the mutant",
        mutant.name,
        mutant.file
    );
    std::fs::write(&file, pristine.replacen(mutant.fixed, mutant.broken, 1)).expect("mutated");
    let output = Command::new(env!("CARGO"))
        .args([
            "test",
            "--release",
            "-p",
            "eventstore",
            "--test",
            "simulation",
        ])
        .args(["--", "electors_under_seeded_faults", "--nocapture"])
        .current_dir(copy)
        .env("CARGO_TARGET_DIR", target)
        .env("SIM_SEEDS", seeds.to_string())
        .env("SIM_STOP_AT_FIRST_VIOLATION", "1")
        .env_remove("SIM_SEED")
        .output()
        .expect("cargo runs");
    std::fs::write(&file, pristine).expect("restored");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let Some((ran, violations)) = summary(&stdout) else {
        panic!(
            "{}: the simulation did not run to its summary\n{stdout}\n{stderr}",
            mutant.name
        );
    };
    if violations > 0 {
        // The first violation, as the run printed it.
        let first = stderr
            .lines()
            .map(str::trim)
            .find(|line| line.starts_with('"'))
            .unwrap_or_default();
        println!("{}: caught at seed {} ({first})", mutant.name, ran - 1);
    } else {
        println!("{}: MISSED in {ran} seeds: {}", mutant.name, mutant.race);
    }
    (violations > 0, ran)
}

#[test]
#[ignore = "builds a mutated copy of the workspace in release, minutes; run with --ignored"]
fn the_simulation_catches_every_race_it_was_built_for() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .map(|n| n.parse().expect("SIM_SEEDS is a number"))
        .unwrap_or(2_000);
    let only = std::env::var("SIM_MUTANT").ok();
    let mutants: Vec<&Mutant> = MUTANTS
        .iter()
        .filter(|m| only.as_deref().is_none_or(|name| name == m.name))
        .collect();
    assert!(!mutants.is_empty(), "no mutant named {only:?}");
    let root = workspace().join("target").join("mutants");
    let copy = root.join("workspace");
    // A fresh copy each run: sources removed from the workspace must not linger.
    let _ = std::fs::remove_dir_all(&copy);
    copy_sources(&workspace(), &copy);
    let target = root.join("target");
    let caught: Vec<&str> = mutants
        .iter()
        .filter(|mutant| run(mutant, &copy, &target, seeds).0)
        .map(|mutant| mutant.name)
        .collect();
    println!(
        "simulation mutants: {} of {} caught",
        caught.len(),
        mutants.len()
    );
    assert_eq!(caught.len(), mutants.len(), "caught only {caught:?}");
}
