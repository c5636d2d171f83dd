//! Interning: each distinct stream, type and tag is stored once and referred to by a number.

use std::collections::HashMap;

/// Strings numbered in the order first seen. Lookups take `&str`, so a miss or a hit costs no
/// allocation.
#[derive(Debug, Default)]
pub(crate) struct Names {
    ids: HashMap<Box<str>, u32>,
}

impl Names {
    /// The number of `name`, if it was seen.
    pub(crate) fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// The number of `name`, numbering it if new.
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        // Memory runs out first: 2^32 names take well over 100 GiB of map entries.
        #[allow(clippy::expect_used)]
        let id = u32::try_from(self.ids.len()).expect("fewer than 2^32 distinct names");
        self.ids.insert(name.into(), id);
        id
    }
}

/// The text a tag is interned under: `key:value` (keys never contain `:`).
pub(crate) fn tag_name(buffer: &mut String, key: &str, value: &str) {
    buffer.clear();
    buffer.push_str(key);
    buffer.push(':');
    buffer.push_str(value);
}

/// The text a concrete stream is interned under: `context NUL purpose` (names never hold NUL).
pub(crate) fn stream_name(buffer: &mut String, context: &str, purpose: &str) {
    buffer.clear();
    buffer.push_str(context);
    buffer.push('\0');
    buffer.push_str(purpose);
}
