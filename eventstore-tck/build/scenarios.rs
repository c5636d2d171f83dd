//! Finds the scenarios of a scenario module and the capabilities each needs. Shared by the
//! build script, which registers them, and the kit's tests, which check the rules below.

use syn::{
    Attribute, Expr, FnArg, GenericParam, Item, Lit, Meta, ReturnType, Signature, Type,
    TypeParamBound, Visibility,
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

/// How a documentation line declares what a scenario needs: a line of the module's
/// documentation (for every scenario of the module) or of a scenario's own (for that one,
/// replacing the module's) that starts with this word, naming `Capability::…` variants, or
/// saying `no capability`.
pub(crate) const NEEDS_LINE: &str = "Needs ";

/// A scenario found in a scenario module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scenario {
    /// The function's name, which is the test's.
    pub(crate) name: String,
    /// The capabilities it needs, in the order its documentation names them.
    pub(crate) needs: Vec<String>,
}

/// The scenarios in `source`, the text of the scenario module `file`, in declaration order.
/// Every public function must be a scenario: one of another shape is an error naming it,
/// because it would otherwise never run. A `Needs` line naming no known capability is an
/// error too.
pub(crate) fn scan(file: &str, source: &str) -> Result<Vec<Scenario>, String> {
    let module_needs = module_needs(file, source)?;
    let ast = syn::parse_file(source).map_err(|error| format!("{file}: cannot parse: {error}"))?;
    let mut scenarios = Vec::new();
    for item in ast.items {
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
        let own_needs =
            needs(&function.attrs).map_err(|error| format!("{file}: `{name}`: {error}"))?;
        let needs = own_needs
            .or_else(|| module_needs.clone())
            .unwrap_or_default();
        scenarios.push(Scenario { name, needs });
    }
    Ok(scenarios)
}

/// The capabilities the module documentation of `source`, the text of the scenario module
/// `file`, says its scenarios need, or `None` when it has no `Needs` line.
pub(crate) fn module_needs(file: &str, source: &str) -> Result<Option<Vec<String>>, String> {
    let ast = syn::parse_file(source).map_err(|error| format!("{file}: cannot parse: {error}"))?;
    needs(&ast.attrs).map_err(|error| format!("{file}: {error}"))
}

/// The capabilities the `Needs` line of the documentation `attrs` names, or `None` without
/// such a line.
fn needs(attrs: &[Attribute]) -> Result<Option<Vec<String>>, String> {
    let mut found = None;
    for line in doc_lines(attrs) {
        let line = line.trim();
        let Some(rest) = line.strip_prefix(NEEDS_LINE) else {
            continue;
        };
        if found.is_some() {
            return Err(format!("a second `{NEEDS_LINE}` line: {line:?}"));
        }
        let mut named = Vec::new();
        for (index, _) in rest.match_indices("Capability::") {
            let variant: String = rest[index + "Capability::".len()..]
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            if !CAPABILITIES.contains(&variant.as_str()) {
                return Err(format!(
                    "`{NEEDS_LINE}` line {line:?} names `Capability::{variant}`, which is none \
                     of {CAPABILITIES:?}"
                ));
            }
            if !named.contains(&variant) {
                named.push(variant);
            }
        }
        if named.is_empty() && !rest.starts_with("no capability") {
            return Err(format!(
                "`{NEEDS_LINE}` line {line:?} names no `Capability::…` and does not say \
                 `no capability`"
            ));
        }
        found = Some(named);
    }
    Ok(found)
}

/// The lines of the `///` or `//!` documentation among `attrs`.
fn doc_lines(attrs: &[Attribute]) -> Vec<String> {
    let mut lines = Vec::new();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("doc")) {
        let Meta::NameValue(pair) = &attr.meta else {
            continue;
        };
        if let Expr::Lit(literal) = &pair.value {
            if let Lit::Str(text) = &literal.lit {
                lines.extend(text.value().lines().map(str::to_owned));
            }
        }
    }
    lines
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
