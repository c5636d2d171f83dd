//! The conformance kit: scenarios every `EventStorage` backend runs against itself.
//!
//! (The guide for backend authors is written below once the kit is complete.)

mod factory;

pub use factory::StorageFactory;
