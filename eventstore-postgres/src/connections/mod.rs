//! Connections to the server: their health and reconnect backoff, how statements and
//! transactions run on them, how driver errors map, and the settings every call consults.

pub(crate) mod backoff;
pub(crate) mod connection_health;
pub(crate) mod errors;
pub(crate) mod isolation;
pub(crate) mod pooler_parameter;
pub(crate) mod settings;
pub(crate) mod statements;
