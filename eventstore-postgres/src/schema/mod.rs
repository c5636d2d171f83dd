//! The database schema: the shipped DDL and what opening a storage does with it, the version
//! the tables record, and the table prefix that names them.

mod catalog;
mod ddl;
mod drift;
mod init_mode;
pub(crate) mod prefix;
mod schema_version;

pub(crate) use ddl::initialize;
pub use ddl::{drop_sql, is_newer_schema, schema_sql, DROP_SQL, GRANTS_SQL, SCHEMA_SQL};
pub use init_mode::DatabaseInitMode;
