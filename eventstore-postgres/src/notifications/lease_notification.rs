//! What the lease functions of `sql/schema.sql` send with `pg_notify`: the channel and the
//! JSON payload of one lease change.

use eventstore_api::{FencingToken, LeaseChange, LeaseChangeKind};
use serde::Deserialize;

/// The channel's name after the storage's prefix, as `schema.sql` spells it.
pub(crate) const CHANNEL_SUFFIX: &str = "lease_changes";

/// One notification, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseNotification {
    /// A change to one lease.
    Changed(LeaseChange),
    /// Something changed that did not fit in a notification.
    Missed,
}

/// The payload as the lease functions build it with `json_build_object`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Payload {
    Released {
        lease: String,
        owner: String,
        token: u64,
        successor: Option<String>,
    },
    Acquired {
        lease: String,
        owner: String,
        token: u64,
        after_expiry: bool,
    },
    StepDownRequested {
        lease: String,
        holder: String,
        token: u64,
        contender: String,
    },
    ContenderJoined {
        lease: String,
        owner: String,
        priority: i64,
    },
    ContenderLeft {
        lease: String,
        owner: String,
    },
    Missed,
}

/// Decodes one payload.
///
/// # Errors
/// When `payload` is not what the lease functions send (e.g. a schema of another version).
pub(crate) fn decode(payload: &str) -> Result<LeaseNotification, serde_json::Error> {
    let change = |lease_name: String, kind: LeaseChangeKind| {
        LeaseNotification::Changed(LeaseChange { lease_name, kind })
    };
    Ok(match serde_json::from_str(payload)? {
        Payload::Released {
            lease,
            owner,
            token,
            successor,
        } => change(
            lease,
            LeaseChangeKind::Released {
                owner,
                token: FencingToken(token),
                successor,
            },
        ),
        Payload::Acquired {
            lease,
            owner,
            token,
            after_expiry,
        } => change(
            lease,
            LeaseChangeKind::Acquired {
                owner,
                token: FencingToken(token),
                after_expiry,
            },
        ),
        Payload::StepDownRequested {
            lease,
            holder,
            token,
            contender,
        } => change(
            lease,
            LeaseChangeKind::StepDownRequested {
                holder,
                token: FencingToken(token),
                contender,
            },
        ),
        Payload::ContenderJoined {
            lease,
            owner,
            priority,
        } => change(lease, LeaseChangeKind::ContenderJoined { owner, priority }),
        Payload::ContenderLeft { lease, owner } => {
            change(lease, LeaseChangeKind::ContenderLeft { owner })
        }
        Payload::Missed => LeaseNotification::Missed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(lease: &str, kind: LeaseChangeKind) -> LeaseNotification {
        LeaseNotification::Changed(LeaseChange {
            lease_name: lease.to_owned(),
            kind,
        })
    }

    #[test]
    fn every_kind_decodes_as_json_build_object_writes_it() {
        let cases = [
            (
                r#"{"lease" : "l", "kind" : "released", "owner" : "a", "token" : 1, "successor" : "b"}"#,
                changed(
                    "l",
                    LeaseChangeKind::Released {
                        owner: "a".into(),
                        token: FencingToken(1),
                        successor: Some("b".into()),
                    },
                ),
            ),
            (
                r#"{"lease" : "l", "kind" : "released", "owner" : "a", "token" : 1, "successor" : null}"#,
                changed(
                    "l",
                    LeaseChangeKind::Released {
                        owner: "a".into(),
                        token: FencingToken(1),
                        successor: None,
                    },
                ),
            ),
            (
                r#"{"lease" : "l", "kind" : "acquired", "owner" : "b", "token" : 2, "after_expiry" : true}"#,
                changed(
                    "l",
                    LeaseChangeKind::Acquired {
                        owner: "b".into(),
                        token: FencingToken(2),
                        after_expiry: true,
                    },
                ),
            ),
            (
                r#"{"lease" : "l", "kind" : "step_down_requested", "holder" : "a", "token" : 1, "contender" : "b"}"#,
                changed(
                    "l",
                    LeaseChangeKind::StepDownRequested {
                        holder: "a".into(),
                        token: FencingToken(1),
                        contender: "b".into(),
                    },
                ),
            ),
            (
                r#"{"lease" : "l\"\u0001", "kind" : "contender_joined", "owner" : "c", "priority" : -5}"#,
                changed(
                    "l\"\u{1}",
                    LeaseChangeKind::ContenderJoined {
                        owner: "c".into(),
                        priority: -5,
                    },
                ),
            ),
            (
                r#"{"lease" : "l", "kind" : "contender_left", "owner" : "c"}"#,
                changed("l", LeaseChangeKind::ContenderLeft { owner: "c".into() }),
            ),
            (r#"{"kind": "missed"}"#, LeaseNotification::Missed),
            // A batch's changes, as jsonb writes them with their place in the batch.
            (
                r#"{"n": 3, "kind": "contender_joined", "lease": "l", "owner": "c", "priority": 1}"#,
                changed(
                    "l",
                    LeaseChangeKind::ContenderJoined {
                        owner: "c".into(),
                        priority: 1,
                    },
                ),
            ),
        ];
        for (payload, expected) in cases {
            assert_eq!(decode(payload).unwrap(), expected, "{payload}");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for payload in [
            "",
            "released",
            r#"{"lease" : "l", "kind" : "evicted", "owner" : "a"}"#,
            r#"{"lease" : "l", "kind" : "acquired", "owner" : "a", "token" : -1, "after_expiry" : false}"#,
            r#"{"lease" : "l", "kind" : "contender_left"}"#,
        ] {
            assert!(decode(payload).is_err(), "{payload}");
        }
    }
}
