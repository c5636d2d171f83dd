//! Benchmarks of the file backend (written next).

fn main() {}
