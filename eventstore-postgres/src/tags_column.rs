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
        let mut reader = ArrayReader(value.as_bytes()?);
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
        let tags = (0..count)
            .map(|_| {
                let text = reader.element()?;
                Tag::parse(text).map_err(BoxDynError::from)
            })
            .collect::<Result<Tags, _>>()?;
        Ok(TagsColumn(tags))
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

    #[test]
    fn tags_round_trip_with_colons_in_values() {
        let tags = Tags::from_pairs([("order", "o-1:eu"), ("k", "")]);
        assert_eq!(from_texts(&to_texts(&tags)).unwrap(), tags);
        assert!(from_texts(&["no colon".to_owned()]).is_err());
    }
}
