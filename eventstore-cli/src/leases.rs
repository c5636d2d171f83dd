//! `eventstore leases`: every lease the storage records, judged on the storage's clock.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore::EventStorageExt;
use eventstore::{Lease, LeaseContender};
use serde::Serialize;

use crate::cli::StoreArgs;
use crate::failure::Failure;
use crate::output::{print_json, print_text, table};
use crate::store::{OpenStore, StoreDescription, Target};
use crate::time_text::{ago, floor_millis, instant, serialize_millis, span};

/// The JSON document of `eventstore leases --json`.
#[derive(Debug, Serialize)]
struct LeasesDocument {
    /// Now on the storage's clock; every `live` is judged at this instant.
    storage_time: DateTime<Utc>,
    #[serde(flatten)]
    store: StoreDescription,
    /// Every lease the storage records, by name: live, expired and released ones.
    leases: Vec<LeaseView>,
}

/// One lease in the JSON document.
#[derive(Debug, Serialize)]
struct LeaseView {
    lease_name: String,
    /// The holder, or the last holder of an expired or released lease.
    owner: String,
    fencing_token: u64,
    priority: i64,
    acquired_at: DateTime<Utc>,
    /// The last renewal (a released lease's is backdated so that it is expired at once).
    heartbeat_at: DateTime<Utc>,
    /// The ttl in milliseconds, with a fraction where it has one.
    #[serde(rename = "ttl_ms", serialize_with = "serialize_millis")]
    ttl: Duration,
    /// `heartbeat_at + ttl`: live until then, inclusive.
    expires_at: DateTime<Utc>,
    /// Whether the lease is held at `storage_time`: `storage_time <= expires_at`.
    live: bool,
    /// `expires_at - storage_time` in milliseconds: how long it stays live, or, negative,
    /// for how long it has been expired.
    expires_in_ms: i64,
    /// The owners of the contenders live at `storage_time`, by priority, then owner.
    live_contenders: Vec<String>,
}

impl LeaseView {
    fn of(lease: &Lease, contenders: &[LeaseContender], now: DateTime<Utc>) -> LeaseView {
        let expires_at = lease.expires_at();
        LeaseView {
            lease_name: lease.lease_name.clone(),
            owner: lease.owner.clone(),
            fencing_token: lease.fencing_token.0,
            priority: lease.priority,
            acquired_at: lease.acquired_at,
            heartbeat_at: lease.heartbeat_at,
            ttl: lease.ttl,
            expires_at,
            live: !lease.is_expired_at(now),
            expires_in_ms: floor_millis(expires_at - now),
            live_contenders: contenders
                .iter()
                .filter(|contender| contender.is_live_at(now))
                .map(|contender| contender.owner.clone())
                .collect(),
        }
    }
}

/// What `eventstore leases` prints, and how often.
#[derive(Debug)]
pub(crate) struct Rounds<'a> {
    /// Only the leases whose names start with it (every lease when empty).
    pub(crate) lease_prefix: &'a str,
    /// One JSON document per round instead of a table.
    pub(crate) json: bool,
    /// Print again after this long, until interrupted.
    pub(crate) watch: Option<Duration>,
}

/// Runs `eventstore leases`; with `watch`, again every so often until interrupted.
///
/// # Errors
/// The store cannot be opened or read; a file store, whose leases live in its process; a
/// lease prefix no lease name can start with.
pub(crate) async fn run(args: &StoreArgs, rounds: &Rounds<'_>) -> Result<(), Failure> {
    let target = Target::from_args(args)?;
    if let Target::File(dir) = &target {
        return Err(Failure::check(format!(
            "the leases of a file store live in the memory of the process that holds it, not \
             in its directory {}: ask that process (its LeaderElector or get_leases)",
            dir.display()
        )));
    }
    let store = OpenStore::open(&target).await?;
    let outcome = print_rounds(&store, rounds).await;
    store.close().await;
    outcome
}

async fn print_rounds(store: &OpenStore, rounds: &Rounds<'_>) -> Result<(), Failure> {
    let Rounds {
        lease_prefix,
        json,
        watch,
    } = *rounds;
    let clear = watch.is_some() && !json && std::io::stdout().is_terminal();
    let mut shown = false;
    loop {
        let document = match (read(store, lease_prefix).await, watch) {
            (Ok(document), _) => document,
            // Once watching, a failed read (a failover, a restart) is reported, and the next
            // round tries again: an operator watches a fleet through exactly such moments.
            (Err(failure), Some(interval)) if shown => {
                eprintln!(
                    "eventstore: {} (trying again in {})",
                    failure.one_line(),
                    span(i64::try_from(interval.as_millis()).unwrap_or(i64::MAX))
                );
                tokio::time::sleep(interval).await;
                continue;
            }
            (Err(failure), _) => return Err(failure),
        };
        shown = true;
        if json {
            print_json(&document)?;
        } else {
            let text = render(&document);
            print_text(&if clear {
                format!("\x1b[2J\x1b[H{text}")
            } else {
                text
            })?;
        }
        match watch {
            None => return Ok(()),
            Some(interval) => {
                tokio::time::sleep(interval).await;
                if !clear && !json {
                    print_text("\n")?;
                }
            }
        }
    }
}

async fn read(store: &OpenStore, lease_prefix: &str) -> Result<LeasesDocument, Failure> {
    let mut leases = store
        .storage()
        .get_leases_with_prefix(lease_prefix)
        .await
        .map_err(|error| Failure::storage("cannot read the leases", &error))?;
    leases.sort_by(|a, b| a.lease_name.cmp(&b.lease_name));
    // One call for every lease's contenders: one per lease took seconds at 20,000 leases.
    let mut contenders: HashMap<String, Vec<LeaseContender>> = HashMap::new();
    let listed = store
        .storage()
        .get_contenders_with_prefix(lease_prefix)
        .await
        .map_err(|error| Failure::storage("cannot read the contenders", &error))?;
    for contender in listed {
        contenders
            .entry(contender.lease_name.clone())
            .or_default()
            .push(contender);
    }
    // Read after the leases, so that no lease renewed in between looks renewed in the future.
    let now = store.storage_time().await?;
    Ok(LeasesDocument {
        storage_time: now,
        store: store.description(),
        leases: leases
            .iter()
            .map(|lease| {
                let contenders = contenders.get(&lease.lease_name);
                LeaseView::of(lease, contenders.map_or(&[], Vec::as_slice), now)
            })
            .collect(),
    })
}

fn render(document: &LeasesDocument) -> String {
    let now = document.storage_time;
    let live = document.leases.iter().filter(|lease| lease.live).count();
    let mut text = format!(
        "{} leases ({live} live) in {}; storage time {}\n",
        document.leases.len(),
        document.store,
        instant(now)
    );
    if document.leases.is_empty() {
        return text;
    }
    let rows: Vec<Vec<String>> = document
        .leases
        .iter()
        .map(|lease| {
            let expiry = if lease.live {
                format!("in {}", span(lease.expires_in_ms))
            } else {
                format!("expired {} ago", span(lease.expires_in_ms))
            };
            vec![
                lease.lease_name.clone(),
                lease.owner.clone(),
                lease.fencing_token.to_string(),
                lease.priority.to_string(),
                ago(lease.acquired_at, now),
                ago(lease.heartbeat_at, now),
                span(i64::try_from(lease.ttl.as_millis()).unwrap_or(i64::MAX)),
                expiry,
                if lease.live { "live" } else { "no" }.to_owned(),
                lease.live_contenders.join(" "),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "LEASE",
            "OWNER",
            "TOKEN",
            "PRIORITY",
            "ACQUIRED",
            "RENEWED",
            "TTL",
            "EXPIRES",
            "LIVE",
            "CONTENDERS",
        ],
        &rows,
    ));
    text
}

#[cfg(test)]
mod tests {
    use eventstore::FencingToken;

    use super::*;

    /// Half a millisecond after expiry the lease is no longer live, and `expires_in_ms` says
    /// so: negative, not a truncated 0.
    #[test]
    fn an_expired_lease_expires_in_a_negative_number_of_milliseconds() {
        let heartbeat_at: DateTime<Utc> = "2026-12-01T11:00:00Z".parse().unwrap();
        let lease = Lease {
            lease_name: "l".into(),
            owner: "o".into(),
            priority: 0,
            fencing_token: FencingToken(1),
            acquired_at: heartbeat_at,
            heartbeat_at,
            ttl: Duration::from_secs(10),
        };
        let now = heartbeat_at + chrono::Duration::microseconds(10_000_500);
        let view = LeaseView::of(&lease, &[], now);
        assert!(!view.live);
        assert_eq!(view.expires_in_ms, -1);
        let view = LeaseView::of(&lease, &[], lease.expires_at());
        assert!(view.live);
        assert_eq!(view.expires_in_ms, 0);
    }
}
