//! Which leases a listing covers.

/// The leases a listing covers ([`EventStorage::list_leases`],
/// [`EventStorage::list_contenders`]).
///
/// [`EventStorage::list_leases`]: crate::EventStorage::list_leases
/// [`EventStorage::list_contenders`]: crate::EventStorage::list_contenders
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseSelection {
    /// Every lease of the storage.
    All,
    /// One lease, by name.
    Named(String),
    /// The leases whose names start with this text (plain text, no pattern; empty selects
    /// every lease): the leases of one partition group, say, `{group}/`.
    Prefix(String),
}

impl LeaseSelection {
    /// Every lease.
    pub fn all() -> Self {
        LeaseSelection::All
    }

    /// The lease named `lease_name`.
    pub fn named(lease_name: impl Into<String>) -> Self {
        LeaseSelection::Named(lease_name.into())
    }

    /// The leases whose names start with `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        LeaseSelection::Prefix(prefix.into())
    }

    /// Whether the lease named `lease_name` is selected.
    pub fn selects(&self, lease_name: &str) -> bool {
        match self {
            LeaseSelection::All => true,
            LeaseSelection::Named(name) => name == lease_name,
            LeaseSelection::Prefix(prefix) => lease_name.starts_with(prefix.as_str()),
        }
    }
}
