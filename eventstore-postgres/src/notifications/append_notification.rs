//! What an append sends with `pg_notify`: the channel, the SQL that builds the JSON payload
//! from the last inserted row, and how that payload decodes into an [`AppendHint`].

use eventstore_api::{AppendHint, EventId, EventReference, EventStreamId};
use serde::Deserialize;
use uuid::Uuid;

/// The channel's name after the storage's prefix.
pub(crate) const CHANNEL_SUFFIX: &str = "appends";

/// The payload of the row `last` (with `id`, `position` and `tx` columns) appended to the
/// stream bound as `context` and `purpose`, as an SQL expression.
///
/// Always below PostgreSQL's 8000-byte payload limit: names are at most 512 bytes, and JSON
/// writes no byte as more than six characters.
pub(crate) fn payload_sql(context: &str, purpose: &str, last: &str) -> String {
    format!(
        "json_build_object('c', {context}::text, 'p', {purpose}::text, 'id', {last}.id, \
         'pos', {last}.position, 'tx', {last}.tx::text)::text"
    )
}

/// The payload as [`payload_sql`] builds it.
#[derive(Debug, Deserialize)]
struct Payload {
    c: String,
    p: String,
    id: Uuid,
    pos: u64,
    tx: String,
}

/// Decodes one payload.
///
/// # Errors
/// When `payload` is not what [`payload_sql`] builds (e.g. a schema of another version).
pub(crate) fn decode(payload: &str) -> Result<AppendHint, String> {
    let payload: Payload = serde_json::from_str(payload).map_err(|e| e.to_string())?;
    let tx = payload
        .tx
        .parse()
        .map_err(|_| format!("transaction id {:?} is not a u64", payload.tx))?;
    Ok(AppendHint {
        stream: EventStreamId::new(payload.c, payload.p),
        last: EventReference {
            id: EventId(payload.id),
            position: payload.pos,
            tx,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_decodes_as_json_build_object_writes_it() {
        let payload = r#"{"c" : "orders\u0001", "p" : "default", "id" : "6f1c0b1e-0d4c-4f7e-9a57-3c1f6f2b8a10", "pos" : 42, "tx" : "18446744073709551615"}"#;
        assert_eq!(
            decode(payload).unwrap(),
            AppendHint {
                stream: EventStreamId::new("orders\u{1}", "default"),
                last: EventReference {
                    id: EventId(Uuid::parse_str("6f1c0b1e-0d4c-4f7e-9a57-3c1f6f2b8a10").unwrap()),
                    position: 42,
                    tx: u64::MAX,
                },
            }
        );
    }

    #[test]
    fn anything_else_is_refused() {
        for payload in [
            "",
            "appended",
            r#"{"c" : "o", "p" : "d", "id" : "not a uuid", "pos" : 1, "tx" : "1"}"#,
            r#"{"c" : "o", "p" : "d", "id" : "6f1c0b1e-0d4c-4f7e-9a57-3c1f6f2b8a10", "pos" : -1, "tx" : "1"}"#,
            r#"{"c" : "o", "p" : "d", "id" : "6f1c0b1e-0d4c-4f7e-9a57-3c1f6f2b8a10", "pos" : 1, "tx" : "x"}"#,
            r#"{"c" : "o", "id" : "6f1c0b1e-0d4c-4f7e-9a57-3c1f6f2b8a10", "pos" : 1, "tx" : "1"}"#,
        ] {
            assert!(decode(payload).is_err(), "{payload}");
        }
    }
}
