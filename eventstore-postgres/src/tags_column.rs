//! Tags as stored in a `text[]` column: one `key:value` text per tag.

use eventstore_api::{Tag, Tags};

/// The texts to store for `tags`.
pub(crate) fn to_texts(tags: &Tags) -> Vec<String> {
    tags.iter().map(ToString::to_string).collect()
}

/// The tags stored as `texts`; a text without a `:` is a corrupt row.
pub(crate) fn from_texts(texts: &[String]) -> Result<Tags, sqlx::Error> {
    texts
        .iter()
        .map(|text| Tag::parse(text))
        .collect::<Result<Tags, _>>()
        .map_err(|error| sqlx::Error::Decode(Box::new(error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_with_colons_in_values() {
        let tags = Tags::from_pairs([("order", "o-1:eu"), ("k", "")]);
        assert_eq!(from_texts(&to_texts(&tags)).unwrap(), tags);
        assert!(from_texts(&["no colon".to_owned()]).is_err());
    }
}
