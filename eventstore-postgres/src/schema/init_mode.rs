//! What opening a storage does to the database schema.

/// What [`PostgresEventStorageBuilder::build`] does to the database schema.
///
/// [`PostgresEventStorageBuilder::build`]: crate::PostgresEventStorageBuilder::build
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DatabaseInitMode {
    /// Creates whatever is missing, then validates. Safe when many processes start at once:
    /// a complete schema is only read, and creation is serialized by a transaction-scoped
    /// advisory lock.
    #[default]
    Ensure,
    /// Only reads the catalog: a missing table, column, index or function, or a column of
    /// another type or nullability, is an [`EventStorageError::Schema`] naming it.
    ///
    /// [`EventStorageError::Schema`]: eventstore_api::EventStorageError::Schema
    Validate,
    /// Touches nothing; for deployments whose schema is managed elsewhere.
    None,
    /// Drops this prefix's objects and creates them anew, in one transaction. Deletes every
    /// event, bookmark and lease of the prefix: for tests and demos.
    Recreate,
}
