//! The isolation level of every transaction the storage starts itself.

/// How the storage starts every transaction of its own. Under `REPEATABLE READ` a
/// transaction keeps the snapshot of its first statement, taken before its lock was granted.
pub(crate) const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";
