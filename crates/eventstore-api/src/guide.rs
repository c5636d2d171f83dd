//! # Leader-elected projectors
