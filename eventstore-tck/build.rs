//! Registers the scenarios: every `pub async fn` of a scenario module becomes a test of
//! `tck_tests!` and an entry of `SCENARIOS`, so that no scenario can exist without running.
//! The capabilities a scenario needs (the `NEEDS` constants of its module, see
//! `build/scenarios.rs`) decide whether its test runs or is ignored with that reason for a
//! backend that does not declare them.

use std::fmt::Write as _;
use std::{env, fs, path::Path};

#[path = "build/scenarios.rs"]
mod scenarios;

/// The scenario modules (files `src/name.rs` or directories `src/name/mod.rs`, each a `pub
/// mod` of the crate), in the order their tests are generated. `tests/registration.rs` fails
/// if a file with scenarios is missing here.
const MODULES: &[&str] = &[
    "events",
    "bookmarks",
    "lifecycle",
    "leases",
    "storage_clock",
    "lease_outcomes",
    "lease_changes",
    "append_hints",
    "fenced_writes",
    "election",
    "handover",
    "partitions",
    "capabilities",
    "decorators",
];

fn main() {
    let mut scenarios_by_module = Vec::new();
    println!("cargo:rerun-if-changed=src");
    for module in MODULES {
        let (scenarios, files) = scenarios::scan_module(Path::new("src"), module)
            .unwrap_or_else(|error| panic!("{error}"));
        for file in files {
            println!("cargo:rerun-if-changed={file}");
        }
        scenarios_by_module.push((module, scenarios));
    }

    let out_dir = env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    let out_dir = Path::new(&out_dir);
    let write = |name: &str, text: String| {
        fs::write(out_dir.join(name), text).unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    write("scenario_list.rs", scenario_list(&scenarios_by_module));
    write("scenario_needs.rs", scenario_needs(&scenarios_by_module));
    write("scenario_tests.rs", scenario_tests(&scenarios_by_module));
}

type ScenariosByModule<'a> = [(&'a &'a str, Vec<scenarios::Scenario>)];

/// `SCENARIOS`: the names per module.
fn scenario_list(scenarios_by_module: &ScenariosByModule<'_>) -> String {
    let mut list = String::from("&[\n");
    for (module, scenarios) in scenarios_by_module {
        let names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
        writeln!(list, "    ({module:?}, &{names:?}),").unwrap();
    }
    list.push(']');
    list
}

/// `applicability::NEEDS`: every scenario with the capabilities it needs, the constant that
/// declares them (so the compiler checks each).
fn scenario_needs(scenarios_by_module: &ScenariosByModule<'_>) -> String {
    let mut list = String::from("&[\n");
    for (module, scenarios) in scenarios_by_module {
        for scenario in scenarios {
            writeln!(
                list,
                "    ScenarioNeeds {{ module: {module:?}, name: {:?}, needs: crate::{} }},",
                scenario.name, scenario.needs_constant
            )
            .unwrap();
        }
    }
    list.push(']');
    list
}

/// `__tck_scenario_tests!`, a module of tests per scenario module, and `__tck_if_declared!`,
/// which picks a scenario's test or its ignored stand-in by the capabilities declared.
fn scenario_tests(scenarios_by_module: &ScenariosByModule<'_>) -> String {
    let mut tests = String::from(
        "/// One module of tests per scenario module, one test per scenario (see `tck_tests!`); \
         a scenario that needs a capability not declared is ignored, naming it.\n\
         #[doc(hidden)]\n\
         #[macro_export]\n\
         macro_rules! __tck_scenario_tests {\n    ($factory:expr, $declared:tt) => {\n",
    );
    for (module, scenarios) in scenarios_by_module {
        writeln!(tests, "        mod {module} {{").unwrap();
        for scenario in scenarios {
            writeln!(
                tests,
                "            {}",
                test_unless_needs_missing(module, &scenario.name, &scenario.needs)
            )
            .unwrap();
        }
        writeln!(tests, "        }}").unwrap();
    }
    tests.push_str("    };\n}\n\n");

    tests.push_str(
        "/// `__tck_if_declared!(Need, [Declared, ...], { if declared }, { if not })`.\n\
         #[doc(hidden)]\n\
         #[macro_export]\n\
         macro_rules! __tck_if_declared {\n",
    );
    for capability in scenarios::CAPABILITIES {
        writeln!(
            tests,
            "    ({capability}, [{capability} $(, $rest:ident)* $(,)?], {{$($yes:tt)*}}, $no:tt) => {{ $($yes)* }};"
        )
        .unwrap();
    }
    tests.push_str(
        "    ($need:ident, [$other:ident $(, $rest:ident)* $(,)?], $yes:tt, $no:tt) => {\n\
         \x20       $crate::__tck_if_declared!($need, [$($rest),*], $yes, $no);\n    };\n\
         \x20   ($need:ident, [], $yes:tt, {$($no:tt)*}) => { $($no)* };\n}\n",
    );
    tests
}

/// The test of `module::name`, ignored naming the first capability of `needs` the backend
/// does not declare.
fn test_unless_needs_missing(module: &str, name: &str, needs: &[String]) -> String {
    match needs.split_first() {
        None => format!("$crate::__tck_test!($factory, {module}, {name});"),
        Some((need, more)) => format!(
            "$crate::__tck_if_declared!({need}, $declared, {{ {} }}, {{ \
             $crate::__tck_test!($factory, {module}, {name}, ignore = \
             \"needs Capability::{need}, which this backend does not declare\"); }});",
            test_unless_needs_missing(module, name, more)
        ),
    }
}
