//! The table prefix that keeps several storages apart in one database.

use std::fmt;

use eventstore_api::EventStorageError;

/// The placeholder the shipped `.sql` files use where the prefix goes.
const PLACEHOLDER: &str = "__prefix__";

/// The longest prefix accepted, so that every derived name stays within PostgreSQL's
/// 63-byte identifier limit (the longest suffix is `lease_contenders_pkey`).
const MAX_PREFIX_BYTES: usize = 32;

/// A validated prefix: `^[a-z][a-z0-9_]{0,30}_$`.
///
/// Being a safe identifier on its own, it is written into SQL text as it is; nothing a caller
/// passes as a value is ever written into SQL text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TablePrefix(String);

impl TablePrefix {
    /// Checks `prefix` against `^[a-z][a-z0-9_]{0,30}_$`.
    pub(crate) fn parse(prefix: &str) -> Result<Self, EventStorageError> {
        let refuse = |problem: &str| {
            Err(EventStorageError::invalid(
                "table prefix",
                prefix,
                format!("{problem}; a prefix matches ^[a-z][a-z0-9_]{{0,30}}_$, e.g. tenant1_"),
            ))
        };
        let bytes = prefix.as_bytes();
        if bytes.len() < 2 || bytes.len() > MAX_PREFIX_BYTES {
            return refuse(&format!(
                "is {} bytes long, it must be 2 to {MAX_PREFIX_BYTES}",
                bytes.len()
            ));
        }
        if !bytes.first().is_some_and(u8::is_ascii_lowercase) {
            return refuse("must start with a lowercase ASCII letter");
        }
        if bytes.last() != Some(&b'_') {
            return refuse("must end with '_'");
        }
        if !bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return refuse("may hold only lowercase ASCII letters, digits and '_'");
        }
        Ok(TablePrefix(prefix.to_owned()))
    }

    /// The prefix as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `sql` with every `__prefix__` replaced by this prefix.
    pub(crate) fn apply(&self, sql: &str) -> String {
        sql.replace(PLACEHOLDER, &self.0)
    }

    /// The name of one of this storage's objects, e.g. `tenant1_events`.
    pub(crate) fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.0)
    }
}

impl fmt::Display for TablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_identifiers_are_accepted() {
        for prefix in [
            "a_",
            "tenant1_",
            "es_",
            "a_b_c_",
            &format!("a{}_", "b".repeat(30)),
        ] {
            assert!(TablePrefix::parse(prefix).is_ok(), "{prefix}");
        }
    }

    #[test]
    fn anything_else_is_invalid_input_naming_the_rule() {
        let cases = [
            ("", "0 bytes"),
            ("_", "1 bytes"),
            ("a", "1 bytes"),
            ("ab", "end with '_'"),
            ("1a_", "start with a lowercase"),
            ("_a_", "start with a lowercase"),
            ("Tenant_", "start with a lowercase"),
            ("tEnant_", "only lowercase"),
            ("a-b_", "only lowercase"),
            ("a;drop_", "only lowercase"),
            ("a b_", "only lowercase"),
            ("é_", "start with a lowercase"),
            ("a\0_", "only lowercase"),
        ];
        for (prefix, needle) in cases {
            match TablePrefix::parse(prefix) {
                Err(error @ EventStorageError::InvalidInput { .. }) => {
                    let message = error.to_string();
                    assert!(message.contains(needle), "{prefix:?}: {message}");
                }
                other => panic!("{prefix:?} should be refused, got {other:?}"),
            }
        }
        let long = format!("a{}_", "b".repeat(31));
        assert!(TablePrefix::parse(&long).is_err());
    }

    #[test]
    fn apply_replaces_every_placeholder() {
        let prefix = TablePrefix::parse("t1_").unwrap();
        assert_eq!(
            prefix.apply("SELECT * FROM __prefix__events JOIN __prefix__bookmarks"),
            "SELECT * FROM t1_events JOIN t1_bookmarks"
        );
        assert_eq!(prefix.name("leases"), "t1_leases");
    }
}
