//! Lease and event benchmarks against PostgreSQL (written below).
fn main() {}
