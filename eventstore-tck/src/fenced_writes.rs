//! Scenarios: fenced writes ([`Capability::FencedWrites`]), judged by the storage itself.
//!
//! A fence passes only while its lease is live on the storage's clock with the fence's token
//! as its current one, and the check and the write are one atomic step. The token alone is
//! not enough: the current token of a lease that expired or was released, with nobody taking
//! it since, fences nothing. And a write that passed its check lands before anything that
//! happens after the lease changed hands.
//!
//! Run on a backend without [`Capability::FencedWrites`] (reported as ignored there unless
//! run with `--include-ignored`), each scenario proves instead that both fenced writes refuse
//! with `Unsupported`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use eventstore_api::{
    AppendCriteria, Capability, Direction, EventFilter, EventReference, EventStorage,
    EventStorageError, EventStreamId, EventToStore, Fence, FencingToken, LeaseRequest, LeaseStatus,
    Limit, Tags,
};

use crate::support::{self, SHORT_TTL};
use crate::StorageFactory;

/// What these scenarios need.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease, Capability::FencedWrites];

/// The rule the expired and released cases check.
const LIVE_RULE: &str = "a fence passes only while its lease is live";

/// The rule the race checks.
const ATOMIC_RULE: &str = "a fenced write's check and write are one atomic step";

/// How many times the race is run: each round is one tenure ending while its holder writes.
const RACE_ROUNDS: usize = 40;

/// How many tasks of the old holder write at once in each round.
const RACE_WRITERS: usize = 4;

/// How many writes each writer of the old holder tries at most once the takeover is done: it
/// stops at its first refusal, which the release brings.
const RACE_WRITES_AFTER_TAKEOVER: usize = 100;

fn stream() -> EventStreamId {
    EventStreamId::for_context("fenced")
}

fn event(tenure: &str) -> EventToStore {
    EventToStore::new("Written", serde_json::json!({ "tenure": tenure }))
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// The current token of a lease that expired on the storage's clock, with nobody taking the
/// lease since, fences no append: `Fenced` (naming the lease not live), nothing stored.
pub async fn an_expired_leases_current_token_fences_no_append<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_fenced_writes(factory).await else {
        return;
    };
    let token = expired_lease(&storage, "expired-append").await;
    assert_append_refused(&storage, "expired-append", token, "expired").await;
}

/// The current token of a lease that expired on the storage's clock, with nobody taking the
/// lease since, fences no bookmark: `Fenced` (naming the lease not live), bookmark unplaced.
pub async fn an_expired_leases_current_token_fences_no_bookmark<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_fenced_writes(factory).await else {
        return;
    };
    let token = expired_lease(&storage, "expired-bookmark").await;
    assert_bookmark_refused(&storage, "expired-bookmark", token, "expired").await;
}

/// The current token of a lease its holder released, with nobody taking the lease since,
/// fences no append: `Fenced` (naming the lease not live), nothing stored.
pub async fn a_released_leases_current_token_fences_no_append<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_fenced_writes(factory).await else {
        return;
    };
    let token = released_lease(&storage, "released-append").await;
    assert_append_refused(&storage, "released-append", token, "released").await;
}

/// The current token of a lease its holder released, with nobody taking the lease since,
/// fences no bookmark: `Fenced` (naming the lease not live), bookmark unplaced.
pub async fn a_released_leases_current_token_fences_no_bookmark<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_fenced_writes(factory).await else {
        return;
    };
    let token = released_lease(&storage, "released-bookmark").await;
    assert_bookmark_refused(&storage, "released-bookmark", token, "released").await;
}

/// Fenced appends of a holder race, round after round, against its release and the takeover
/// by another owner on another handle, whose own fenced append follows at once: no append of
/// the old tenure may land after the new holder's in the storage's order. A backend that
/// checks the fence, lets go of its lock, then writes lets an old append through the window.
pub async fn no_fenced_write_of_an_ended_tenure_lands_after_the_next_tenure_began<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some(storage) = storage_with_fenced_writes(factory).await else {
        return;
    };
    let other = factory.another_handle(&storage).await;
    for round in 0..RACE_ROUNDS {
        race_round(&storage, &other, round).await;
    }
}

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// A fresh storage with fenced writes, or `None` when it does not offer them (having proved
/// that both fenced writes then refuse with `Unsupported`).
async fn storage_with_fenced_writes<F: StorageFactory>(factory: &F) -> Option<F::Storage> {
    let storage = factory.create().await;
    if storage.supports(Capability::FencedWrites) {
        assert!(
            storage.supports(Capability::Lease),
            "Capability::FencedWrites implies Capability::Lease"
        );
        return Some(storage);
    }
    let fence = Fence::new("fenced", FencingToken(1));
    let refused = storage
        .append_fenced(&fence, AppendCriteria::none(), &stream(), vec![event("x")])
        .await;
    support::assert_unsupported(refused, "append_fenced without Capability::FencedWrites");
    let stored = append(&storage, "unfenced").await;
    let refused = storage
        .bookmark_fenced(&fence, "reader", &stored, Tags::none())
        .await;
    support::assert_unsupported(refused, "bookmark_fenced without Capability::FencedWrites");
    None
}

/// Appends one event unfenced, which must succeed, and answers its reference.
async fn append<S: EventStorage + ?Sized>(storage: &S, tenure: &str) -> EventReference {
    let stored = support::answer(
        storage
            .append(AppendCriteria::none(), &stream(), vec![event(tenure)])
            .await,
        "append of one event",
        "an unconditional append of a valid event succeeds",
    );
    support::only(
        stored,
        "append of one event",
        "an append answers one stored event per event sent",
    )
    .reference
}

/// Acquires `lease_name` with a short ttl and waits until it expired on the storage's clock;
/// answers its token, still the lease's current one.
async fn expired_lease<S: EventStorage + ?Sized>(storage: &S, lease_name: &str) -> FencingToken {
    let token = acquire(
        storage,
        LeaseRequest::new(lease_name, "holder", 0, SHORT_TTL),
    )
    .await;
    support::wait_until_expired(storage, lease_name).await;
    token
}

/// Acquires `lease_name` and releases it; answers its token, still the lease's current one.
async fn released_lease<S: EventStorage + ?Sized>(storage: &S, lease_name: &str) -> FencingToken {
    let token = acquire(storage, support::request(lease_name, "holder")).await;
    support::answer(
        storage.release_lease(lease_name, "holder").await,
        &format!("release_lease({lease_name:?}, \"holder\") by its holder"),
        "release_lease of a held lease succeeds",
    );
    token
}

/// Sends `request`, which must make its owner the leader; answers the token.
async fn acquire<S: EventStorage + ?Sized>(storage: &S, request: LeaseRequest) -> FencingToken {
    let what = format!(
        "request_lease({:?}, {:?})",
        request.lease_name, request.owner
    );
    let response = support::answer(
        storage.request_lease(request).await,
        &what,
        "request_lease of a free lease succeeds",
    );
    assert_eq!(
        response.status,
        LeaseStatus::Leader,
        "lease rule 3: {what} of a lease nobody holds live makes the caller leader: {response:?}"
    );
    response.fencing_token
}

/// Asserts that `token` is still the current token of `lease_name`, and that the lease is
/// not live on the storage's clock: what makes the fence's refusal about liveness alone.
async fn assert_current_but_not_live<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    token: FencingToken,
    how: &str,
) {
    let now = support::answer(
        storage.storage_time().await,
        "storage_time",
        "storage_time answers on a storage with Capability::Lease",
    );
    let leases = support::answer(
        storage.get_leases().await,
        "get_leases",
        "get_leases answers on a storage with Capability::Lease",
    );
    let lease = leases
        .iter()
        .find(|lease| lease.lease_name == lease_name)
        .unwrap_or_else(|| {
            panic!("get_leases lists every lease, expired and released ones too: {lease_name:?} missing from {leases:?}")
        });
    assert_eq!(
        lease.fencing_token, token,
        "tokens change only on a grant, and nobody requested {lease_name:?} since it was \
         {how}: {lease:?}"
    );
    assert!(
        lease.is_expired_at(now),
        "a {how} lease is not live on the storage's clock (storage_time {now}): {lease:?}"
    );
}

/// Asserts that a fenced append under `token`, the current token of the `how` (expired or
/// released) lease `lease_name`, is refused as `Fenced` and stores nothing.
async fn assert_append_refused<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    token: FencingToken,
    how: &str,
) {
    let before = append(storage, "before").await;
    assert_current_but_not_live(storage, lease_name, token, how).await;
    let fence = Fence::new(lease_name, token);
    let result = storage
        .append_fenced(
            &fence,
            AppendCriteria::none(),
            &stream(),
            vec![event("stale")],
        )
        .await;
    let what = format!(
        "append_fenced under token {token}, the current token of lease {lease_name:?}, {how} \
         with nobody taking it since"
    );
    assert_refused_as_not_live(&result, &what, lease_name, token);
    let head = support::answer(
        storage.head(&stream()).await,
        "head",
        "head of a concrete stream answers",
    );
    assert_eq!(
        head,
        Some(before),
        "{LIVE_RULE}: {what} was refused, so it must have stored nothing"
    );
}

/// Asserts that a fenced bookmark under `token`, the current token of the `how` (expired or
/// released) lease `lease_name`, is refused as `Fenced` and places nothing.
async fn assert_bookmark_refused<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    token: FencingToken,
    how: &str,
) {
    let reference = append(storage, "unfenced").await;
    assert_current_but_not_live(storage, lease_name, token, how).await;
    let fence = Fence::new(lease_name, token);
    let result = storage
        .bookmark_fenced(&fence, "reader", &reference, Tags::none())
        .await;
    let what = format!(
        "bookmark_fenced under token {token}, the current token of lease {lease_name:?}, {how} \
         with nobody taking it since"
    );
    assert_refused_as_not_live(&result, &what, lease_name, token);
    let placed = support::answer(
        storage.get_bookmark("reader").await,
        "get_bookmark(\"reader\")",
        "get_bookmark of a valid reader answers",
    );
    assert_eq!(
        placed, None,
        "{LIVE_RULE}: {what} was refused, so it must have placed no bookmark"
    );
}

/// Asserts that `result` is `Fenced`, naming the lease, the presented token as the current
/// one, and the lease not live.
fn assert_refused_as_not_live<T: std::fmt::Debug>(
    result: &Result<T, EventStorageError>,
    what: &str,
    lease_name: &str,
    token: FencingToken,
) {
    match result {
        Err(EventStorageError::Fenced {
            lease_name: named,
            presented,
            current,
            live,
            ..
        }) => {
            assert_eq!(named, lease_name, "{what}: Fenced names the fence's lease");
            assert_eq!(
                *presented, token,
                "{what}: Fenced names the presented token"
            );
            assert_eq!(
                *current,
                Some(token),
                "{what}: Fenced names the lease's current token"
            );
            assert!(
                !*live,
                "{what}: Fenced must say the lease is not live ({LIVE_RULE})"
            );
        }
        other => panic!(
            "{LIVE_RULE}: with that token as its current one, on the storage's clock; a token \
             that is current is not enough. {what}: expected Err(Fenced), got {other:?}"
        ),
    }
}

/// One round of the race: the holder of a fresh lease writes under its fence from several
/// tasks while the other handle releases the lease for it, takes it over as another owner and
/// writes under the new fence; then no write of the old tenure may follow the new holder's.
async fn race_round<S: EventStorage + Clone + 'static>(storage: &S, other: &S, round: usize) {
    let lease_name = format!("race-{round}");
    let stream = EventStreamId::new("fence-race", format!("round{round}"));
    let old_token = acquire(storage, support::request(&lease_name, "old")).await;
    let old_fence = Fence::new(lease_name.clone(), old_token);

    let landed = Arc::new(AtomicUsize::new(0));
    let taken_over = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..RACE_WRITERS)
        .map(|writer| {
            let (storage, fence, stream, landed, taken_over) = (
                storage.clone(),
                old_fence.clone(),
                stream.clone(),
                Arc::clone(&landed),
                Arc::clone(&taken_over),
            );
            tokio::spawn(async move {
                let mut after_takeover = 0;
                while after_takeover < RACE_WRITES_AFTER_TAKEOVER {
                    if taken_over.load(Ordering::SeqCst) {
                        after_takeover += 1;
                    }
                    // A backend that answers without waiting would otherwise keep this worker
                    // from the takeover (and the timers) for good.
                    tokio::task::yield_now().await;
                    let written = storage
                        .append_fenced(&fence, AppendCriteria::none(), &stream, vec![event("old")])
                        .await;
                    match written {
                        Ok(_) => {
                            landed.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(EventStorageError::Fenced { .. }) => return,
                        Err(error) => panic!(
                            "round {round}, writer {writer}: a fenced append of the holder \
                             must succeed or be refused as Fenced, got Err({error})"
                        ),
                    }
                }
                panic!(
                    "round {round}, writer {writer}: {LIVE_RULE} with that token as its current \
                     one, yet {RACE_WRITES_AFTER_TAKEOVER} fenced appends under token \
                     {old_token} were accepted after the lease was released and taken over"
                );
            })
        })
        .collect();

    // The old tenure ends while its writers are busy.
    support::eventually(
        &format!("round {round}: a first fenced append of the holder to land"),
        || async { landed.load(Ordering::SeqCst) > 0 },
    )
    .await;
    support::answer(
        other.release_lease(&lease_name, "old").await,
        &format!("release_lease({lease_name:?}, \"old\")"),
        "release_lease of a held lease succeeds",
    );
    let new_token = acquire(other, support::request(&lease_name, "new")).await;
    taken_over.store(true, Ordering::SeqCst);
    assert!(
        new_token > old_token,
        "token rule: the next tenure's token {new_token} is above the released one's {old_token}"
    );
    let new_fence = Fence::new(lease_name.clone(), new_token);
    let first_new = support::answer(
        other
            .append_fenced(
                &new_fence,
                AppendCriteria::none(),
                &stream,
                vec![event("new")],
            )
            .await,
        &format!("append_fenced under the new holder's token {new_token}"),
        "a fenced write passes while its lease is live with its token as the current one",
    );
    let first_new = support::only(
        first_new,
        "append_fenced of one event",
        "an append answers one stored event per event sent",
    )
    .reference;

    for writer in writers {
        if let Err(error) = writer.await {
            if error.is_panic() {
                std::panic::resume_unwind(error.into_panic());
            }
            panic!("round {round}: a writer of the old holder did not finish: {error}");
        }
    }

    let written = support::answer(
        storage
            .query(
                &EventFilter::match_all(),
                &stream,
                Some(&first_new),
                Limit::none(),
                Direction::Forward,
            )
            .await,
        "query after the new holder's first write",
        "a query of a concrete stream answers",
    );
    let late: Vec<_> = written
        .iter()
        .filter(|stored| stored.payload["tenure"] == "old")
        .map(|stored| stored.reference)
        .collect();
    assert!(
        late.is_empty(),
        "{ATOMIC_RULE}: round {round}: {} fenced append(s) under the ended tenure's token \
         {old_token} landed after the new holder's own fenced append {first_new:?} (token \
         {new_token}) in the storage's order, at {late:?}: the fence was checked, then the \
         write let the release and the takeover in before it",
        late.len()
    );
}
