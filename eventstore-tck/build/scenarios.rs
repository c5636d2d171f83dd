//! Finds the scenarios of a scenario module. Shared by the build script, which registers
//! them, and the kit's tests, which check the rules below.

use syn::{FnArg, GenericParam, Item, ReturnType, Signature, Type, TypeParamBound, Visibility};

/// The shape every public function of a scenario module must have.
pub(crate) const SCENARIO_SHAPE: &str = "pub async fn name<F: StorageFactory>(factory: &F)";

/// The names of the scenarios in `source`, the text of the scenario module `file`, in
/// declaration order. Every public function must be a scenario: one of another shape is an
/// error naming it, because it would otherwise never run.
pub(crate) fn scan(file: &str, source: &str) -> Result<Vec<String>, String> {
    let ast = syn::parse_file(source).map_err(|error| format!("{file}: cannot parse: {error}"))?;
    let mut names = Vec::new();
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
        names.push(name);
    }
    Ok(names)
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
