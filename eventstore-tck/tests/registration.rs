//! The build script registers every scenario, and refuses a scenario module whose public
//! functions it could not register.

use std::fs;
use std::path::Path;

use eventstore_tck::SCENARIOS;
use syn::{Item, TypeParamBound, Visibility};

#[path = "../build/scenarios.rs"]
mod scenarios;

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

    let scanned = scenarios::scan("x.rs", source).unwrap();
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
        let error = scenarios::scan("events.rs", source).expect_err(source);
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

#[test]
fn every_file_with_scenarios_is_a_registered_scenario_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files_with_scenarios = Vec::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let source = fs::read_to_string(&path).unwrap();
        if has_public_async_fn_taking_a_storage_factory(&source) {
            let module = path.file_stem().unwrap().to_str().unwrap().to_string();
            files_with_scenarios.push(module);
        }
    }
    files_with_scenarios.sort();

    let mut registered: Vec<_> = SCENARIOS
        .iter()
        .map(|(module, _)| module.to_string())
        .collect();
    registered.sort();
    assert_eq!(
        files_with_scenarios, registered,
        "every file of src/ with scenarios is a scenario module the build script scans"
    );

    for (module, names) in SCENARIOS {
        let file = format!("{module}.rs");
        let source = fs::read_to_string(src.join(&file)).unwrap();
        let scanned: Vec<String> = scenarios::scan(&file, &source)
            .unwrap()
            .into_iter()
            .map(|scenario| scenario.name)
            .collect();
        assert_eq!(scanned, *names, "scenarios of {file}");
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
fn a_needs_line_of_the_module_applies_to_its_scenarios_unless_one_says_otherwise() {
    let source = "
        //! Scenarios.
        //!
        //! Needs [`Capability::Lease`], unless a scenario says otherwise.

        /// Inherits the module's needs.
        pub async fn inherits<F: StorageFactory>(factory: &F) {}

        /// Needs [`Capability::Lease`] and [`Capability::FencedWrites`].
        pub async fn more<F: StorageFactory>(factory: &F) {}

        /// Needs no capability.
        pub async fn none<F: StorageFactory>(factory: &F) {}
    ";
    let scanned = scenarios::scan("x.rs", source).unwrap();
    let needs: Vec<(&str, Vec<&str>)> = scanned
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.needs.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        needs,
        [
            ("inherits", vec!["Lease"]),
            ("more", vec!["Lease", "FencedWrites"]),
            ("none", vec![]),
        ],
        "a scenario's own Needs line replaces the module's"
    );
}

#[test]
fn a_needs_line_naming_no_known_capability_fails_the_build() {
    for line in ["Needs [`Capability::Leases`].", "Needs leases."] {
        let source = format!("/// {line}\npub async fn x<F: StorageFactory>(factory: &F) {{}}");
        let error = scenarios::scan("x.rs", &source).expect_err(line);
        assert!(
            error.contains("`x`") && error.contains(scenarios::NEEDS_LINE.trim()),
            "the error names the scenario and the Needs line: {error}"
        );
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
        let file = format!("{module}.rs");
        let source = fs::read_to_string(src.join(&file)).unwrap();
        let needs = scenarios::module_needs(&file, &source).unwrap();
        assert!(
            needs.is_some(),
            "src/{file}: the module documentation needs a line `//! {}[`Capability::Lease`] …` \
             (or `//! {}no capability.`), so that a backend without the capability sees its \
             scenarios reported as ignored instead of passing without running",
            scenarios::NEEDS_LINE,
            scenarios::NEEDS_LINE,
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
        "the capabilities a Needs line may name are those applicability::CAPABILITIES checks"
    );
}
