//! Scenarios: leases ([`eventstore_api::Capability::Lease`]).
//!
//! Each scenario proves one rule of the lease semantics of
//! [`EventStorage::request_lease`], [`EventStorage::request_leases`],
//! [`EventStorage::release_lease`], [`EventStorage::get_leases`] and
//! [`EventStorage::storage_time`]. Run on a backend that does not declare the capability
//! (`tck_tests!` reports them as ignored there; `--include-ignored` runs them anyway), each
//! scenario proves instead that each lease method refuses with `Unsupported`.
//!
//! Leases that must stay live use [`LONG_TTL`]; where expiry is the point, scenarios use a
//! short ttl and poll the storage's clock with a deadline, never a bare sleep.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore_api::Capability;
use eventstore_api::{EventStorage, FencingToken, Lease, LeaseRequest, LeaseResponse, LeaseStatus};
use tokio::sync::Barrier;

use crate::support::Answer as _;
use crate::support::{self, assert_closed, assert_invalid_input, LONG_TTL, SHORT_TTL};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];

// The scenarios, by topic; each is at this module's root too.
pub(crate) mod acquisition;
pub(crate) mod batches;
pub(crate) mod input_rules;
pub(crate) mod priority;
pub(crate) mod tokens;

pub use self::acquisition::*;
pub use self::batches::*;
pub use self::input_rules::*;
pub use self::priority::*;
pub use self::tokens::*;

/// How many requests race each other in the concurrency scenarios.
const CONTENDERS: usize = 16;

/// The ttl of a contender whose lapse a scenario waits for: long enough that the holder's next
/// request surely sees it live on a slow machine, short enough to wait out.
const LAPSING_CONTENDER_TTL: Duration = Duration::from_secs(1);

/// The longest ttl the contract accepts (7 days).
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The longest lease name or owner the contract accepts, in bytes.
const MAX_NAME_BYTES: usize = 512;

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// A fresh storage, or `None` when it does not offer leases (having proved that every lease
/// method then refuses with `Unsupported`).
async fn storage_with_leases<F: StorageFactory>(factory: &F) -> Option<F::Storage> {
    let storage = factory.create().await;
    support::leases_supported(&storage).await.then_some(storage)
}

/// Two handles of a fresh storage, as two processes would hold them, or `None` as
/// [`storage_with_leases`].
async fn two_handles_with_leases<F: StorageFactory>(
    factory: &F,
) -> Option<(F::Storage, F::Storage)> {
    let storage = storage_with_leases(factory).await?;
    let other = factory.another_handle(&storage).await;
    Some((storage, other))
}

/// Sends a request that must succeed.
pub(crate) async fn request<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> LeaseResponse {
    storage
        .request_lease(LeaseRequest::new(lease_name, owner, priority, ttl))
        .await
        .unwrap_or_else(|error| {
            panic!("request_lease({lease_name:?}, {owner:?}, {priority}, {ttl:?}): {error}")
        })
}

/// Releases, which must succeed.
pub(crate) async fn release<S: EventStorage + ?Sized>(storage: &S, lease_name: &str, owner: &str) {
    storage
        .release_lease(lease_name, owner)
        .await
        .unwrap_or_else(|error| panic!("release_lease({lease_name:?}, {owner:?}): {error}"));
}

pub(crate) async fn storage_time<S: EventStorage + ?Sized>(storage: &S) -> DateTime<Utc> {
    storage.storage_time().await.or_rule(
        "storage_time",
        "storage_time answers on a storage with Capability::Lease",
    )
}

pub(crate) async fn leases<S: EventStorage + ?Sized>(storage: &S) -> Vec<Lease> {
    storage.get_leases().await.or_rule(
        "get_leases",
        "get_leases answers on a storage with Capability::Lease",
    )
}

/// The recorded lease named `lease_name`, which must be listed.
async fn lease_named<S: EventStorage + ?Sized>(storage: &S, lease_name: &str) -> Lease {
    let listed = leases(storage).await;
    listed
        .iter()
        .find(|lease| lease.lease_name == lease_name)
        .cloned()
        .unwrap_or_else(|| panic!("get_leases must list {lease_name:?}, got {listed:?}"))
}

/// What of the recorded leases does not depend on when a request ran.
async fn lease_shapes<S: EventStorage + ?Sized>(
    storage: &S,
) -> Vec<(String, String, i64, FencingToken, Duration)> {
    let mut shapes: Vec<_> = leases(storage)
        .await
        .into_iter()
        .map(|lease| {
            (
                lease.lease_name,
                lease.owner,
                lease.priority,
                lease.fencing_token,
                lease.ttl,
            )
        })
        .collect();
    shapes.sort();
    shapes
}

/// Waits until the storage's clock has moved past `instant`, so that a later heartbeat is
/// distinguishable from one at `instant`.
async fn wait_for_storage_time_after<S: EventStorage + ?Sized>(
    storage: &S,
    instant: DateTime<Utc>,
) {
    support::eventually(&format!("storage_time to pass {instant}"), || async {
        storage_time(storage).await > instant
    })
    .await;
}

/// Waits until `lease_name` has just expired on the storage's clock and returns the leases as
/// they were then. Sleeps until shortly before the expiry, then polls without pausing, so that
/// the caller acts as soon after the expiry as the storage answers.
async fn wait_until_just_expired<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
) -> Vec<Lease> {
    const MARGIN: Duration = Duration::from_millis(20);
    let lease = lease_named(storage, lease_name).await;
    let remaining = (lease.expires_at() - storage_time(storage).await)
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(remaining.saturating_sub(MARGIN)).await;
    let start = std::time::Instant::now();
    loop {
        let listed = leases(storage).await;
        let now = storage_time(storage).await;
        let expired = listed
            .iter()
            .any(|lease| lease.lease_name == lease_name && lease.is_expired_at(now));
        if expired {
            return listed;
        }
        assert!(
            start.elapsed() < support::DEADLINE,
            "timed out waiting for {lease_name} to expire on the storage's clock: {listed:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// Asserts that the storage lists exactly the leases `before`.
async fn assert_leases_unchanged<S: EventStorage + ?Sized>(
    storage: &S,
    before: &[Lease],
    context: &str,
) {
    assert_eq!(leases(storage).await, before, "{context}");
}

/// Sends `requests` to `batched` as one batch and to `one_by_one` one by one, asserts that
/// both answer alike and leave alike leases behind, and returns the batch's answers.
async fn assert_batch_answers_as_one_by_one<S: EventStorage + ?Sized>(
    batched: &S,
    one_by_one: &S,
    requests: Vec<LeaseRequest>,
) -> Vec<LeaseResponse> {
    let answered = batched.request_leases(requests.clone()).await.or_rule(
        "request_leases",
        "request_leases of valid requests answers on a storage with Capability::Lease",
    );
    let expected = one_by_one_answers(one_by_one, requests).await;
    assert_eq!(
        answered, expected,
        "batch answers against one-by-one answers"
    );
    assert_eq!(
        lease_shapes(batched).await,
        lease_shapes(one_by_one).await,
        "batch rule: a batch leaves the leases as the same requests one by one do"
    );
    answered
}

async fn one_by_one_answers<S: EventStorage + ?Sized>(
    storage: &S,
    requests: Vec<LeaseRequest>,
) -> Vec<LeaseResponse> {
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        answers.push(storage.request_lease(request).await.or_rule(
            "request_lease",
            "request_lease of a valid request answers on a storage with Capability::Lease",
        ));
    }
    answers
}

/// The answer a request must get: `Leader`, with `token`, naming the caller `owner`.
fn leader(token: u64, owner: &str) -> LeaseResponse {
    lease_response(LeaseStatus::Leader, token, owner)
}

/// The answer a request must get: `Standby`, with the holder's `token` and name.
fn standby(token: u64, holder: &str) -> LeaseResponse {
    lease_response(LeaseStatus::Standby, token, holder)
}

/// The answer a request must get: `LeaderStepDownRequested`, with `token`, naming the caller
/// `owner`.
fn step_down_requested(token: u64, owner: &str) -> LeaseResponse {
    lease_response(LeaseStatus::LeaderStepDownRequested, token, owner)
}

fn lease_response(status: LeaseStatus, token: u64, current_owner: &str) -> LeaseResponse {
    LeaseResponse {
        status,
        fencing_token: FencingToken(token),
        current_owner: current_owner.to_owned(),
    }
}

/// One invalid request per input rule, each described. Requests whose lease name and owner are
/// valid target the `orders` lease and the `held` lease held by `node-a` or `node-x` with a
/// high priority, so that accepting one by mistake would show in the leases or as a step-down.
pub(crate) fn invalid_requests() -> Vec<(String, LeaseRequest)> {
    let over_long = "x".repeat(MAX_NAME_BYTES + 1);
    let over_long_multibyte = "é".repeat(MAX_NAME_BYTES / 2 + 1);
    let names = [
        ("an empty", String::new()),
        ("a blank", " \t\n".to_owned()),
        ("a NUL-holding", "lease\0name".to_owned()),
        ("a 513-byte", over_long),
        ("a 514-byte (257 characters)", over_long_multibyte),
    ];
    let mut cases = Vec::new();
    for (what, bad) in &names {
        cases.push((
            format!("{what} lease name"),
            LeaseRequest::new(bad.clone(), "node-b", 99, LONG_TTL),
        ));
        for lease_name in ["orders", "held"] {
            cases.push((
                format!("{what} owner for {lease_name}"),
                LeaseRequest::new(lease_name, bad.clone(), 99, LONG_TTL),
            ));
        }
    }
    let ttls = [
        ("a zero ttl", Duration::ZERO),
        ("a ttl of 999µs", Duration::from_micros(999)),
        ("a ttl of 7 days + 1ms", MAX_TTL + Duration::from_millis(1)),
        ("a ttl of Duration::MAX", Duration::MAX),
    ];
    for (what, ttl) in ttls {
        for (lease_name, owner) in [
            ("orders", "node-a"),
            ("orders", "node-b"),
            ("held", "node-x"),
            ("held", "node-b"),
        ] {
            cases.push((
                format!("{what} from {owner} for {lease_name}"),
                LeaseRequest::new(lease_name, owner, 99, ttl),
            ));
        }
    }
    cases
}

/// Sends [`CONTENDERS`] requests for `lease_name` at once, from distinct owners, spread over
/// `handles` and over tasks on the multi-thread runtime; returns every answer.
async fn race_for_lease<S: EventStorage + 'static>(
    handles: &[Arc<S>],
    lease_name: &str,
) -> Vec<LeaseResponse> {
    let start = Arc::new(Barrier::new(CONTENDERS));
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|index| {
            let handle = Arc::clone(&handles[index % handles.len()]);
            let start = Arc::clone(&start);
            let request = LeaseRequest::new(lease_name, format!("node-{index}"), 0, LONG_TTL);
            tokio::spawn(async move {
                start.wait().await;
                handle.request_lease(request).await
            })
        })
        .collect();
    let mut responses = Vec::with_capacity(CONTENDERS);
    for (index, task) in tasks.into_iter().enumerate() {
        let response = task
            .await
            .unwrap_or_else(|error| panic!("contender {index} panicked: {error}"))
            .unwrap_or_else(|error| panic!("contender {index}'s request failed: {error}"));
        responses.push(response);
    }
    responses
}

/// Races [`CONTENDERS`] requests for `orders` over `handles`; asserts that exactly one leads,
/// with `token`, and that `observer` records the winner as the holder with that token.
async fn assert_race_elects_exactly_one<S: EventStorage + 'static>(
    handles: &[Arc<S>],
    observer: &S,
    token: FencingToken,
) {
    let responses = race_for_lease(handles, "orders").await;
    assert_exactly_one_leader(&responses, token);
    let winner = &leader_of(&responses).current_owner;
    let lease = lease_named(observer, "orders").await;
    assert_eq!(&lease.owner, winner, "the recorded holder is the winner");
    assert_eq!(
        lease.fencing_token, token,
        "token rule: the listed lease carries the token its holder was granted"
    );
}

fn leader_of(responses: &[LeaseResponse]) -> &LeaseResponse {
    responses
        .iter()
        .find(|response| response.status.is_leader())
        .unwrap_or_else(|| panic!("no leader among {responses:?}"))
}

/// Exactly one response leads, with `token`; every other stands by behind the same owner
/// and token.
fn assert_exactly_one_leader(responses: &[LeaseResponse], token: FencingToken) {
    let leaders = responses
        .iter()
        .filter(|response| response.status.is_leader())
        .count();
    assert_eq!(leaders, 1, "exactly one leader among {responses:?}");
    let leader = leader_of(responses);
    assert_eq!(
        leader.status,
        LeaseStatus::Leader,
        "equal priorities: {leader:?}"
    );
    assert_eq!(
        leader.fencing_token, token,
        "the winner's token: {leader:?}"
    );
    for response in responses.iter().filter(|r| !r.status.is_leader()) {
        assert_eq!(
            (&response.current_owner, response.fencing_token),
            (&leader.current_owner, token),
            "every standby carries the winner's owner and token: {responses:?}"
        );
    }
}
