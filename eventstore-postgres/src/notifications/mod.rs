//! Notifications: what appends and the lease functions send with `pg_notify`, and the one
//! `LISTEN` connection that feeds them to the storage's subscribers.

pub(crate) mod append_notification;
pub(crate) mod lease_notification;
pub(crate) mod listener;
