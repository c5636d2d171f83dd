//! What publishing to the registry needs of the manifests: an order to publish the crates in,
//! and the metadata a registry page shows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test crate sits in the repository")
        .to_path_buf()
}

fn manifest(dir: &str) -> toml::Table {
    let path = repository_root().join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    text.parse()
        .unwrap_or_else(|error| panic!("parse {}: {error}", path.display()))
}

/// Every workspace member's manifest, by crate name (each sits in a directory of its name).
fn members() -> BTreeMap<String, toml::Table> {
    manifest("")["workspace"]["members"]
        .as_array()
        .expect("the root manifest lists its members")
        .iter()
        .map(|member| {
            let name = member.as_str().expect("a member is a path").to_string();
            let manifest = manifest(&name);
            (name, manifest)
        })
        .collect()
}

fn is_published(manifest: &toml::Table) -> bool {
    manifest["package"]
        .get("publish")
        .and_then(toml::Value::as_bool)
        != Some(false)
}

/// The workspace crates `manifest` names as dependencies the registry needs before it takes
/// this crate: every normal and build dependency, and each dev-dependency with a version (cargo
/// leaves a path-only dev-dependency out of the package, so the registry never needs it).
fn workspace_dependencies(manifest: &toml::Table) -> Vec<String> {
    let is_workspace_crate = |name: &str| name == "eventstore" || name.starts_with("eventstore-");
    let has_version = |spec: &toml::Value| match spec {
        toml::Value::Table(table) => {
            table.contains_key("version") || table.contains_key("workspace")
        }
        _ => true,
    };
    ["dependencies", "build-dependencies", "dev-dependencies"]
        .iter()
        .filter_map(|section| Some((*section, manifest.get(*section)?.as_table()?)))
        .flat_map(|(section, table)| {
            table
                .iter()
                .filter(move |(name, spec)| {
                    is_workspace_crate(name) && (section != "dev-dependencies" || has_version(spec))
                })
                .map(|(name, _)| name.clone())
        })
        .collect()
}

/// The workspace crates the registry needs before it takes `name`, directly or through others.
fn needed_before(name: &str, members: &BTreeMap<String, toml::Table>) -> BTreeSet<String> {
    let mut needed = BTreeSet::new();
    let mut pending = workspace_dependencies(&members[name]);
    while let Some(next) = pending.pop() {
        if needed.insert(next.clone()) {
            pending.extend(workspace_dependencies(&members[&next]));
        }
    }
    needed
}

#[test]
fn the_published_crates_have_an_order_to_be_published_in() {
    let members = members();
    for (name, manifest) in members.iter().filter(|(_, m)| is_published(m)) {
        assert!(
            !needed_before(name, &members).contains(name),
            "{name} would have to be on the registry before itself, through {:?}: a dev-dependency \
             on a backend or the kit must be path-only, so the package leaves it out",
            workspace_dependencies(manifest)
        );
    }
}

#[test]
fn published_crates_depend_on_published_crates_only() {
    let members = members();
    for (name, manifest) in members.iter().filter(|(_, m)| is_published(m)) {
        for dependency in workspace_dependencies(manifest) {
            assert!(
                is_published(&members[&dependency]),
                "{name} depends on {dependency}, which is not published"
            );
        }
    }
}

#[test]
fn every_published_crate_has_what_its_registry_page_shows() {
    for (name, manifest) in members().iter().filter(|(_, m)| is_published(m)) {
        let package = manifest["package"].as_table().unwrap();
        for field in ["description", "license", "repository", "documentation"] {
            assert!(package.contains_key(field), "{name} has no {field}");
        }
        let readme = package["readme"].as_str().expect("a readme");
        assert!(
            repository_root().join(name).join(readme).is_file(),
            "{name}'s readme {readme} is missing"
        );
        let keywords = package["keywords"].as_array().expect("keywords");
        assert!((1..=5).contains(&keywords.len()), "{name}: 1 to 5 keywords");
        let categories = package["categories"].as_array().expect("categories");
        assert!(!categories.is_empty(), "{name} has no categories");
    }
}
