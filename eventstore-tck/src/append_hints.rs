//! Scenarios: append hints ([`Capability::AppendHints`]).
//!
//! A hint reaches the subscribers whose stream covers the stream appended to, names the last
//! event appended, comes once per append (never once per event), and wakes an elected
//! projector so that it projects an append at once, although its poll interval is long.
//! Closing the storage ends every subscription. Run on a backend without the capability
//! (reported as ignored there unless run with `--include-ignored`), each scenario proves
//! instead that `subscribe_appends` answers `Unsupported`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventstore::elector::LeaderElector;
use eventstore::projector::{
    ElectedProjector, Projection, ProjectionError, Projector, ProjectorError, ProjectorRun,
};
use eventstore_api::EventStorageExt;
use eventstore_api::{
    AppendHint, AppendHints, AppendNotice, Capability, EventFilter, EventStorage, EventStreamId,
    StoredEvent,
};

use crate::events::{append, labelled, orders};
use crate::support::Answer as _;
use crate::support::{self, assert_closed, assert_invalid_input, assert_unsupported, DEADLINE};
use crate::wrappers::{EventsOnly, Unreliable};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::AppendHints];

/// How soon an append must be projected by a projector that polls only every [`LONG_POLL`].
const PUSHED: Duration = Duration::from_secs(10);

/// How long a scenario waits for an appended event to come in sight of readers when that
/// is not what it judges: PostgreSQL's visibility barrier is held back by any transaction
/// running on the server, a test's beside this one included.
const IN_SIGHT: Duration = Duration::from_secs(60);

/// A poll interval far longer than any pushed hint takes.
const LONG_POLL: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// An append is hinted to every subscriber whose stream covers the stream appended to (the
/// stream itself, its context with any purpose, every stream), naming the last event
/// appended; a subscriber of another stream hears only of its own stream.
pub async fn an_append_is_hinted_to_the_subscribers_whose_stream_covers_it<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_append_hints(factory).await else {
        return;
    };
    let mut exact = subscribe(&storage, &orders()).await;
    let mut context = subscribe(&storage, &orders().any_purpose()).await;
    let mut every = subscribe(&storage, &EventStreamId::any()).await;
    let billing = EventStreamId::for_context("billing");
    let mut other = subscribe(&storage, &billing).await;

    let stored = append(
        &storage,
        &orders(),
        vec![labelled("A", "a"), labelled("B", "b")],
    )
    .await;
    let expected = AppendHint {
        stream: orders(),
        last: stored[1].reference,
    };
    for (who, hints) in [
        ("the stream's subscriber", &mut exact),
        ("its context's subscriber", &mut context),
        ("every stream's subscriber", &mut every),
    ] {
        let hint = next_hint(hints, who).await;
        assert_eq!(
            hint, expected,
            "{who} is told of the append and its last event"
        );
    }
    let billed = append(&storage, &billing, vec![labelled("C", "c")]).await;
    let hint = next_hint(&mut other, "billing's subscriber").await;
    assert_eq!(
        hint.last, billed[0].reference,
        "a subscriber hears nothing of a stream its stream does not cover"
    );
}

/// One append of many events is one hint, not one per event: the hint after it names the
/// next append.
pub async fn an_append_of_many_events_is_one_hint<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_append_hints(factory).await else {
        return;
    };
    let mut hints = subscribe(&storage, &orders()).await;
    let batch = (0..5).map(|n| labelled("A", &n.to_string())).collect();
    let first = append(&storage, &orders(), batch).await;
    let second = append(&storage, &orders(), vec![labelled("B", "next")]).await;
    let hint = next_hint(&mut hints, "the first append").await;
    assert_eq!(
        hint.last, first[4].reference,
        "the hint names the last event"
    );
    let hint = next_hint(&mut hints, "the second append").await;
    assert_eq!(
        hint.last, second[0].reference,
        "the next hint is the next append's: a batch is one hint"
    );
}

/// A retry that idempotency answers with the events stored before appends nothing, so it is
/// not hinted: subscribers would read for nothing. The hint after the first append is the
/// next real append's.
pub async fn an_idempotent_retry_is_not_hinted<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_append_hints(factory).await else {
        return;
    };
    let mut hints = subscribe(&storage, &orders()).await;
    let keyed = || vec![labelled("A", "once").with_idempotency_key("order-1")];
    let first = append(&storage, &orders(), keyed()).await;
    let retried = append(&storage, &orders(), keyed()).await;
    assert_eq!(
        retried[0].reference, first[0].reference,
        "the retry is answered with the stored event"
    );
    let next = append(&storage, &orders(), vec![labelled("B", "next")]).await;
    let hint = next_hint(&mut hints, "the first append").await;
    assert_eq!(hint.last, first[0].reference, "the first append is hinted");
    let hint = next_hint(&mut hints, "the append after the retry").await;
    assert_eq!(
        hint.last, next[0].reference,
        "the hint after the first append is the next append's, not the retry's"
    );
}

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_AN_ELECTED_PROJECTOR_PROJECTS_AN_APPEND_AT_ONCE: &[Capability] =
    &[Capability::AppendHints, Capability::Lease];

/// An elected projector whose poll interval is a minute projects an append within moments:
/// the hint wakes it.
pub async fn an_elected_projector_projects_an_append_at_once<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_append_hints(factory).await else {
        return;
    };
    if !storage.supports(Capability::Lease) {
        return;
    }
    let storage: Arc<dyn EventStorage> = Arc::new(storage);
    let running = RunningProjector::start(&storage, EventFilter::match_all()).await;
    // Once the first event is projected the projector waits: for a hint, or for a minute.
    for label in ["first", "hinted"] {
        let stored = append(&*storage, &orders(), vec![labelled("A", label)]).await;
        let position = stored[0].reference.position;
        support::within(
            PUSHED,
            &format!("the {label} event is projected without waiting for the minute-long poll"),
            async {
                while !running.recorded().contains(&position) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            },
        )
        .await;
    }
    running.stop().await;
}

/// A hint for an event the projection does not read (another type on its stream) costs the
/// projector one look: it reads, and then waits for the next hint or poll, instead of reading
/// again every few hundred milliseconds for as long as the hinted event stays "ahead" of what
/// it projected.
pub async fn a_hint_for_an_event_the_projection_does_not_read_costs_one_look<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_append_hints(factory).await else {
        return;
    };
    if !storage.supports(Capability::Lease) {
        return;
    }
    let counted = Arc::new(Unreliable::new(storage));
    let storage: Arc<dyn EventStorage> = counted.clone();
    let running = RunningProjector::start(&storage, EventFilter::for_types(["A"])).await;
    let stored = append(&*storage, &orders(), vec![labelled("A", "read")]).await;
    let position = stored[0].reference.position;
    support::within(
        IN_SIGHT,
        "the event of the projection's type is projected",
        async {
            while !running.recorded().contains(&position) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await;

    let other = append(&*storage, &orders(), vec![labelled("B", "not read")]).await;
    // Readers may see an event a while after its hint (PostgreSQL's visibility barrier, held
    // back by any long transaction), and the projector looks again meanwhile, as it should.
    // Counted from when the event is in sight: one more look settles the hint.
    support::within(IN_SIGHT, "the other event is in sight", async {
        while storage
            .head(&orders())
            .await
            .or_rule("head", "head of a valid stream answers on an open storage")
            < Some(other[0].reference)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let in_sight = counted.queries();
    // The window in which a projector that kept looking would read several times.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let looks = counted.queries() - in_sight;
    let recorded = running.recorded();
    running.stop().await;
    assert_eq!(recorded, [position], "only the event of its type");
    assert!(
        looks <= 3,
        "hint rule: a hint for an event the projection does not read costs one look once the \
         event is in sight, not a look every few hundred milliseconds: {looks} queries in 2 s"
    );
}

/// Subscribing to an invalid stream is `InvalidInput`; closing the storage ends every
/// subscription, and subscribing to a closed storage is `Closed`.
pub async fn closing_the_storage_ends_append_subscriptions<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_append_hints(factory).await else {
        return;
    };
    assert_invalid_input(
        storage
            .subscribe_appends(&EventStreamId::new(" ", "default"))
            .await,
        "subscribe_appends to a stream with a blank context",
        "validate_stream",
    );
    let mut hints = subscribe(&storage, &EventStreamId::any()).await;
    storage
        .close()
        .await
        .or_rule("close", "close succeeds, and again once closed");
    support::within(DEADLINE, "closing the storage ends a subscription", async {
        while hints.next().await.is_some() {}
    })
    .await;
    assert_closed(
        storage.subscribe_appends(&orders()).await,
        "subscribe_appends on a closed storage",
    );
}

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// A fresh storage, or `None` when it does not offer append hints (having proved that it,
/// and any storage with its capabilities hidden, refuses subscriptions with `Unsupported`).
async fn storage_with_append_hints<F: StorageFactory>(factory: &F) -> Option<F::Storage> {
    let storage = factory.create().await;
    assert_unsupported(
        EventsOnly::new(storage.clone())
            .subscribe_appends(&orders())
            .await,
        "subscribe_appends with the capabilities hidden",
    );
    if storage.supports(Capability::AppendHints) {
        return Some(storage);
    }
    assert_unsupported(
        storage.subscribe_appends(&orders()).await,
        "subscribe_appends without Capability::AppendHints",
    );
    None
}

async fn subscribe<S: EventStorage + ?Sized>(storage: &S, stream: &EventStreamId) -> AppendHints {
    storage
        .subscribe_appends(stream)
        .await
        .unwrap_or_else(|error| panic!("subscribe_appends({stream}): {error}"))
}

/// The next hint, skipping `Missed`; panics naming `who` when none comes within [`DEADLINE`].
async fn next_hint(hints: &mut AppendHints, who: &str) -> AppendHint {
    support::within(DEADLINE, &format!("{who} hears of an append"), async {
        loop {
            match hints.next().await {
                Some(AppendNotice::Appended(hint)) => return hint,
                Some(AppendNotice::Missed) => {}
                None => panic!("{who}: the subscription ended before a hint came"),
            }
        }
    })
    .await
}

/// A projection that records the positions it handled.
struct Recording(Arc<Mutex<Vec<u64>>>, EventFilter);

#[async_trait]
impl Projection for Recording {
    fn filter(&self) -> EventFilter {
        self.1.clone()
    }

    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event.reference.position);
        Ok(())
    }
}

/// An elected projector recording the positions of the events of `filter` on [`orders`],
/// leading on its own elector, and polling only every [`LONG_POLL`].
struct RunningProjector {
    seen: Arc<Mutex<Vec<u64>>>,
    elector: LeaderElector,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<ProjectorRun, ProjectorError>>,
}

impl RunningProjector {
    /// Starts it on `storage` and returns once it leads.
    async fn start(storage: &Arc<dyn EventStorage>, filter: EventFilter) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let projector =
            Projector::builder(Arc::clone(storage), Recording(Arc::clone(&seen), filter))
                .stream(orders())
                .bookmark("hinted")
                .build()
                .expect("the projector builds");
        let elector = LeaderElector::builder(Arc::clone(storage), "hinted-projector")
            .owner("node-a")
            .start()
            .or_rule(
                "start",
                "an elector starts on a storage with Capability::Lease, with valid settings",
            );
        let mut leadership = elector.watch();
        support::within(DEADLINE, "node-a leads", leadership.wait_for_leadership()).await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut elected =
            ElectedProjector::new(projector, elector.watch()).poll_interval(LONG_POLL);
        let task = tokio::spawn(async move {
            elected
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
        });
        RunningProjector {
            seen,
            elector,
            stop,
            task,
        }
    }

    /// The positions of the events projected so far.
    fn recorded(&self) -> Vec<u64> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the projector task")
            .unwrap_or_else(|error| {
                panic!(
                    "a projector runs without error while its storage answers every call: {error}"
                )
            });
        self.elector.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    }
}
