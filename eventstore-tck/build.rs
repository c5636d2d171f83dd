//! Registers the scenarios: every `pub async fn` of a scenario module becomes a test of
//! `tck_tests!` and an entry of `SCENARIOS`, so that no scenario can exist without running.

use std::fmt::Write as _;
use std::{env, fs, path::Path};

#[path = "build/scenarios.rs"]
mod scenarios;

/// The scenario modules (files of `src/`, each a `pub mod` of the crate), in the order their
/// tests are generated. `tests/registration.rs` fails if a file with scenarios is missing here.
const MODULES: &[&str] = &[
    "events",
    "bookmarks",
    "lifecycle",
    "leases",
    "lease_changes",
    "append_hints",
    "election",
    "handover",
    "partitions",
];

fn main() {
    let mut names_by_module = Vec::new();
    for module in MODULES {
        let file = format!("src/{module}.rs");
        println!("cargo:rerun-if-changed={file}");
        let source = fs::read_to_string(&file).unwrap_or_else(|error| panic!("{file}: {error}"));
        let names = scenarios::scan(&file, &source).unwrap_or_else(|error| panic!("{error}"));
        names_by_module.push((module, names));
    }

    let mut list = String::from("&[\n");
    let mut tests = String::from(
        "/// One module of tests per scenario module, one test per scenario (see `tck_tests!`).\n\
         #[doc(hidden)]\n\
         #[macro_export]\n\
         macro_rules! __tck_scenario_tests {\n    ($factory:expr) => {\n",
    );
    for (module, names) in &names_by_module {
        writeln!(list, "    ({module:?}, &{names:?}),").unwrap();
        writeln!(tests, "        mod {module} {{").unwrap();
        for name in names {
            writeln!(
                tests,
                "            $crate::__tck_test!($factory, {module}, {name});"
            )
            .unwrap();
        }
        writeln!(tests, "        }}").unwrap();
    }
    list.push(']');
    tests.push_str("    };\n}\n");

    let out_dir = env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    let out_dir = Path::new(&out_dir);
    fs::write(out_dir.join("scenario_list.rs"), list).expect("write scenario_list.rs");
    fs::write(out_dir.join("scenario_tests.rs"), tests).expect("write scenario_tests.rs");
}
