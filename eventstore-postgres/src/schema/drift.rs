//! The first difference between what the shipped DDL creates and what a prefix holds, worded
//! for the operator who has to repair it.

use super::catalog::{Catalog, Facet, Kind, Object, OWN_SCHEMA_PIN};

/// An object of the shipped DDL that a prefix lacks or holds otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Drift {
    /// The object, as errors name it: `column p_leases.released`.
    pub(crate) object: String,
    /// What is wrong with it.
    pub(crate) problem: String,
}

/// Properties that tables made by an earlier DDL may keep, because the shipped DDL leaves
/// them as they are and the storage works with either: payloads stored as `jsonb` (the
/// script creates `json`, whose text reads back without a conversion).
const ACCEPTED_VARIANTS: &[(Kind, &str, &str, &str)] =
    &[(Kind::Column, "events.payload", "type", "jsonb")];

/// The first object of `shipped` that `found` lacks or holds otherwise, in the order of
/// `shipped` (tables, columns, constraints, indexes, functions). `exact` compares every
/// property; otherwise only those a newer schema version keeps.
pub(crate) fn first_difference(shipped: &Catalog, found: &Catalog, exact: bool) -> Option<Drift> {
    shipped.objects.iter().find_map(|expected| {
        let drift = |problem: String| {
            Some(Drift {
                object: expected.describe(),
                problem,
            })
        };
        let Some(actual) = found.find(expected.kind, &expected.name) else {
            return drift(missing(expected));
        };
        let differing = expected
            .facets
            .iter()
            .filter(|facet| exact || !facet.exact_only)
            .find(|facet| {
                let value = actual.facet(facet.name).unwrap_or_default();
                value != facet.value && !is_accepted_variant(expected, facet, value)
            })?;
        drift(describe(
            expected.kind,
            differing,
            actual.facet(differing.name).unwrap_or_default(),
        ))
    })
}

fn is_accepted_variant(expected: &Object, facet: &Facet, value: &str) -> bool {
    ACCEPTED_VARIANTS
        .iter()
        .any(|&(kind, name, facet_name, accepted)| {
            kind == expected.kind
                && expected.name.ends_with(name)
                && facet_name == facet.name
                && accepted == value
        })
}

fn missing(expected: &Object) -> String {
    match (expected.kind, expected.facet("table")) {
        (Kind::Index | Kind::Constraint | Kind::Trigger, Some(table)) => {
            format!("is missing on table {table}")
        }
        _ => "is missing".to_owned(),
    }
}

/// What an operator reads about `facet` of an object of `kind`, found as `actual`.
fn describe(kind: Kind, facet: &Facet, actual: &str) -> String {
    let expected = &facet.value;
    match (kind, facet.name) {
        (Kind::Column, "default") => format!(
            "has {actual}, expected {expected}: the storage's inserts leave the column to its \
             default (the shipped DDL does not change an existing column's default)"
        ),
        (_, "table") => format!("is on table {actual}, expected {expected}"),
        (Kind::Index, "definition") => format!(
            "is {actual}, expected {expected}; the shipped DDL creates it as expected once it \
             is dropped"
        ),
        (Kind::Trigger, "definition") => format!(
            "is {actual}, expected {expected}; the shipped DDL creates it as expected once it \
             is dropped"
        ),
        (Kind::Index, "options") => format!("has options {actual}, expected {expected}"),
        (Kind::Constraint, "definition") => format!(
            "is {actual}, expected {expected}; the shipped DDL does not change an existing \
             table's constraints: alter it by hand"
        ),
        (Kind::Function, "body") => {
            "differs from the shipped definition in its body (apply the shipped DDL again)"
                .to_owned()
        }
        (Kind::Function, "settings")
            if expected.contains(OWN_SCHEMA_PIN) && !actual.contains(OWN_SCHEMA_PIN) =>
        {
            "does not pin its search_path to its own schema and pg_temp (apply the shipped DDL \
             again)"
                .to_owned()
        }
        (Kind::Function, facet) => format!(
            "differs from the shipped definition in its {facet}: {actual}, expected {expected} \
             (apply the shipped DDL again)"
        ),
        _ => format!("is {actual}, expected {expected}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, data_type: &str, default: &str) -> Object {
        let facet = |name, value: &str, exact_only| Facet {
            name,
            value: value.to_owned(),
            exact_only,
        };
        Object {
            kind: Kind::Column,
            name: name.to_owned(),
            facets: vec![
                facet("type", data_type, false),
                facet("nullability", "NOT NULL", false),
                facet("default", default, true),
            ],
        }
    }

    fn catalog(objects: Vec<Object>) -> Catalog {
        Catalog { objects }
    }

    #[test]
    fn the_first_missing_or_different_object_is_named() {
        let shipped = catalog(vec![
            column("p_events.tx", "xid8", "default pg_current_xact_id()"),
            column("p_events.payload", "json", "no default"),
        ]);
        let found = catalog(vec![column("p_events.payload", "json", "no default")]);
        assert_eq!(
            first_difference(&shipped, &found, true),
            Some(Drift {
                object: "column p_events.tx".into(),
                problem: "is missing".into()
            })
        );
        let found = catalog(vec![
            column("p_events.tx", "xid8", "default '1'::xid8"),
            column("p_events.payload", "text", "no default"),
        ]);
        let drift = first_difference(&shipped, &found, true).unwrap();
        assert_eq!(drift.object, "column p_events.tx");
        assert!(drift
            .problem
            .starts_with("has default '1'::xid8, expected default pg_current_xact_id()"));
        // A newer version may change a default, not a type.
        let drift = first_difference(&shipped, &found, false).unwrap();
        assert_eq!(
            (drift.object.as_str(), drift.problem.as_str()),
            ("column p_events.payload", "is text, expected json")
        );
    }

    #[test]
    fn extra_objects_and_accepted_variants_pass() {
        let shipped = catalog(vec![column("p_events.payload", "json", "no default")]);
        let found = catalog(vec![
            column("p_events.payload", "jsonb", "no default"),
            column("p_events.mine", "text", "no default"),
        ]);
        assert_eq!(first_difference(&shipped, &found, true), None);
    }
}
