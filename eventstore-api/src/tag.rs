//! Tags: `key:value` labels that DCB queries select events by.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::EventStorageError;

/// One `key:value` label on an event or a bookmark.
///
/// The key may not contain `:`; the value may (only the first `:` separates them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Tag {
    /// What the tag is about, e.g. `customer`.
    pub key: String,
    /// Which one, e.g. `c-42`.
    pub value: String,
}

impl Tag {
    /// A tag from its key and value. A storage checks it when it is given the tag, to write
    /// or in a filter.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }

    /// Parses `key:value`, splitting at the first `:`.
    ///
    /// # Errors
    /// [`EventStorageError::InvalidInput`] when there is no `:` or the key is empty.
    ///
    /// # Examples
    /// ```
    /// let tag = eventstore_api::Tag::parse("order:o-1:eu").unwrap();
    /// assert_eq!((tag.key.as_str(), tag.value.as_str()), ("order", "o-1:eu"));
    /// ```
    pub fn parse(text: &str) -> Result<Self, EventStorageError> {
        match text.split_once(':') {
            Some((key, value)) if !key.is_empty() => Ok(Tag::new(key, value)),
            _ => Err(EventStorageError::invalid(
                "tag",
                text,
                "a tag is written key:value with a non-empty key",
            )),
        }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.value)
    }
}

impl TryFrom<String> for Tag {
    type Error = EventStorageError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Tag::parse(&text)
    }
}

impl From<Tag> for String {
    fn from(tag: Tag) -> String {
        tag.to_string()
    }
}

/// A set of tags. Order and duplicates do not matter.
///
/// Held as a sorted slice without duplicates, shared between clones: events carry a few
/// tags, a tree would allocate a node of eleven slots for one, and the events of an entity
/// read one after the other carry the same set, which a read then decodes once and shares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tags(Arc<[Tag]>);

impl Default for Tags {
    fn default() -> Self {
        // One empty set for all: an event without tags allocates nothing for them.
        static NONE: OnceLock<Arc<[Tag]>> = OnceLock::new();
        Tags(Arc::clone(NONE.get_or_init(|| Arc::from([]))))
    }
}

impl Tags {
    /// No tags.
    pub fn none() -> Self {
        Tags::default()
    }

    /// Tags from `(key, value)` pairs.
    ///
    /// # Examples
    /// ```
    /// let tags = eventstore_api::Tags::from_pairs([("customer", "c-1"), ("region", "eu")]);
    /// assert_eq!(tags.len(), 2);
    /// ```
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        pairs.into_iter().map(|(k, v)| Tag::new(k, v)).collect()
    }

    /// These tags plus `tag`.
    pub fn with(self, tag: Tag) -> Self {
        match self.0.binary_search(&tag) {
            Ok(_) => self,
            Err(at) => {
                let mut tags = self.0.to_vec();
                tags.insert(at, tag);
                Tags(tags.into())
            }
        }
    }

    /// Whether every tag of `required` is in this set.
    pub fn contains_all(&self, required: &Tags) -> bool {
        required.0.iter().all(|tag| self.contains(tag))
    }

    /// Whether `tag` is in this set.
    pub fn contains(&self, tag: &Tag) -> bool {
        self.0.binary_search(tag).is_ok()
    }

    /// The tags, in key-then-value order.
    pub fn iter(&self) -> impl Iterator<Item = &Tag> + '_ {
        self.0.iter()
    }

    /// How many tags there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<Tag> for Tags {
    fn from_iter<I: IntoIterator<Item = Tag>>(iter: I) -> Self {
        let mut tags: Vec<Tag> = iter.into_iter().collect();
        if tags.is_empty() {
            return Tags::none();
        }
        tags.sort_unstable();
        tags.dedup();
        Tags(tags.into())
    }
}

impl Serialize for Tags {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Tags {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Vec::<Tag>::deserialize(deserializer)?.into_iter().collect())
    }
}

impl IntoIterator for Tags {
    type Item = Tag;
    type IntoIter = std::vec::IntoIter<Tag>;
    fn into_iter(self) -> Self::IntoIter {
        // Owned tags out of a shared set: each is cloned.
        let tags: Vec<Tag> = self.0.iter().cloned().collect();
        tags.into_iter()
    }
}

impl<'a> IntoIterator for &'a Tags {
    type Item = &'a Tag;
    type IntoIter = std::slice::Iter<'a, Tag>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Display for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for tag in self.0.iter() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{tag}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_splits_at_the_first_colon_and_refuses_a_missing_key() {
        assert_eq!(Tag::parse("a:b").unwrap(), Tag::new("a", "b"));
        assert_eq!(Tag::parse("a:").unwrap(), Tag::new("a", ""));
        assert!(Tag::parse("ab").is_err());
        assert!(Tag::parse(":b").is_err());
    }

    #[test]
    fn tags_serialize_as_key_value_strings() {
        let tags = Tags::from_pairs([("k", "v"), ("a", "b:c")]);
        let json = serde_json::to_string(&tags).unwrap();
        assert_eq!(json, r#"["a:b:c","k:v"]"#);
        assert_eq!(serde_json::from_str::<Tags>(&json).unwrap(), tags);
    }

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let a = Tags::from_pairs([("k", "v"), ("a", "1"), ("k", "v")]);
        let b = Tags::none()
            .with(Tag::new("a", "1"))
            .with(Tag::new("k", "v"));
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert_eq!(a.to_string(), "a:1,k:v");
        let read: Tags = serde_json::from_str(r#"["k:v","a:1","k:v"]"#).unwrap();
        assert_eq!(read, a);
        assert_eq!(b.with(Tag::new("a", "1")), a);
    }

    #[test]
    fn contains_all_is_subset() {
        let tags = Tags::from_pairs([("a", "1"), ("b", "2")]);
        assert!(tags.contains_all(&Tags::from_pairs([("a", "1")])));
        assert!(tags.contains_all(&Tags::none()));
        assert!(!tags.contains_all(&Tags::from_pairs([("a", "2")])));
    }
}
