//! The build script registers every scenario, and refuses a scenario module whose public
//! functions it could not register.

use std::fs;
use std::path::Path;

use eventstore_tck::SCENARIOS;
use syn::{Item, TypeParamBound, Visibility};

#[path = "../build/scenarios.rs"]
mod scenarios;

/// What the scenarios of a test file need, as a module's `NEEDS` declares it.
fn needs(capabilities: &[&str]) -> scenarios::Needs {
    scenarios::Needs {
        capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
        constant: "x::NEEDS".to_owned(),
    }
}

#[test]
fn a_public_async_fn_taking_a_storage_factory_is_registered() {
    let source = "
        use crate::StorageFactory;

        /// A scenario.
        pub async fn x<F: StorageFactory>(factory: &F) {}

        pub(crate) async fn helper<F: StorageFactory>(factory: &F) {}
        async fn private_helper(answer: u32) -> u32 { answer }
        pub(crate) fn shared_helper() {}
    ";

    let scanned = scenarios::scan("x.rs", source, "x", &needs(&[])).unwrap();
    let names: Vec<&str> = scanned.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["x"], "only the public scenario is registered");
}

#[test]
fn a_public_fn_of_another_shape_fails_the_build() {
    let wrong_shapes = [
        "pub fn not_async<F: StorageFactory>(factory: &F) {}",
        "pub async fn no_factory() {}",
        "pub async fn two_arguments<F: StorageFactory>(factory: &F, extra: u32) {}",
        "pub async fn by_value<F: StorageFactory>(factory: F) {}",
        "pub async fn other_bound<F: Clone>(factory: &F) {}",
        "pub async fn returns<F: StorageFactory>(factory: &F) -> bool { true }",
        "pub async fn where_clause<F>(factory: &F) where F: StorageFactory {}",
        "pub async unsafe fn unsafe_scenario<F: StorageFactory>(factory: &F) {}",
    ];
    for source in wrong_shapes {
        let name = source
            .split(['<', '('])
            .next()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap();
        let error = scenarios::scan("events.rs", source, "events", &needs(&[])).expect_err(source);
        assert!(
            error.contains("events.rs") && error.contains(&format!("`{name}`")),
            "the error names the file and the function: {error}"
        );
        assert!(
            error.contains(scenarios::SCENARIO_SHAPE),
            "the error shows the expected shape: {error}"
        );
    }
}

/// The scenario module each file of `src/` with scenarios belongs to: `src/name.rs` and
/// every file of `src/name/` belong to `name`.
fn modules_with_scenarios(src: &Path) -> Vec<String> {
    let mut modules = Vec::new();
    for entry in fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_string();
        let files: Vec<_> = if path.is_dir() {
            fs::read_dir(&path)
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|file| file.extension().is_some_and(|ext| ext == "rs"))
                .collect()
        } else {
            vec![path]
        };
        let with_scenarios = files.iter().any(|file| {
            has_public_async_fn_taking_a_storage_factory(&fs::read_to_string(file).unwrap())
        });
        if with_scenarios && !modules.contains(&module) {
            modules.push(module);
        }
    }
    modules.sort();
    modules
}

#[test]
fn every_file_with_scenarios_is_a_registered_scenario_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files_with_scenarios = modules_with_scenarios(&src);

    let mut registered: Vec<_> = SCENARIOS
        .iter()
        .map(|(module, _)| module.to_string())
        .collect();
    registered.sort();
    assert_eq!(
        files_with_scenarios, registered,
        "every file of src/ (or of a directory of src/) with scenarios is of a scenario module \
         the build script scans"
    );

    for (module, names) in SCENARIOS {
        let (scanned, _) = scenarios::scan_module(&src, module).unwrap();
        let scanned: Vec<String> = scanned.into_iter().map(|scenario| scenario.name).collect();
        assert_eq!(scanned, *names, "scenarios of {module}");
    }
}

#[test]
fn every_file_of_a_directory_module_is_declared_by_its_mod_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, _) in SCENARIOS {
        let dir = src.join(module);
        if !dir.is_dir() {
            continue;
        }
        let (_, read) = scenarios::scan_module(&src, module).unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            let file = entry.unwrap().path().display().to_string();
            assert!(
                read.iter()
                    .any(|scanned| file.ends_with(scanned.trim_start_matches("src"))),
                "{file} is scanned: a file of a scenario module's directory is declared by its \
                 mod.rs, so that its scenarios run"
            );
        }
    }
}

/// Whether `source` has a `pub async fn` generic over a `StorageFactory`, whatever its shape.
fn has_public_async_fn_taking_a_storage_factory(source: &str) -> bool {
    let file = syn::parse_file(source).unwrap();
    file.items.iter().any(|item| {
        let Item::Fn(function) = item else { return false };
        matches!(function.vis, Visibility::Public(_))
            && function.sig.asyncness.is_some()
            && function.sig.generics.type_params().any(|param| {
                param.bounds.iter().any(|bound| {
                    matches!(bound, TypeParamBound::Trait(bound)
                        if bound.path.segments.last().is_some_and(|last| last.ident == "StorageFactory"))
                })
            })
    })
}

#[test]
fn the_needs_of_a_module_apply_to_its_scenarios_unless_one_declares_its_own() {
    let source = "
        use eventstore_api::Capability;

        pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];

        /// Inherits the module's needs.
        pub async fn inherits<F: StorageFactory>(factory: &F) {}

        pub(crate) const NEEDS_MORE: &[Capability] = &[Capability::Lease, Capability::FencedWrites];

        pub async fn more<F: StorageFactory>(factory: &F) {}

        pub(crate) const NEEDS_NONE: &[Capability] = &[];

        pub async fn none<F: StorageFactory>(factory: &F) {}
    ";
    let module_needs = scenarios::file_needs("x.rs", source, "x").unwrap().unwrap();
    assert_eq!(module_needs.capabilities, ["Lease"]);
    assert_eq!(module_needs.constant, "x::NEEDS");
    let scanned = scenarios::scan("x.rs", source, "x", &module_needs).unwrap();
    let needs: Vec<(&str, Vec<&str>, &str)> = scanned
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.needs.iter().map(String::as_str).collect(),
                s.needs_constant.as_str(),
            )
        })
        .collect();
    assert_eq!(
        needs,
        [
            ("inherits", vec!["Lease"], "x::NEEDS"),
            ("more", vec!["Lease", "FencedWrites"], "x::NEEDS_MORE"),
            ("none", vec![], "x::NEEDS_NONE"),
        ],
        "a scenario's own NEEDS_ constant replaces the module's"
    );
}

#[test]
fn a_needs_constant_of_another_shape_or_for_no_scenario_fails_the_build() {
    for declaration in [
        "pub(crate) const NEEDS_X: &[Capability] = &[Capability::Leases];",
        "pub(crate) const NEEDS_X: &[Capability] = LEASE;",
        "pub(crate) const NEEDS_X: &[&str] = &[\"Lease\"];",
        "pub(crate) const NEEDS_X: &[Capability] = &[Capability::Lease, Capability::Lease];",
        "pub(crate) const NEEDS_Y: &[Capability] = &[Capability::Lease];",
    ] {
        let source = format!("{declaration}\npub async fn x<F: StorageFactory>(factory: &F) {{}}");
        let error = scenarios::scan("x.rs", &source, "x", &needs(&[])).expect_err(declaration);
        assert!(
            error.contains("x.rs") && error.contains("NEEDS_"),
            "the error names the file and the constant: {error}"
        );
    }
}

#[test]
fn the_scanned_needs_are_those_the_compiled_constants_hold() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, _) in SCENARIOS {
        let (scanned, _) = scenarios::scan_module(&src, module).unwrap();
        for scenario in scanned {
            let compiled = eventstore_tck::applicability::NEEDS
                .iter()
                .find(|needs| needs.module == *module && needs.name == scenario.name)
                .unwrap_or_else(|| {
                    panic!("{module}::{} is in applicability::NEEDS", scenario.name)
                });
            let compiled: Vec<String> = compiled.needs.iter().map(|c| format!("{c:?}")).collect();
            assert_eq!(
                compiled, scenario.needs,
                "{module}::{}: the build script reads {} as the compiler does",
                scenario.name, scenario.needs_constant
            );
        }
    }
}

#[test]
fn every_scenario_of_the_lease_module_needs_leases() {
    let lease_scenarios: Vec<_> = eventstore_tck::applicability::NEEDS
        .iter()
        .filter(|scenario| scenario.module == "leases")
        .collect();
    assert!(
        !lease_scenarios.is_empty(),
        "the lease module has scenarios"
    );
    for scenario in lease_scenarios {
        assert_eq!(
            scenario.needs,
            [eventstore_api::Capability::Lease],
            "{} needs Capability::Lease",
            scenario.name
        );
    }
}

#[test]
fn every_scenario_module_says_what_its_scenarios_need() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, _) in SCENARIOS {
        // A module without its NEEDS constant fails the build, naming it; here, the same
        // reading, so that a change to the scanner cannot drop the rule unseen.
        let root = if src.join(module).is_dir() {
            src.join(module).join("mod.rs")
        } else {
            src.join(format!("{module}.rs"))
        };
        let source = fs::read_to_string(&root).unwrap();
        let needs = scenarios::file_needs(&root.display().to_string(), &source, module).unwrap();
        assert!(
            needs.is_some(),
            "{}: a scenario module declares `pub(crate) const {}: &[Capability] = &[…];` (or \
             `&[]`), so that a backend without the capability sees its scenarios reported as \
             ignored instead of passing without running",
            root.display(),
            scenarios::NEEDS,
        );
    }
}

#[test]
fn the_build_script_knows_every_capability_the_kit_checks() {
    let checked: Vec<String> = eventstore_tck::applicability::CAPABILITIES
        .iter()
        .map(|capability| format!("{capability:?}"))
        .collect();
    assert_eq!(
        checked,
        scenarios::CAPABILITIES,
        "the capabilities a NEEDS constant may name are those applicability::CAPABILITIES checks"
    );
}
