//! The idempotency rule of [`EventStorage::append`](crate::EventStorage::append), decided in
//! one place for every backend.
//!
//! A backend looks up the events of the stream stored under the batch's keys, calls
//! [`judge`], and acts on the answer: append the batch ([`Idempotency::New`]), answer the
//! stored events without writing ([`Idempotency::Retry`]), or refuse with the error.

use std::collections::HashMap;

use serde_json::Value;

use crate::{EventStorageError, EventStreamId, EventToStore, StoredEvent};

/// What a batch is, judged by its idempotency keys against what its stream stores.
#[derive(Debug, Clone, PartialEq)]
pub enum Idempotency {
    /// No key of the batch is stored: append it (its criteria are checked as usual).
    New,
    /// Every event carries a key stored with the same event: a retry. The stored events, in
    /// the order of the batch, are the answer; nothing is written and the criteria are not
    /// checked again (the first attempt was).
    Retry(Vec<StoredEvent>),
}

/// The keys of `events` that a backend must look up in the stream before calling [`judge`].
pub fn keys(events: &[EventToStore]) -> impl Iterator<Item = &str> {
    events
        .iter()
        .filter_map(|event| event.idempotency_key.as_deref())
}

/// Judges an append of `events` to `stream`, given `stored`: the events of `stream` stored
/// under any of the batch's [`keys`] (in any order; events under other keys are ignored).
///
/// Same key and same event (type, payload and tags) for every event of the batch is a retry;
/// a stored key with a different event, or stored keys mixed with new keys or keyless
/// events, is a conflict.
///
/// # Errors
/// [`EventStorageError::IdempotencyConflict`] naming the stored, new and changed keys.
pub fn judge(
    stream: &EventStreamId,
    events: &[EventToStore],
    stored: &[StoredEvent],
) -> Result<Idempotency, EventStorageError> {
    if stored.is_empty() {
        return Ok(Idempotency::New);
    }
    let by_key: HashMap<&str, &StoredEvent> = stored
        .iter()
        .filter_map(|event| Some((event.idempotency_key.as_deref()?, event)))
        .collect();
    let mut retried = Vec::with_capacity(events.len());
    let (mut stored_keys, mut new_keys, mut changed_keys) = (Vec::new(), Vec::new(), Vec::new());
    let mut keyless = false;
    for event in events {
        let Some(key) = event.idempotency_key.as_deref() else {
            keyless = true;
            continue;
        };
        match by_key.get(key) {
            Some(&earlier) => {
                stored_keys.push(key.to_owned());
                if is_same_event(event, earlier) {
                    retried.push(earlier.clone());
                } else {
                    changed_keys.push(key.to_owned());
                }
            }
            None => new_keys.push(key.to_owned()),
        }
    }
    if stored_keys.is_empty() {
        return Ok(Idempotency::New);
    }
    if keyless || !new_keys.is_empty() || !changed_keys.is_empty() {
        return Err(EventStorageError::IdempotencyConflict {
            stream: stream.to_string(),
            stored: stored_keys,
            new: new_keys,
            changed: changed_keys,
        });
    }
    Ok(Idempotency::Retry(retried))
}

/// Whether `stored` is what storing `event` would have stored: the same type, payload and tags.
fn is_same_event(event: &EventToStore, stored: &StoredEvent) -> bool {
    event.event_type == stored.event_type
        && same_payload(&event.payload, &stored.payload)
        && event.tags == stored.tags
}

/// Whether two payloads are equal, numbers compared by value: a storage that keeps payloads
/// as `jsonb` gives the float `1.5e16` back as the integer `15000000000000000`, the same
/// number. Payloads are validated before they are judged, so the recursion is shallow.
fn same_payload(sent: &Value, stored: &Value) -> bool {
    match (sent, stored) {
        (Value::Number(sent), Value::Number(stored)) => {
            match (exact_integer(sent), exact_integer(stored)) {
                (Some(sent), Some(stored)) => sent == stored,
                (None, None) => sent.as_f64() == stored.as_f64(),
                _ => false,
            }
        }
        (Value::Array(sent), Value::Array(stored)) => {
            sent.len() == stored.len() && sent.iter().zip(stored).all(|(a, b)| same_payload(a, b))
        }
        (Value::Object(sent), Value::Object(stored)) => {
            sent.len() == stored.len()
                && sent
                    .iter()
                    .all(|(key, a)| stored.get(key).is_some_and(|b| same_payload(a, b)))
        }
        _ => sent == stored,
    }
}

/// The integer `number` is exactly, a float such as `1.5e16` included; `None` for a fraction,
/// or a float too large to hold as one (compared as floats, then).
fn exact_integer(number: &serde_json::Number) -> Option<i128> {
    if let Some(integer) = number.as_i64() {
        return Some(integer.into());
    }
    if let Some(integer) = number.as_u64() {
        return Some(integer.into());
    }
    number
        .as_f64()
        .filter(|float| float.fract() == 0.0 && float.abs() < 1e38)
        .map(|float| float as i128)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{EventReference, Tags};

    fn stream() -> EventStreamId {
        EventStreamId::for_context("orders")
    }

    fn keyed(key: &str, amount: i64) -> EventToStore {
        EventToStore::new("Placed", json!({ "amount": amount })).with_idempotency_key(key)
    }

    fn stored(event: &EventToStore, position: u64) -> StoredEvent {
        StoredEvent {
            stream: stream(),
            event_type: event.event_type.clone(),
            reference: EventReference::at(crate::EventId::new(), position),
            payload: event.payload.clone(),
            tags: event.tags.clone(),
            timestamp: chrono::Utc::now(),
            idempotency_key: event.idempotency_key.clone(),
        }
    }

    fn conflict_keys(result: Result<Idempotency, EventStorageError>) -> [Vec<String>; 3] {
        match result {
            Err(EventStorageError::IdempotencyConflict {
                stored,
                new,
                changed,
                ..
            }) => [stored, new, changed],
            other => panic!("expected IdempotencyConflict, got {other:?}"),
        }
    }

    #[test]
    fn a_batch_whose_keys_are_not_stored_is_new() {
        let batch = [keyed("a", 1), EventToStore::new("Noted", json!(null))];
        assert_eq!(judge(&stream(), &batch, &[]).unwrap(), Idempotency::New);
        assert_eq!(keys(&batch).collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn the_same_events_under_stored_keys_are_a_retry_answered_in_batch_order() {
        let (a, b) = (keyed("a", 1), keyed("b", 2));
        let earlier = [stored(&a, 1), stored(&b, 2)];
        let retried = judge(&stream(), &[b, a], &earlier).unwrap();
        assert_eq!(
            retried,
            Idempotency::Retry(vec![earlier[1].clone(), earlier[0].clone()])
        );
    }

    #[test]
    fn numbers_a_storage_wrote_in_another_form_are_the_same_event() {
        // As `jsonb` gives them back: an integral float as an integer, exponents written out.
        let sent = EventToStore::new("Placed", json!({ "at": 1.5e16, "n": [2.5, 1e300] }))
            .with_idempotency_key("a");
        let mut as_stored = stored(&sent, 1);
        as_stored.payload = serde_json::from_str(&format!(
            r#"{{"at": 15000000000000000, "n": [2.50, 1{}]}}"#,
            "0".repeat(300)
        ))
        .unwrap();
        let retried = judge(&stream(), std::slice::from_ref(&sent), &[as_stored.clone()]);
        assert_eq!(
            retried.unwrap(),
            Idempotency::Retry(vec![as_stored.clone()])
        );

        // Another value is another event, and an integer is never a nearby float.
        for other in [
            json!({ "at": 1.5e16, "n": [2.5, 1e299] }),
            json!({ "at": 15000000000000001_u64, "n": [2.5, 1e300] }),
        ] {
            let mut changed = as_stored.clone();
            changed.payload = other;
            assert!(judge(&stream(), std::slice::from_ref(&sent), &[changed]).is_err());
        }
    }

    #[test]
    fn a_stored_key_with_another_event_is_a_conflict_naming_the_key() {
        let earlier = [stored(&keyed("a", 1), 1)];
        let [stored_keys, new, changed] =
            conflict_keys(judge(&stream(), &[keyed("a", 2)], &earlier));
        assert_eq!(
            (stored_keys, new, changed),
            (vec!["a".into()], vec![], vec!["a".into()])
        );

        let retagged = keyed("a", 1).with_tags(Tags::from_pairs([("k", "v")]));
        let [_, _, changed] = conflict_keys(judge(&stream(), &[retagged], &earlier));
        assert_eq!(changed, ["a"]);
    }

    #[test]
    fn stored_keys_mixed_with_new_keys_or_keyless_events_are_a_conflict() {
        let a = keyed("a", 1);
        let earlier = [stored(&a, 1)];
        let [stored_keys, new, _] =
            conflict_keys(judge(&stream(), &[a.clone(), keyed("b", 2)], &earlier));
        assert_eq!((stored_keys, new), (vec!["a".into()], vec!["b".into()]));

        let keyless = EventToStore::new("Noted", json!(null));
        let error = judge(&stream(), &[a, keyless], &earlier).unwrap_err();
        assert!(error.to_string().contains("without a key"), "{error}");
    }
}
