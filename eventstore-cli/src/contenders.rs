//! `eventstore contenders LEASE`: who waits for a lease, judged on the storage's clock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore::EventStorageExt;
use eventstore::LeaseContender;
use serde::Serialize;

use crate::cli::StoreArgs;
use crate::failure::Failure;
use crate::output::{print_json, print_text, printable, table};
use crate::store::{OpenStore, StoreDescription, Target};
use crate::time_text::{ago, instant, serialize_millis, span};

/// The JSON document of `eventstore contenders LEASE --json`.
#[derive(Debug, Serialize)]
struct ContendersDocument {
    /// Now on the storage's clock; every `live` is judged at this instant.
    storage_time: DateTime<Utc>,
    #[serde(flatten)]
    store: StoreDescription,
    lease_name: String,
    /// The live holder, who is not among the contenders; `None` while the lease is free.
    holder: Option<String>,
    /// The owner of the last tenure, live or not (released or expired); `None` for a lease
    /// never held.
    last_holder: Option<String>,
    /// When the last tenure ends or ended (`heartbeat_at + ttl`); a release backdates it.
    tenure_expires_at: Option<DateTime<Utc>>,
    /// The contenders besides the holder, by priority (highest first), then owner.
    contenders: Vec<ContenderView>,
}

/// One contender in the JSON document.
#[derive(Debug, Serialize)]
pub(crate) struct ContenderView {
    owner: String,
    priority: i64,
    /// Its last request.
    heartbeat_at: DateTime<Utc>,
    /// The ttl in milliseconds, with a fraction where it has one.
    #[serde(rename = "ttl_ms", serialize_with = "serialize_millis")]
    ttl: Duration,
    /// `heartbeat_at + ttl`: registered until then, inclusive.
    expires_at: DateTime<Utc>,
    /// Whether the registration is live at `storage_time`.
    live: bool,
}

impl ContenderView {
    pub(crate) fn of(contender: &LeaseContender, now: DateTime<Utc>) -> ContenderView {
        ContenderView {
            owner: contender.owner.clone(),
            priority: contender.priority,
            heartbeat_at: contender.heartbeat_at,
            ttl: contender.ttl,
            expires_at: contender.expires_at(),
            live: contender.is_live_at(now),
        }
    }
}

/// Runs `eventstore contenders LEASE`.
///
/// # Errors
/// The store cannot be opened or read; a file store, whose leases live in its process; a
/// lease the storage has no record of and nobody contends for.
pub(crate) async fn run(args: &StoreArgs, lease_name: &str, json: bool) -> Result<(), Failure> {
    let target = Target::from_args(args)?;
    if let Target::File(dir) = &target {
        return Err(Failure::check(format!(
            "the leases of a file store live in the memory of the process that holds it, not \
             in its directory {}: ask that process (get_contenders)",
            dir.display()
        )));
    }
    let store = OpenStore::open(&target).await?;
    let outcome = read(&store, lease_name).await;
    store.close().await;
    let document = outcome?;
    if json {
        print_json(&document)
    } else {
        print_text(&render(&document))
    }
}

async fn read(store: &OpenStore, lease_name: &str) -> Result<ContendersDocument, Failure> {
    let storage = store.storage();
    let contenders = storage
        .get_contenders(lease_name)
        .await
        .map_err(|error| Failure::storage("cannot read the contenders", &error))?;
    // The leases whose names start with this one's: not every lease of the store.
    let tenure = storage
        .get_leases_with_prefix(lease_name)
        .await
        .map_err(|error| Failure::storage("cannot read the leases", &error))?
        .into_iter()
        .find(|lease| lease.lease_name == lease_name);
    if tenure.is_none() && contenders.is_empty() {
        return Err(Failure::check(format!(
            "no lease named {lease_name:?} in {}: nobody holds it or contends for it",
            store.description()
        )));
    }
    let now = store.storage_time().await?;
    let holder = tenure
        .as_ref()
        .filter(|lease| !lease.is_expired_at(now))
        .map(|lease| lease.owner.clone());
    Ok(ContendersDocument {
        storage_time: now,
        store: store.description(),
        lease_name: lease_name.to_owned(),
        holder,
        last_holder: tenure.as_ref().map(|lease| lease.owner.clone()),
        tenure_expires_at: tenure.as_ref().map(|lease| lease.expires_at()),
        contenders: contenders
            .iter()
            .map(|contender| ContenderView::of(contender, now))
            .collect(),
    })
}

fn render(document: &ContendersDocument) -> String {
    let now = document.storage_time;
    let live = document.contenders.iter().filter(|c| c.live).count();
    let tenure = match (
        &document.holder,
        &document.last_holder,
        document.tenure_expires_at,
    ) {
        (Some(holder), _, _) => format!("held by {}", printable(holder)),
        (None, Some(last), Some(ended)) => {
            let last = printable(last);
            format!("free, last held by {last} (ended {})", ago(ended, now))
        }
        _ => "never held".to_owned(),
    };
    let mut text = format!(
        "lease {}: {tenure}; {} contenders ({live} live) in {}; storage time {}\n",
        printable(&document.lease_name),
        document.contenders.len(),
        document.store,
        instant(now)
    );
    if document.contenders.is_empty() {
        return text;
    }
    let rows: Vec<Vec<String>> = document
        .contenders
        .iter()
        .map(|contender| {
            let expiry = (contender.expires_at - now).num_milliseconds();
            vec![
                contender.owner.clone(),
                contender.priority.to_string(),
                ago(contender.heartbeat_at, now),
                span(i64::try_from(contender.ttl.as_millis()).unwrap_or(i64::MAX)),
                if contender.live {
                    format!("in {}", span(expiry))
                } else {
                    format!("lapsed {} ago", span(expiry))
                },
                if contender.live { "live" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "OWNER",
            "PRIORITY",
            "LAST REQUEST",
            "TTL",
            "EXPIRES",
            "LIVE",
        ],
        &rows,
    ));
    text
}
