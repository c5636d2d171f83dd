//! The crate layout the design fixes: every crate at the repository's top level, and no backend
//! built on another backend. Backends share code only through `eventstore-api`.

use std::path::{Path, PathBuf};

const BACKENDS: [&str; 3] = [
    "eventstore-memory",
    "eventstore-file",
    "eventstore-postgres",
];

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the examples crate sits in the repository")
        .to_path_buf()
}

fn manifest(crate_name: &str) -> toml::Table {
    let path = repository_root().join(crate_name).join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    text.parse()
        .unwrap_or_else(|error| panic!("parse {}: {error}", path.display()))
}

/// The workspace crates `crate_name` names in one dependency section.
fn workspace_crates_in(crate_name: &str, section: &str) -> Vec<String> {
    manifest(crate_name)
        .get(section)
        .and_then(toml::Value::as_table)
        .map(|table| {
            table
                .keys()
                .filter(|name| name.starts_with("eventstore-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn no_backend_depends_on_another_backend() {
    for backend in BACKENDS {
        for section in ["dependencies", "build-dependencies"] {
            let named: Vec<String> = workspace_crates_in(backend, section)
                .into_iter()
                .filter(|name| BACKENDS.contains(&name.as_str()))
                .collect();
            assert!(
                named.is_empty(),
                "{backend} names the backend(s) {named:?} under [{section}]; \
                 code backends share belongs in eventstore-api"
            );
        }
    }
}

#[test]
fn the_api_and_the_kit_depend_on_no_backend() {
    for crate_name in ["eventstore-api", "eventstore-tck"] {
        let named: Vec<String> = workspace_crates_in(crate_name, "dependencies")
            .into_iter()
            .filter(|name| BACKENDS.contains(&name.as_str()))
            .collect();
        assert!(
            named.is_empty(),
            "{crate_name} depends on the backend(s) {named:?}"
        );
    }
}

#[test]
fn every_workspace_member_sits_at_the_top_level() {
    let root = manifest("");
    let members = root["workspace"]["members"]
        .as_array()
        .expect("the root manifest lists its members");
    assert!(!members.is_empty());
    for member in members {
        let member = member.as_str().expect("a member is a path");
        assert!(
            !member.contains('/'),
            "workspace member {member:?} is not a top-level directory"
        );
        assert!(
            repository_root().join(member).join("Cargo.toml").is_file(),
            "workspace member {member:?} has no Cargo.toml at the top level"
        );
    }
    assert!(
        !repository_root().join("crates").exists(),
        "a crates/ directory is back; crates sit at the top level"
    );
}
