//! PostgreSQL-only behaviour: init modes, prefixes, lock timeouts, contention between
//! separate pools, killed connections, the visibility barrier, and fencing tokens that
//! survive a server restart.

#[path = "../common/mod.rs"]
mod common;

mod contention;
mod fenced_writes;
mod init_modes;
mod killed_connection;
mod least_privileges;
mod lock_timeout;
mod prefixes;
mod restart;
