//! The schema version a prefix's tables record, so that a storage never applies its DDL over
//! the schema of a newer version of this library.
//!
//! In a rolling upgrade, instances of two versions run side by side. Without a version, an
//! instance of the older one that (re)starts takes the newer lease functions for drift and
//! puts its own back, and the next newer instance does the reverse. The shipped DDL records
//! its version in a comment on the events table; a storage compares it with its own before
//! it validates the rest, and applies DDL only to tables of its own version or an older one.

use sqlx::PgConnection;

use super::prefix::TablePrefix;

/// The version of the schema `sql/schema.sql` creates. Raise it with every change of the
/// script that an earlier version would take for drift (a function's body, a column, an
/// index), and the two numbers in the script with it.
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// The oldest schema version whose storages still run correctly on this version's tables:
/// the same calls with the same arguments, the same columns read and written. Equal to
/// [`SCHEMA_VERSION`] when a change is one an older storage cannot use.
pub(crate) const OLDEST_COMPATIBLE: u32 = 1;

/// What the comment starts with; the script writes it, and its guard reads it.
const MARKER: &str = "eventstore-postgres schema_version=";

/// A schema version as the tables record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchemaVersion {
    /// The version of the DDL that made the schema what it is.
    pub(crate) version: u32,
    /// The oldest version whose storages may use it.
    pub(crate) oldest_compatible: u32,
}

/// Where a prefix's tables stand against this storage's schema version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// No version recorded (no tables, or tables of a version before versions were
    /// recorded), or an older one: this storage may apply its DDL.
    Older(Option<SchemaVersion>),
    /// This storage's version.
    Same,
    /// A newer version that this storage may use as it is, but must not change.
    NewerCompatible(SchemaVersion),
    /// A newer version that needs a newer storage.
    NewerIncompatible(SchemaVersion),
}

impl SchemaVersion {
    /// The version this library's DDL creates.
    pub(crate) const OURS: SchemaVersion = SchemaVersion {
        version: SCHEMA_VERSION,
        oldest_compatible: OLDEST_COMPATIBLE,
    };

    /// The comment that records this version on the events table.
    #[cfg(test)]
    fn comment(self) -> String {
        format!(
            "{MARKER}{} oldest_compatible={}",
            self.version, self.oldest_compatible
        )
    }

    /// The version a comment records; `None` for a comment this library did not write.
    pub(crate) fn parse(comment: &str) -> Option<SchemaVersion> {
        let (version, oldest) = comment
            .strip_prefix(MARKER)?
            .split_once(" oldest_compatible=")?;
        Some(SchemaVersion {
            version: version.parse().ok()?,
            oldest_compatible: oldest.parse().ok()?,
        })
    }

    /// Where `recorded` stands against this storage's version.
    pub(crate) fn standing(recorded: Option<SchemaVersion>) -> Standing {
        let ours = SchemaVersion::OURS.version;
        match recorded {
            Some(recorded) if recorded.version == ours => Standing::Same,
            Some(recorded) if recorded.version > ours => {
                if recorded.oldest_compatible <= ours {
                    Standing::NewerCompatible(recorded)
                } else {
                    Standing::NewerIncompatible(recorded)
                }
            }
            older => Standing::Older(older),
        }
    }
}

/// The version the tables of `prefix` record; `None` where none is (no events table, no
/// comment, or a comment of someone else's).
pub(crate) async fn recorded(
    connection: &mut PgConnection,
    prefix: &TablePrefix,
    persistent: bool,
) -> Result<Option<SchemaVersion>, sqlx::Error> {
    let comment: Option<String> =
        sqlx::query_scalar("SELECT obj_description(to_regclass($1), 'pg_class')")
            .bind(prefix.name("events"))
            .persistent(persistent)
            .fetch_one(connection)
            .await?;
    Ok(comment.as_deref().and_then(SchemaVersion::parse))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SCHEMA_SQL;

    #[test]
    fn a_comment_reads_back_as_the_version_it_records() {
        let version = SchemaVersion {
            version: 7,
            oldest_compatible: 5,
        };
        assert_eq!(SchemaVersion::parse(&version.comment()), Some(version));
        assert_eq!(SchemaVersion::parse("the orders log"), None);
        assert_eq!(
            SchemaVersion::parse(&format!("{MARKER}x oldest_compatible=1")),
            None
        );
    }

    #[test]
    fn newer_versions_are_used_as_they_are_only_when_they_say_so() {
        let newer = |oldest_compatible| SchemaVersion {
            version: SCHEMA_VERSION + 1,
            oldest_compatible,
        };
        assert_eq!(
            SchemaVersion::standing(Some(newer(SCHEMA_VERSION))),
            Standing::NewerCompatible(newer(SCHEMA_VERSION))
        );
        assert_eq!(
            SchemaVersion::standing(Some(newer(SCHEMA_VERSION + 1))),
            Standing::NewerIncompatible(newer(SCHEMA_VERSION + 1))
        );
        assert_eq!(
            SchemaVersion::standing(Some(SchemaVersion::OURS)),
            Standing::Same
        );
        assert_eq!(SchemaVersion::standing(None), Standing::Older(None));
    }

    #[test]
    fn the_script_records_this_version_and_refuses_newer_tables() {
        let recording = format!(
            "COMMENT ON TABLE __prefix__events IS '{}';",
            SchemaVersion::OURS.comment()
        );
        assert!(SCHEMA_SQL.contains(&recording), "{recording}");
        let guard = format!("IF v_recorded > {SCHEMA_VERSION} THEN");
        assert!(SCHEMA_SQL.contains(&guard), "{guard}");
        assert!(SCHEMA_SQL.contains(&format!("this script''s version {SCHEMA_VERSION}")));
        assert!(SCHEMA_SQL.contains(&format!("'{MARKER}([0-9]{{1,9}})'")));
    }
}
