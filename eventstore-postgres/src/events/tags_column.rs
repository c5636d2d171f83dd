//! Tags as stored in a `text[]` column: one `key:value` text per tag.

use eventstore_api::{Tag, Tags};
use sqlx::decode::Decode;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Postgres, Type};

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

/// Tags decoded straight from a `text[]` column's binary array: each tag's key and value
/// are copied once out of the row, with no `String` per element in between.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TagsColumn(pub(crate) Tags);

impl Type<Postgres> for TagsColumn {
    fn type_info() -> PgTypeInfo {
        <Vec<String> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Vec<String> as Type<Postgres>>::compatible(ty)
    }
}

impl Decode<'_, Postgres> for TagsColumn {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        if value.format() == PgValueFormat::Text {
            let texts = <Vec<String> as Decode<Postgres>>::decode(value)?;
            return Ok(TagsColumn(from_texts(&texts)?));
        }
        decode_binary(value.as_bytes()?).map(TagsColumn)
    }
}

/// Tags from a `text[]` column's binary array.
fn decode_binary(bytes: &[u8]) -> Result<Tags, BoxDynError> {
    let mut reader = ArrayReader(bytes);
    let dimensions = reader.int()?;
    let _has_nulls = reader.int()?;
    let _element_type = reader.int()?;
    let count = match dimensions {
        0 => 0,
        1 => {
            let length = reader.int()?;
            let _lower_bound = reader.int()?;
            usize::try_from(length).map_err(|_| format!("a tags array of length {length}"))?
        }
        _ => return Err(format!("a tags array of {dimensions} dimensions").into()),
    };
    (0..count)
        .map(|_| {
            let text = reader.element()?;
            Tag::parse(text).map_err(BoxDynError::from)
        })
        .collect()
}

/// The tags columns of a read's rows, decoded one after the other: a row whose column holds
/// the bytes of the row before shares that row's tags instead of decoding them again. The
/// events of an entity, or of a tag, read in order, mostly carry the same tags; decoding
/// them anew cost three allocations an event.
#[derive(Debug, Default)]
pub(crate) struct RepeatedTags {
    /// The binary column of the row before (empty before the first: no binary array is).
    bytes: Vec<u8>,
    tags: Tags,
}

impl RepeatedTags {
    /// The tags of the next row's column.
    pub(crate) fn decode(&mut self, value: PgValueRef<'_>) -> Result<Tags, BoxDynError> {
        if value.format() == PgValueFormat::Text {
            return TagsColumn::decode(value).map(|TagsColumn(tags)| tags);
        }
        self.decode_binary(value.as_bytes()?)
    }

    /// The tags of the next row's column, given as its binary array.
    fn decode_binary(&mut self, bytes: &[u8]) -> Result<Tags, BoxDynError> {
        if bytes != self.bytes.as_slice() {
            self.tags = decode_binary(bytes)?;
            self.bytes.clear();
            self.bytes.extend_from_slice(bytes);
        }
        Ok(self.tags.clone())
    }
}

/// Reads PostgreSQL's binary array format: big-endian 4-byte integers, and elements each
/// preceded by their length.
struct ArrayReader<'r>(&'r [u8]);

impl<'r> ArrayReader<'r> {
    fn int(&mut self) -> Result<i32, BoxDynError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<4>()
            .ok_or("a tags array cut short")?;
        self.0 = rest;
        Ok(i32::from_be_bytes(*head))
    }

    fn element(&mut self) -> Result<&'r str, BoxDynError> {
        let length = self.int()?;
        let length = usize::try_from(length).map_err(|_| "a NULL tag")?;
        if self.0.len() < length {
            return Err("a tags array cut short".into());
        }
        let (text, rest) = self.0.split_at(length);
        self.0 = rest;
        Ok(std::str::from_utf8(text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `texts` as PostgreSQL sends a `text[]` in binary.
    fn binary_array(texts: &[&str]) -> Vec<u8> {
        let mut bytes = Vec::new();
        let header: [i32; 5] = [1, 0, 25, texts.len() as i32, 1];
        for int in header {
            bytes.extend_from_slice(&int.to_be_bytes());
        }
        for text in texts {
            bytes.extend_from_slice(&(text.len() as i32).to_be_bytes());
            bytes.extend_from_slice(text.as_bytes());
        }
        bytes
    }

    #[test]
    fn rows_with_the_same_tags_share_them_and_other_tags_are_decoded_anew() {
        let mut repeated = RepeatedTags::default();
        let first = repeated
            .decode_binary(&binary_array(&["order:o-1", "region:eu"]))
            .unwrap();
        let second = repeated
            .decode_binary(&binary_array(&["order:o-1", "region:eu"]))
            .unwrap();
        assert_eq!(
            first,
            Tags::from_pairs([("order", "o-1"), ("region", "eu")])
        );
        assert_eq!(second, first);
        let shared =
            |a: &Tags, b: &Tags| std::ptr::eq(a.iter().next().unwrap(), b.iter().next().unwrap());
        assert!(
            shared(&first, &second),
            "the second row decoded its tags again"
        );

        let other = repeated
            .decode_binary(&binary_array(&["order:o-2"]))
            .unwrap();
        assert_eq!(other, Tags::from_pairs([("order", "o-2")]));
        let none = repeated.decode_binary(&binary_array(&[])).unwrap();
        assert_eq!(none, Tags::none());
        let again = repeated
            .decode_binary(&binary_array(&["order:o-1", "region:eu"]))
            .unwrap();
        assert_eq!(again, first);
        assert!(!shared(&again, &first), "tags two rows back are not kept");
    }

    #[test]
    fn a_corrupt_column_after_good_ones_is_an_error_not_the_tags_before() {
        let mut repeated = RepeatedTags::default();
        repeated
            .decode_binary(&binary_array(&["order:o-1"]))
            .unwrap();
        let error = repeated
            .decode_binary(&binary_array(&["no colon"]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no colon"), "{error}");
        let after = repeated
            .decode_binary(&binary_array(&["order:o-1"]))
            .unwrap();
        assert_eq!(after, Tags::from_pairs([("order", "o-1")]));
    }

    #[test]
    fn tags_round_trip_with_colons_in_values() {
        let tags = Tags::from_pairs([("order", "o-1:eu"), ("k", "")]);
        assert_eq!(from_texts(&to_texts(&tags)).unwrap(), tags);
        assert!(from_texts(&["no colon".to_owned()]).is_err());
    }
}
