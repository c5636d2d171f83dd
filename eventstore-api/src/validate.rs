//! Input rules every backend applies the same way, before anything changes.
//!
//! A backend calls these first, so that one input is refused (or accepted) alike everywhere
//! and a refused call changes nothing.

use std::collections::HashSet;
use std::time::Duration;

use crate::{
    AppendCriteria, EventFilter, EventStorageError, EventStreamId, EventToStore, Fence,
    LeaseRequest, Tags,
};

/// The longest name accepted anywhere (lease names, owners, readers, stream parts, event
/// types, tag keys and values, idempotency keys), in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 512;

/// The shortest lease ttl accepted.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// The longest lease ttl accepted (7 days).
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

type Result<T = ()> = std::result::Result<T, EventStorageError>;

/// Checks a name: not blank, no NUL, at most [`MAX_NAME_BYTES`].
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming `field` and the broken rule.
pub fn validate_name(field: &str, name: &str) -> Result {
    if name.trim().is_empty() {
        return Err(EventStorageError::invalid(field, name, "must not be blank"));
    }
    validate_text(field, name)
}

/// Checks a lease selection: a valid name, or a prefix a name may start with (empty allowed).
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming the name or prefix and the broken rule.
pub fn validate_lease_selection(selection: &crate::LeaseSelection) -> Result {
    match selection {
        crate::LeaseSelection::Named(name) => validate_name("lease name", name),
        crate::LeaseSelection::Prefix(prefix) => validate_text("lease name prefix", prefix),
        _ => Ok(()),
    }
}

/// Checks text that may be empty: no NUL, at most [`MAX_NAME_BYTES`].
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming `field` and the broken rule.
pub fn validate_text(field: &str, text: &str) -> Result {
    if text.contains('\0') {
        return Err(EventStorageError::invalid(
            field,
            text,
            "must not contain a NUL character",
        ));
    }
    if text.len() > MAX_NAME_BYTES {
        return Err(EventStorageError::invalid(
            field,
            text,
            format!(
                "is {} bytes long, at most {MAX_NAME_BYTES} are allowed",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a lease request: name and owner are names, `MIN_TTL <= ttl <= MAX_TTL`.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for the first rule broken.
pub fn validate_lease_request(request: &LeaseRequest) -> Result {
    validate_name("lease name", &request.lease_name)?;
    validate_name("lease owner", &request.owner)?;
    validate_ttl(request.ttl)
}

/// The most requests one `request_leases` batch (and names one `release_leases` call) may
/// carry: a larger one is refused with `InvalidInput` before anything is read or written,
/// never served out of memory. Split larger work into batches of at most this many.
pub const MAX_LEASE_BATCH: usize = 1 << 17;

fn validate_batch_size(field: &str, size: usize) -> Result {
    if size > MAX_LEASE_BATCH {
        return Err(EventStorageError::invalid(
            field,
            format!("{size} entries"),
            format!("must hold at most {MAX_LEASE_BATCH} (MAX_LEASE_BATCH); split it"),
        ));
    }
    Ok(())
}

/// Checks every request of a batch, so that one invalid request refuses the whole batch.
///
/// # Errors
/// A batch above [`MAX_LEASE_BATCH`]; else the first request's error, with its index in the
/// batch in the field name.
pub fn validate_lease_requests(requests: &[LeaseRequest]) -> Result {
    validate_batch_size("lease request batch", requests.len())?;
    for (index, request) in requests.iter().enumerate() {
        validate_lease_request(request).map_err(|error| match error {
            EventStorageError::InvalidInput {
                field,
                value,
                problem,
            } => EventStorageError::InvalidInput {
                field: format!("{field} of request {index}"),
                value,
                problem,
            },
            other => other,
        })?;
    }
    Ok(())
}

/// Checks the arguments of `release_lease`.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] when either is not a valid name.
pub fn validate_release(lease_name: &str, owner: &str) -> Result {
    validate_name("lease name", lease_name)?;
    validate_name("lease owner", owner)
}

/// Checks the arguments of `release_leases`: how many, the owner, then every lease name.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for the owner or the first invalid name, with its index.
pub fn validate_releases(lease_names: &[String], owner: &str) -> Result {
    validate_batch_size("lease names", lease_names.len())?;
    validate_name("lease owner", owner)?;
    for (index, lease_name) in lease_names.iter().enumerate() {
        validate_name(&format!("lease name {index}"), lease_name)?;
    }
    Ok(())
}

/// Checks a lease ttl against [`MIN_TTL`] and [`MAX_TTL`].
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming the ttl and the limit.
pub fn validate_ttl(ttl: Duration) -> Result {
    if ttl < MIN_TTL {
        return Err(EventStorageError::invalid(
            "lease ttl",
            format!("{ttl:?}"),
            format!("must be at least {MIN_TTL:?}"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(EventStorageError::invalid(
            "lease ttl",
            format!("{ttl:?}"),
            format!("must be at most {MAX_TTL:?} (7 days)"),
        ));
    }
    Ok(())
}

/// Checks a stream to read: any part given is a name.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for a blank, NUL-holding or over-long part.
pub fn validate_stream(stream: &EventStreamId) -> Result {
    if let Some(context) = &stream.context {
        validate_name("stream context", context)?;
    }
    if let Some(purpose) = &stream.purpose {
        validate_name("stream purpose", purpose)?;
    }
    Ok(())
}

/// Checks a stream to append to: as [`validate_stream`], and no wildcard.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for a wildcard or an invalid part.
pub fn validate_append_stream(stream: &EventStreamId) -> Result {
    if !stream.is_concrete() {
        return Err(EventStorageError::invalid(
            "stream",
            stream.to_string(),
            "cannot append to a wildcard stream; name both context and purpose",
        ));
    }
    validate_stream(stream)
}

/// Checks an append: a concrete stream and a valid batch ([`validate_events`]).
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for the first problem.
pub fn validate_append(stream: &EventStreamId, events: &[EventToStore]) -> Result {
    validate_append_stream(stream)?;
    validate_events(events)
}

/// Checks a query's filter: at most [`MAX_FILTER_ITEMS`] items, every type a name and every
/// tag valid ([`validate_tags`]).
/// An invalid one could match no stored event, or, written `key:value` by a backend, another
/// tag (`a:b` = `c` and `a` = `b:c`), so it is refused rather than answered.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming the filter item and the broken rule.
pub fn validate_filter(filter: &EventFilter) -> Result {
    if filter.items.len() > MAX_FILTER_ITEMS {
        return Err(EventStorageError::invalid(
            "filter",
            format!("{} items", filter.items.len()),
            format!(
                "must have at most {MAX_FILTER_ITEMS} items (a PostgreSQL statement takes at \
                 most 65,535 parameters); read in parts, or match a tag the events share"
            ),
        ));
    }
    for (index, item) in filter.items.iter().enumerate() {
        let in_item = |error: EventStorageError| match error {
            EventStorageError::InvalidInput {
                field,
                value,
                problem,
            } => EventStorageError::InvalidInput {
                field: format!("{field} of filter item {index}"),
                value,
                problem,
            },
            other => other,
        };
        for event_type in item.types.iter().flatten() {
            validate_name("event type", event_type.as_str()).map_err(in_item)?;
        }
        validate_tags(&item.tags).map_err(in_item)?;
    }
    Ok(())
}

/// Checks an append's condition: its filter as [`validate_filter`].
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming what was wrong.
pub fn validate_criteria(criteria: &AppendCriteria) -> Result {
    match &criteria.condition {
        Some(condition) => validate_filter(&condition.filter),
        None => Ok(()),
    }
}

/// Checks a fence: its lease name is a valid lease name.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] when it is not.
pub fn validate_fence(fence: &Fence) -> Result {
    validate_name("fence lease name", &fence.lease_name)
}

/// Checks tags: non-empty keys without `:`, and no NUL or over-long key or value.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming the tag.
pub fn validate_tags(tags: &Tags) -> Result {
    for tag in tags {
        validate_name("tag key", &tag.key)?;
        if tag.key.contains(':') {
            return Err(EventStorageError::invalid(
                "tag key",
                &tag.key,
                "must not contain ':'",
            ));
        }
        validate_text("tag value", &tag.value)?;
    }
    Ok(())
}

/// Checks a bookmark's tags: each valid ([`validate_tags`]), and at most [`MAX_BATCH_BYTES`]
/// in all (keys, values and 8 bytes for each tag's lengths), as a batch's content, so that
/// every backend keeps a bookmark in one piece.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for the first invalid tag, or naming the tags' size.
pub fn validate_bookmark_tags(tags: &Tags) -> Result {
    validate_tags(tags)?;
    let bytes = tags_bytes(tags);
    if bytes > MAX_BATCH_BYTES {
        return Err(EventStorageError::invalid(
            "bookmark tags",
            format!("{} tags of {bytes} bytes", tags.len()),
            format!("must take at most {MAX_BATCH_BYTES} bytes in all (MAX_BATCH_BYTES)"),
        ));
    }
    Ok(())
}

/// What `tags` take as [`MAX_BATCH_BYTES`] counts them: each key and value, and the lengths
/// a storage keeps with them.
fn tags_bytes(tags: &Tags) -> usize {
    tags.iter()
        .map(|tag| TAG_OVERHEAD_BYTES + tag.key.len() + tag.value.len())
        .sum()
}

/// What [`MAX_BATCH_BYTES`] counts for each tag beside its key and value: the lengths of both.
const TAG_OVERHEAD_BYTES: usize = 8;

/// Checks a bookmark reader name.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] when it is not a valid name.
pub fn validate_reader(reader: &str) -> Result {
    validate_name("bookmark reader", reader)
}

/// Checks a batch to append: every event type, tag set, payload and idempotency key, and no
/// idempotency key twice in the batch.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] for the first problem, naming the event's index.
pub fn validate_events(events: &[EventToStore]) -> Result {
    let mut keys = HashSet::new();
    let mut bytes = 0_usize;
    for (index, event) in events.iter().enumerate() {
        let event_bytes = validate_event(event).map_err(|error| match error {
            EventStorageError::InvalidInput {
                field,
                value,
                problem,
            } => EventStorageError::InvalidInput {
                field: format!("{field} of event {index}"),
                value,
                problem,
            },
            other => other,
        })?;
        bytes = bytes.saturating_add(event_bytes);
        if let Some(key) = &event.idempotency_key {
            if !keys.insert(key.as_str()) {
                return Err(EventStorageError::invalid(
                    format!("idempotency key of event {index}"),
                    key,
                    "appears twice in one batch",
                ));
            }
        }
    }
    if bytes > MAX_BATCH_BYTES {
        return Err(too_large(events.len(), bytes, MAX_BATCH_BYTES));
    }
    Ok(())
}

/// The most bytes one batch may take, counted as its content: its event types, tags (with 8
/// bytes each for their lengths) and idempotency keys, its payloads' strings and keys, a few
/// bytes for each other value, and [`EVENT_OVERHEAD_BYTES`] for each event. JSON text may write a string longer than it is
/// (escapes), at most six times; even so, a batch at the limit stays inside what every
/// backend takes in one piece: PostgreSQL 1 GB in one message, the file store 1 GiB in one
/// append.
pub const MAX_BATCH_BYTES: usize = 128 << 20;

/// What [`MAX_BATCH_BYTES`] counts for each event beside its content: what a storage keeps
/// with it (id, position, time, the lengths of its parts).
pub const EVENT_OVERHEAD_BYTES: usize = 64;

/// The refusal of `events`, which take `bytes` as [`MAX_BATCH_BYTES`] counts them, above
/// `limit`.
fn too_large(events: usize, bytes: usize, limit: usize) -> EventStorageError {
    EventStorageError::invalid(
        "events",
        format!("{events} events of {bytes} bytes"),
        format!("must take at most {limit} bytes in one batch (MAX_BATCH_BYTES); split it"),
    )
}

/// Checks one event; the bytes it takes as [`MAX_BATCH_BYTES`] counts them.
fn validate_event(event: &EventToStore) -> Result<usize> {
    validate_name("event type", event.event_type.as_str())?;
    validate_tags(&event.tags)?;
    if let Some(key) = &event.idempotency_key {
        validate_name("idempotency key", key)?;
    }
    let payload_bytes = validated_payload(&event.payload)?;
    let tags = tags_bytes(&event.tags);
    let key = event.idempotency_key.as_ref().map_or(0, String::len);
    Ok(EVENT_OVERHEAD_BYTES + event.event_type.as_str().len() + tags + key + payload_bytes)
}

/// The deepest nesting of arrays and objects a payload may have: the most a JSON parser
/// reads back by default (`serde_json` stops at 128 levels), so that a payload a durable
/// backend stores as text can always be read again.
pub const MAX_PAYLOAD_DEPTH: usize = 127;

/// The most items a filter may have (each `or` adds the other filter's items): every backend
/// answers up to this many, PostgreSQL in one statement, which binds each item's types and
/// tags as parameters of their own.
pub const MAX_FILTER_ITEMS: usize = 10_000;

/// Checks a payload: no NUL character in any string or key (PostgreSQL cannot store one), and
/// arrays and objects nested at most [`MAX_PAYLOAD_DEPTH`] deep. Walks the payload without
/// recursion, so that no payload can exhaust the stack here.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming the string that holds the NUL, or the depth.
pub fn validate_payload(payload: &serde_json::Value) -> Result {
    validated_payload(payload).map(|_| ())
}

/// As [`validate_payload`]; the bytes the payload takes as [`MAX_BATCH_BYTES`] counts them:
/// as many as its JSON text, or more, unless its strings hold characters JSON escapes.
fn validated_payload(payload: &serde_json::Value) -> Result<usize> {
    use serde_json::Value;
    /// The longest number `serde_json` writes: `-1.7976931348623157e308`.
    const LONGEST_NUMBER: usize = 24;
    let nul = |text: &str| {
        if text.contains('\0') {
            Err(EventStorageError::invalid(
                "payload",
                text,
                "must not contain a NUL character in any string or key",
            ))
        } else {
            Ok(())
        }
    };
    // Each value with the number of arrays and objects around it.
    let mut pending = vec![(payload, 0_usize)];
    let mut bytes = 0_usize;
    while let Some((value, around)) = pending.pop() {
        let depth = match value {
            Value::Array(_) | Value::Object(_) => around + 1,
            _ => around,
        };
        if depth > MAX_PAYLOAD_DEPTH {
            return Err(EventStorageError::invalid(
                "payload",
                format!("arrays and objects nested more than {MAX_PAYLOAD_DEPTH} deep"),
                format!(
                    "must nest arrays and objects at most {MAX_PAYLOAD_DEPTH} deep, so that \
                     it can be read back"
                ),
            ));
        }
        // A string's quotes, an item's comma and brackets, a key's colon: a few bytes each.
        let value_bytes = match value {
            Value::String(text) => {
                nul(text)?;
                2 + text.len()
            }
            Value::Array(items) => {
                pending.extend(items.iter().map(|item| (item, depth)));
                2 + items.len()
            }
            Value::Object(fields) => {
                let mut key_bytes = 2;
                for (key, field) in fields {
                    nul(key)?;
                    key_bytes += 4 + key.len();
                    pending.push((field, depth));
                }
                key_bytes
            }
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => LONGEST_NUMBER,
        };
        bytes = bytes.saturating_add(value_bytes);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assert_invalid(result: Result, needle: &str) {
        match result {
            Err(EventStorageError::InvalidInput { .. }) => {
                let message = result.unwrap_err().to_string();
                assert!(
                    message.contains(needle),
                    "{message:?} should mention {needle:?}"
                );
            }
            other => panic!("expected InvalidInput mentioning {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_payload_counts_as_much_as_its_json_text_and_at_least_a_sixth_of_it() {
        let payloads = [
            json!(null),
            json!(true),
            json!(-1.797_693_134_862_315_7e308),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(""),
            json!("plain text, é and ✓"),
            json!({"": [], "a": {"b": [1, 2.5, "x"]}, "c": null}),
            json!([[[]], {}, [{"k": "v"}]]),
        ];
        for payload in payloads {
            let text = serde_json::to_string(&payload).unwrap().len();
            let counted = validated_payload(&payload).unwrap();
            assert!(
                counted >= text,
                "{payload}: {counted} counted, below {text}"
            );
        }
        // Every character escaped, at six bytes each.
        let escaped = json!({ "\u{1}\u{2}": "\u{3}\u{1f}\u{7}" });
        let text = serde_json::to_string(&escaped).unwrap().len();
        let counted = validated_payload(&escaped).unwrap();
        assert!(
            counted < text && 6 * counted >= text,
            "{counted} counted for {text}"
        );
    }

    #[test]
    fn a_bookmarks_tags_are_refused_above_the_size_limit_naming_it() {
        let tag = |n: usize| (format!("{n:0>512}"), "v".repeat(512));
        let at_limit = Tags::from_pairs((0..MAX_BATCH_BYTES / 1032).map(tag));
        assert!(validate_bookmark_tags(&at_limit).is_ok());
        let above = Tags::from_pairs((0..=MAX_BATCH_BYTES / 1032).map(tag));
        assert_invalid(validate_bookmark_tags(&above), "MAX_BATCH_BYTES");
        assert_invalid(
            validate_bookmark_tags(&Tags::from_pairs([("a:b", "c")])),
            "must not contain ':'",
        );
    }

    #[test]
    fn a_batch_is_measured_by_its_content_and_refused_above_the_limit_naming_it() {
        let event = EventToStore::new("Placed", json!({"n": 1}))
            .with_tags(Tags::from_pairs([("order", "7")]))
            .with_idempotency_key("k1");
        // 64 + "Placed" + "order" "7" and their lengths + "k1" + the object's braces, the
        // key and a number.
        let bytes = EVENT_OVERHEAD_BYTES + 6 + (6 + 8) + 2 + (2 + 4 + 1 + 24);
        assert_eq!(validate_event(&event).unwrap(), bytes);
        let refusal = too_large(2, 2 * bytes, 2 * bytes - 1).to_string();
        assert!(
            refusal.contains(&format!("2 events of {} bytes", 2 * bytes))
                && refusal.contains(&format!("at most {} bytes", 2 * bytes - 1))
                && refusal.contains("MAX_BATCH_BYTES"),
            "{refusal}"
        );
        let large = EventToStore::new("Large", json!("x".repeat(MAX_BATCH_BYTES)));
        assert_invalid(validate_events(&[large]), "MAX_BATCH_BYTES");
    }

    #[test]
    fn lease_requests_are_checked_for_every_rule() {
        let ok = LeaseRequest::new("l", "o", 0, Duration::from_secs(1));
        assert!(validate_lease_request(&ok).is_ok());
        let with = |f: fn(&mut LeaseRequest)| {
            let mut request = ok.clone();
            f(&mut request);
            validate_lease_request(&request)
        };
        assert_invalid(with(|r| r.lease_name = " ".into()), "blank");
        assert_invalid(with(|r| r.owner = "a\0".into()), "NUL");
        assert_invalid(with(|r| r.owner = "x".repeat(513)), "513 bytes");
        assert_invalid(with(|r| r.ttl = Duration::from_micros(999)), "at least 1ms");
        assert_invalid(
            with(|r| r.ttl = MAX_TTL + Duration::from_millis(1)),
            "7 days",
        );
        assert!(with(|r| r.owner = "é".repeat(256)).is_ok());
    }

    #[test]
    fn a_batch_names_the_index_of_the_invalid_request() {
        let ok = LeaseRequest::new("l", "o", 0, Duration::from_secs(1));
        let bad = LeaseRequest::new("", "o", 0, Duration::from_secs(1));
        assert_invalid(validate_lease_requests(&[ok, bad]), "of request 1");
    }

    #[test]
    fn events_are_checked_for_types_tags_payloads_and_duplicate_keys() {
        let ok = EventToStore::new("A", json!({"k": "v"}));
        assert!(validate_events(std::slice::from_ref(&ok)).is_ok());
        assert_invalid(
            validate_events(&[EventToStore::new("", json!(1))]),
            "event type of event 0",
        );
        assert_invalid(
            validate_events(&[ok.clone(), EventToStore::new("A", json!({"a\0": 1}))]),
            "payload of event 1",
        );
        assert_invalid(
            validate_events(&[ok.clone().with_tags(Tags::from_pairs([("a:b", "c")]))]),
            "tag key",
        );
        assert_invalid(
            validate_events(&[
                ok.clone().with_idempotency_key("k"),
                ok.clone().with_idempotency_key("k"),
            ]),
            "twice",
        );
    }

    /// `depth` arrays and objects, alternating, around a number.
    fn nested(depth: usize) -> serde_json::Value {
        (0..depth).fold(json!(1), |inside, level| match level % 2 {
            0 => json!([inside]),
            _ => json!({ "in": inside }),
        })
    }

    #[test]
    fn a_payload_nested_as_deep_as_a_parser_reads_back_is_kept_and_no_deeper() {
        let deepest = nested(MAX_PAYLOAD_DEPTH);
        assert!(validate_payload(&deepest).is_ok());
        let text = serde_json::to_string(&deepest).unwrap();
        let read: serde_json::Value = serde_json::from_str(&text).expect("reads back");
        assert_eq!(read, deepest);

        let deeper = nested(MAX_PAYLOAD_DEPTH + 1);
        assert!(serde_json::from_str::<serde_json::Value>(
            &serde_json::to_string(&deeper).unwrap()
        )
        .is_err());
        assert_invalid(validate_payload(&deeper), "at most 127 deep");
        // Width is no depth.
        let wide = json!({ "a": vec![nested(100); 50], "b": nested(126) });
        assert!(validate_payload(&wide).is_ok());
    }

    #[test]
    fn appending_to_a_wildcard_stream_is_refused() {
        assert_invalid(validate_append_stream(&EventStreamId::any()), "wildcard");
        assert_invalid(
            validate_append_stream(&EventStreamId::for_context("c").any_purpose()),
            "wildcard",
        );
        assert!(validate_append_stream(&EventStreamId::for_context("c")).is_ok());
        assert_invalid(
            validate_stream(&EventStreamId::new("", "p")),
            "stream context",
        );
    }
}
