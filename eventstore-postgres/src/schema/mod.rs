//! The database schema: the shipped DDL and what opening a storage does with it, the version
//! the tables record, and the table prefix that names them.

mod catalog;
mod ddl;
mod drift;
mod init_mode;
pub(crate) mod prefix;
mod schema_version;
mod scripts;

pub(crate) use ddl::initialize;
pub use ddl::is_newer_schema;
pub use init_mode::DatabaseInitMode;
pub use scripts::{drop_sql, schema_sql, DROP_SQL, GRANTS_SQL, SCHEMA_SQL};
