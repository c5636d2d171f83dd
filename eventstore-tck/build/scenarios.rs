//! Finds the scenarios of a scenario module and the capabilities each needs. Shared by the
//! build script, which registers them, and the kit's tests, which check the rules below.
//!
//! A scenario module is a file `src/name.rs` or a directory `src/name/mod.rs` whose `mod`
//! declarations name files of scenarios on topics (`src/name/topic.rs`), scanned in the order
//! they are declared. What a scenario needs is declared in code, as constants the compiler
//! checks name real [`Capability`] variants:
//!
//! ```ignore
//! pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];
//! pub(crate) const NEEDS_ONE_SCENARIO: &[Capability] = &[];
//! ```
//!
//! `NEEDS` in `name.rs` or `name/mod.rs` is every scenario's of the module; `NEEDS` in a topic
//! file replaces it for the scenarios of that file; `NEEDS_<SCENARIO>` (the scenario's name
//! in capitals) replaces it for that scenario, in the scenario's file. The generated table of
//! needs names these constants, so the compiler checks every one of them.
//!
//! [`Capability`]: eventstore_api::Capability

use std::path::Path;

use syn::{
    Expr, FnArg, GenericParam, Item, ItemConst, ReturnType, Signature, Type, TypeParamBound,
    Visibility,
};

/// The shape every public function of a scenario module must have.
pub(crate) const SCENARIO_SHAPE: &str = "pub async fn name<F: StorageFactory>(factory: &F)";

/// The capabilities a scenario may need: the variants of `eventstore_api::Capability`.
pub(crate) const CAPABILITIES: &[&str] = &[
    "Lease",
    "FencedWrites",
    "LeaseChanges",
    "LeaseOutcomes",
    "AppendHints",
];

/// The constant that declares what the scenarios of a module or a topic file need.
pub(crate) const NEEDS: &str = "NEEDS";

/// A scenario found in a scenario module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scenario {
    /// The function's name, which is the test's.
    pub(crate) name: String,
    /// The capabilities it needs, in the order its declaration names them.
    pub(crate) needs: Vec<String>,
    /// The path, from the crate's root, of the constant that declares them
    /// (`leases::NEEDS`, `events::reads::NEEDS_ONE_SCENARIO`).
    pub(crate) needs_constant: String,
}

/// The declaration of what scenarios need, found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Needs {
    /// The capabilities, in the order the constant names them.
    pub(crate) capabilities: Vec<String>,
    /// The constant's path from the crate's root.
    pub(crate) constant: String,
}

/// The scenarios of the scenario module `module`, a file `module.rs` or a directory
/// `module/mod.rs` under `src`, in declaration order. Answers also the files read, for the
/// build script to watch.
pub(crate) fn scan_module(
    src: &Path,
    module: &str,
) -> Result<(Vec<Scenario>, Vec<String>), String> {
    let file = src.join(format!("{module}.rs"));
    let directory = src.join(module).join("mod.rs");
    let (root, topics_dir) = match (file.is_file(), directory.is_file()) {
        (true, false) => (file, None),
        (false, true) => (directory, Some(src.join(module))),
        (true, true) => {
            return Err(format!(
                "scenario module `{module}` is both src/{module}.rs and src/{module}/mod.rs"
            ))
        }
        (false, false) => {
            return Err(format!(
                "scenario module `{module}` is neither src/{module}.rs nor src/{module}/mod.rs"
            ))
        }
    };
    let mut read = Vec::new();
    let root_name = root.display().to_string();
    let source = std::fs::read_to_string(&root).map_err(|error| format!("{root_name}: {error}"))?;
    read.push(root_name.clone());
    let ast = parse(&root_name, &source)?;
    let module_needs = needs_constant(&root_name, &ast, module)?.ok_or_else(|| {
        format!(
            "{root_name}: a scenario module declares what its scenarios need: \
             `pub(crate) const {NEEDS}: &[Capability] = &[Capability::Lease];` (or `&[]`), so \
             that a backend without the capability sees them reported as ignored instead of \
             passing without running"
        )
    })?;
    let mut scenarios = scan_items(&root_name, &ast, module, &module_needs)?;
    if let Some(dir) = topics_dir {
        for item in &ast.items {
            let Item::Mod(topic) = item else { continue };
            if topic.content.is_some() {
                continue;
            }
            let topic_name = topic.ident.to_string();
            let topic_file = dir.join(format!("{topic_name}.rs"));
            let topic_file_name = topic_file.display().to_string();
            let topic_source = std::fs::read_to_string(&topic_file)
                .map_err(|error| format!("{topic_file_name}: {error}"))?;
            read.push(topic_file_name.clone());
            let path = format!("{module}::{topic_name}");
            let topic_ast = parse(&topic_file_name, &topic_source)?;
            let topic_needs = needs_constant(&topic_file_name, &topic_ast, &path)?
                .unwrap_or(module_needs.clone());
            scenarios.extend(scan_items(
                &topic_file_name,
                &topic_ast,
                &path,
                &topic_needs,
            )?);
        }
    }
    Ok((scenarios, read))
}

/// The scenarios in `source`, the text of the file `file` of scenarios at `path` from the
/// crate's root, whose scenarios need `file_needs` unless one declares its own.
#[allow(dead_code)] // The kit's tests call it; the build script scans whole modules.
pub(crate) fn scan(
    file: &str,
    source: &str,
    path: &str,
    file_needs: &Needs,
) -> Result<Vec<Scenario>, String> {
    let ast = parse(file, source)?;
    scan_items(file, &ast, path, file_needs)
}

/// The `NEEDS` declaration of `source`, the text of the file `file` at `path`, if it has one.
#[allow(dead_code)] // The kit's tests call it.
pub(crate) fn file_needs(file: &str, source: &str, path: &str) -> Result<Option<Needs>, String> {
    needs_constant(file, &parse(file, source)?, path)
}

fn parse(file: &str, source: &str) -> Result<syn::File, String> {
    syn::parse_file(source).map_err(|error| format!("{file}: cannot parse: {error}"))
}

/// Every public function of `ast` must be a scenario: one of another shape is an error
/// naming it, because it would otherwise never run. A `NEEDS_…` constant naming no scenario
/// of the file is an error too.
fn scan_items(
    file: &str,
    ast: &syn::File,
    path: &str,
    file_needs: &Needs,
) -> Result<Vec<Scenario>, String> {
    let overrides = needs_overrides(file, ast, path)?;
    let mut scenarios = Vec::new();
    for item in &ast.items {
        let Item::Fn(function) = item else { continue };
        if !matches!(function.vis, Visibility::Public(_)) {
            continue;
        }
        let name = function.sig.ident.to_string();
        if !is_scenario(&function.sig) {
            return Err(format!(
                "{file}: public function `{name}` is not a scenario: every `pub fn` of a \
                 scenario module must be `{SCENARIO_SHAPE}`, so that it runs; make it one, or \
                 make it `pub(crate)`"
            ));
        }
        let own = overrides
            .iter()
            .find(|(scenario, _)| *scenario == name)
            .map(|(_, needs)| needs.clone());
        let needs = own.unwrap_or_else(|| file_needs.clone());
        scenarios.push(Scenario {
            name,
            needs: needs.capabilities,
            needs_constant: needs.constant,
        });
    }
    for (scenario, needs) in &overrides {
        if !scenarios.iter().any(|found| &found.name == scenario) {
            return Err(format!(
                "{file}: `{}` declares what the scenario `{scenario}` needs, but the file has no \
                 scenario of that name",
                needs.constant
            ));
        }
    }
    Ok(scenarios)
}

/// The `NEEDS` constant of `ast`, the file `file` at `path`.
fn needs_constant(file: &str, ast: &syn::File, path: &str) -> Result<Option<Needs>, String> {
    let mut found = None;
    for item in &ast.items {
        let Item::Const(constant) = item else {
            continue;
        };
        if constant.ident != NEEDS {
            continue;
        }
        let capabilities = capabilities(file, constant)?;
        found = Some(Needs {
            capabilities,
            constant: format!("{path}::{NEEDS}"),
        });
    }
    Ok(found)
}

/// Every `NEEDS_<SCENARIO>` constant of `ast`, the file `file` at `path`, by the scenario's
/// name.
fn needs_overrides(
    file: &str,
    ast: &syn::File,
    path: &str,
) -> Result<Vec<(String, Needs)>, String> {
    let mut overrides = Vec::new();
    for item in &ast.items {
        let Item::Const(constant) = item else {
            continue;
        };
        let ident = constant.ident.to_string();
        let Some(scenario) = ident.strip_prefix(&format!("{NEEDS}_")) else {
            continue;
        };
        let capabilities = capabilities(file, constant)?;
        overrides.push((
            scenario.to_ascii_lowercase(),
            Needs {
                capabilities,
                constant: format!("{path}::{ident}"),
            },
        ));
    }
    Ok(overrides)
}

/// The variants `constant` names: it must be `&[Capability::A, Capability::B]` (or `&[]`).
fn capabilities(file: &str, constant: &ItemConst) -> Result<Vec<String>, String> {
    let name = constant.ident.to_string();
    let shape = || {
        format!(
            "{file}: `{name}` must be `pub(crate) const {name}: &[Capability] = \
             &[Capability::…, …];`, a list of the variants {CAPABILITIES:?}"
        )
    };
    let typed = match &*constant.ty {
        Type::Reference(reference) => match &*reference.elem {
            Type::Slice(slice) => match &*slice.elem {
                Type::Path(element) => element
                    .path
                    .segments
                    .last()
                    .is_some_and(|last| last.ident == "Capability"),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    };
    if !typed {
        return Err(shape());
    }
    let Expr::Reference(reference) = &*constant.expr else {
        return Err(shape());
    };
    let Expr::Array(array) = &*reference.expr else {
        return Err(shape());
    };
    let mut named = Vec::new();
    for element in &array.elems {
        let Expr::Path(variant) = element else {
            return Err(shape());
        };
        let segments: Vec<String> = variant
            .path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        let [.., kind, variant] = &segments[..] else {
            return Err(shape());
        };
        if kind != "Capability" || !CAPABILITIES.contains(&variant.as_str()) {
            return Err(shape());
        }
        if named.contains(variant) {
            return Err(format!(
                "{file}: `{name}` names `Capability::{variant}` twice"
            ));
        }
        named.push(variant.clone());
    }
    Ok(named)
}

/// Whether `sig` is `async fn name<F: StorageFactory>(factory: &F)` (any parameter names).
fn is_scenario(sig: &Signature) -> bool {
    let plain = sig.asyncness.is_some()
        && sig.constness.is_none()
        && sig.unsafety.is_none()
        && sig.abi.is_none()
        && sig.variadic.is_none()
        && sig.generics.where_clause.is_none()
        && matches!(sig.output, ReturnType::Default);
    let Some(GenericParam::Type(factory_type)) = only(&sig.generics.params) else {
        return false;
    };
    let Some(TypeParamBound::Trait(bound)) = only(&factory_type.bounds) else {
        return false;
    };
    let Some(FnArg::Typed(argument)) = only(&sig.inputs) else {
        return false;
    };
    let Type::Reference(reference) = &*argument.ty else {
        return false;
    };
    let Type::Path(referenced) = &*reference.elem else {
        return false;
    };
    plain
        && bound
            .path
            .segments
            .last()
            .is_some_and(|last| last.ident == "StorageFactory")
        && reference.lifetime.is_none()
        && reference.mutability.is_none()
        && referenced.path.is_ident(&factory_type.ident)
}

/// The one item of `items`, if there is exactly one.
fn only<T>(items: impl IntoIterator<Item = T>) -> Option<T> {
    let mut items = items.into_iter();
    let first = items.next()?;
    items.next().is_none().then_some(first)
}
