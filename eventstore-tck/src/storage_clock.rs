//! Scenarios: the storage's clock is the only clock.
//!
//! `storage_time`, lease expiry and the times a storage stamps (event timestamps, bookmark
//! `updated_at`) are all read from one clock, the storage's. A time read from the wall clock
//! instead agrees with it until the system clock steps, so these scenarios step the storage's
//! clock forward through [`StorageFactory::step_clock`] and check that everything follows.
//! Where the factory cannot step the clock (its default answer), each scenario prints why and
//! passes without running.

use chrono::{DateTime, TimeDelta, Utc};
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, EventStorage, EventStorageError, EventStreamId,
    EventToStore, Fence, LeaseRequest, LeaseStatus, Tags,
};

use crate::support::{self, Answer as _, LONG_TTL};
use crate::StorageFactory;

/// What these scenarios need: `storage_time` is a lease method.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];

/// How far the scenarios step the clock: far beyond any ttl they use and any drift.
const STEP: TimeDelta = TimeDelta::hours(6);

/// How much later than the step a reading may be: the time the scenario itself took.
const SLACK: TimeDelta = TimeDelta::minutes(5);

/// The rule.
const CLOCK_RULE: &str = "time is the storage's clock only: storage_time, lease expiry and \
    the times the storage stamps (event timestamps, bookmark updated_at) are read from one \
    clock, never from the wall clock";

fn stream() -> EventStreamId {
    EventStreamId::for_context("clock")
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// A step of the storage's clock moves `storage_time` with it at once.
pub async fn storage_time_follows_a_step_of_the_storages_clock<F: StorageFactory>(factory: &F) {
    let Some(storage) =
        storage_with_a_movable_clock(factory, "storage_time_follows_a_step_of_the_storages_clock")
            .await
    else {
        return;
    };
    let before = now(&storage).await;
    step(factory, &storage).await;
    let after = now(&storage).await;
    assert_follows(after, before, "storage_time read after the step");
}

/// After a step of the storage's clock, an appended event and a placed bookmark carry times
/// of the stepped clock.
pub async fn stamped_times_follow_a_step_of_the_storages_clock<F: StorageFactory>(factory: &F) {
    let Some(storage) =
        storage_with_a_movable_clock(factory, "stamped_times_follow_a_step_of_the_storages_clock")
            .await
    else {
        return;
    };
    let before = now(&storage).await;
    step(factory, &storage).await;
    let stored = storage
        .append(AppendCriteria::none(), &stream(), vec![event()])
        .await
        .or_rule("append", "an unconditional append of valid events succeeds");
    let stored = support::only(
        stored,
        "an append of one event",
        "an append answers one stored event per event sent",
    );
    assert_follows(
        stored.timestamp,
        before,
        "the timestamp of an event appended after the step",
    );

    storage
        .bookmark("reader", &stored.reference, Tags::none())
        .await
        .or_rule("bookmark", "a bookmark of a stored event succeeds");
    let bookmarks: Vec<Bookmark> = storage
        .get_bookmarks()
        .await
        .or_rule("get_bookmarks", "get_bookmarks answers on an open storage");
    let bookmark = support::only(
        bookmarks,
        "get_bookmarks after one bookmark",
        "get_bookmarks lists every bookmark placed",
    );
    assert_follows(
        bookmark.updated_at,
        before,
        "the updated_at of a bookmark placed after the step",
    );
}

/// A lease whose ttl the stepped clock passed is expired: `get_leases` shows it expired at
/// `storage_time`, another owner takes it over with the next token, and the old token fences
/// nothing.
pub async fn lease_expiry_follows_a_step_of_the_storages_clock<F: StorageFactory>(factory: &F) {
    let Some(storage) =
        storage_with_a_movable_clock(factory, "lease_expiry_follows_a_step_of_the_storages_clock")
            .await
    else {
        return;
    };
    let first = storage
        .request_lease(LeaseRequest::new("stepped", "node-a", 0, LONG_TTL))
        .await
        .or_rule(
            "request_lease",
            "request_lease of a valid request answers on a storage with Capability::Lease",
        );
    assert_eq!(
        first.status,
        LeaseStatus::Leader,
        "lease rule 3: the first request leads"
    );
    step(factory, &storage).await;

    let now = now(&storage).await;
    let leases = storage.get_leases().await.or_rule(
        "get_leases",
        "get_leases answers on a storage with Capability::Lease",
    );
    let lease = leases
        .iter()
        .find(|lease| lease.lease_name == "stepped")
        .unwrap_or_else(|| {
            panic!("get_leases lists every lease: \"stepped\" missing from {leases:?}")
        });
    assert!(
        lease.is_expired_at(now),
        "{CLOCK_RULE}: the clock stepped {STEP} past a ttl of {LONG_TTL:?}, so the lease is \
         expired at storage_time {now}: {lease:?}"
    );
    let second = storage
        .request_lease(LeaseRequest::new("stepped", "node-b", 0, LONG_TTL))
        .await
        .or_rule(
            "request_lease",
            "request_lease of a valid request answers on a storage with Capability::Lease",
        );
    assert_eq!(
        (
            second.status,
            second.fencing_token,
            second.current_owner.as_str()
        ),
        (LeaseStatus::Leader, first.fencing_token.next(), "node-b"),
        "{CLOCK_RULE}: the clock stepped {STEP} past node-a's ttl of {LONG_TTL:?}, so its lease \
         expired (expiry is judged on the storage's clock: storage_time after heartbeat + ttl) \
         and node-b takes it over with the next token"
    );
    if storage.supports(Capability::FencedWrites) {
        let refused = storage
            .append_fenced(
                &Fence::new("stepped", first.fencing_token),
                AppendCriteria::none(),
                &stream(),
                vec![event()],
            )
            .await;
        assert!(
            matches!(refused, Err(EventStorageError::Fenced { .. })),
            "{CLOCK_RULE}: node-a's tenure ended when the stepped clock passed its ttl, so its \
             token fences nothing; got {refused:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// A fresh storage whose clock the factory can step, or `None` (having printed why) when it
/// cannot.
async fn storage_with_a_movable_clock<F: StorageFactory>(
    factory: &F,
    scenario: &str,
) -> Option<F::Storage> {
    let storage = factory.create().await;
    if factory
        .step_clock(&storage, TimeDelta::zero())
        .await
        .is_none()
    {
        crate::applicability::print_uncaptured(&format!(
            "skipped the storage clock scenario `{scenario}` on `{}`: its StorageFactory cannot \
             step the storage's clock (step_clock answers None)",
            storage.name()
        ));
        return None;
    }
    Some(storage)
}

/// Steps the storage's clock forward by [`STEP`].
async fn step<F: StorageFactory>(factory: &F, storage: &F::Storage) {
    factory
        .step_clock(storage, STEP)
        .await
        .unwrap_or_else(|| panic!("step_clock answered Some once, so it steps the clock again"));
}

async fn now<S: EventStorage + ?Sized>(storage: &S) -> DateTime<Utc> {
    storage.storage_time().await.or_rule(
        "storage_time",
        "storage_time answers on a storage with Capability::Lease",
    )
}

fn event() -> EventToStore {
    EventToStore::new("Stamped", serde_json::json!({}))
}

/// Asserts that `time`, read after the clock was stepped by [`STEP`] from `before`, lies
/// between `before + STEP` and a little later.
fn assert_follows(time: DateTime<Utc>, before: DateTime<Utc>, what: &str) {
    assert!(
        before + STEP <= time && time <= before + STEP + SLACK,
        "{CLOCK_RULE}: the storage's clock was stepped {STEP} forward from {before}, so {what} \
         lies between {} and {}, not at {time}",
        before + STEP,
        before + STEP + SLACK
    );
}
