//! Demonstrations of leader-elected projectors; see `examples/`.
