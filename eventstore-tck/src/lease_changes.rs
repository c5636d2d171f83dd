//! Scenarios: lease changes pushed to subscribers
//! ([`eventstore_api::Capability::LeaseChanges`]).
//!
//! Each scenario proves one rule of [`EventStorageExt::subscribe_lease_changes`]: which change
//! reaches which subscriber and what it names, that a renewal reaches nobody, and that
//! closing the storage ends every subscription. Run on a backend that does not
//! declare the capability (reported as ignored there unless run with `--include-ignored`),
//! each scenario proves instead that subscribing refuses with `Unsupported`.
//!
//! A backend may push more than a scenario causes (the departure of a lapsed contender, or
//! [`LeaseNotice::Missed`]), so scenarios wait for the notice they expect and skip the
//! others, never longer than [`DEADLINE`]. Only the renewal scenario looks at the very first
//! notice, because nothing may come before the release that follows the renewals.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore_api::lease_changes::SUBSCRIBER_BACKLOG;
use eventstore_api::Capability;
use eventstore_api::EventStorageExt;
use eventstore_api::{
    EventStorage, FencingToken, LeaseChange, LeaseChangeKind, LeaseChanges, LeaseNotice,
    LeaseScope, LeaseStatus,
};

use crate::leases::{release, request, storage_time};
use crate::support::Answer as _;
use crate::support::{self, assert_closed, DEADLINE, LONG_TTL, SHORT_TTL};
use crate::wrappers::EventsOnly;
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease, Capability::LeaseChanges];

/// How long the flood of changes may take at most (thousands of requests, on any backend).
const FLOOD_DEADLINE: Duration = Duration::from_secs(60);

/// How soon a release made by another task must reach a subscriber that only waits.
const PUSH_DEADLINE: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// What each change names
// ---------------------------------------------------------------------------------------------

/// A release reaches the subscribers of the lease, naming the owner that released it, the
/// token of the tenure that ended and the successor: the live contender with the highest
/// priority, ties going to the smallest owner id, never the releaser itself nor a contender
/// whose ttl lapsed.
pub async fn a_release_is_pushed_naming_owner_token_and_successor<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;
    // The releaser outranks every live contender, so naming it would be wrong.
    let token = acquire(&storage, "orders", "node-a", 10, LONG_TTL).await;
    for (owner, priority) in [("node-c", 5), ("node-b", 5), ("node-d", 1)] {
        request(&storage, "orders", owner, priority, LONG_TTL).await;
    }
    // Outranks everyone, but lapses before the release.
    request(&storage, "orders", "node-z", 100, SHORT_TTL).await;
    wait_until_lapsed(&storage, storage_time(&storage).await, SHORT_TTL).await;
    release(&storage, "orders", "node-a").await;

    let released = expect_change(&mut changes, "a release is pushed", is_release).await;
    let expected = LeaseChangeKind::Released {
        owner: "node-a".into(),
        token,
        successor: Some("node-b".into()),
    };
    assert_eq!(
        released,
        change("orders", expected),
        "a release names its owner, its token and, as successor, the live contender of \
         highest priority (ties to the smallest id), not the releaser nor a lapsed contender"
    );
}

/// Every acquisition reaches the subscribers with the new holder and its token, saying
/// whether it took over a tenure that expired without a release: not for the first grant,
/// yes after an expiry, not after a release.
pub async fn an_acquisition_is_pushed_saying_whether_it_followed_an_expiry<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;

    let first = acquire(&storage, "orders", "node-a", 0, SHORT_TTL).await;
    let rule = "the first grant is pushed, not after an expiry";
    expect_acquired(&mut changes, rule, "node-a", first, false).await;

    support::wait_until_expired(&storage, "orders").await;
    let takeover = acquire(&storage, "orders", "node-b", 0, LONG_TTL).await;
    let rule = "a takeover of a tenure that expired without a release is pushed as after expiry";
    expect_acquired(&mut changes, rule, "node-b", takeover, true).await;

    release(&storage, "orders", "node-b").await;
    let after_release = acquire(&storage, "orders", "node-c", 0, LONG_TTL).await;
    let rule = "an acquisition after a release is pushed, not after an expiry";
    expect_acquired(&mut changes, rule, "node-c", after_release, false).await;
}

/// A contender registering with a strictly higher priority than the live holder's reaches
/// the subscribers as a step-down request naming the holder, its token and the contender;
/// one of equal priority asks nothing.
pub async fn a_contender_outranking_the_holder_pushes_a_step_down_request<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let token = acquire(&storage, "orders", "node-a", 5, LONG_TTL).await;
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;
    request(&storage, "orders", "node-b", 5, LONG_TTL).await;
    request(&storage, "orders", "node-c", 6, LONG_TTL).await;

    let asked = expect_change(&mut changes, "a step-down request is pushed", |change| {
        matches!(change.kind, LeaseChangeKind::StepDownRequested { .. })
    })
    .await;
    let expected = LeaseChangeKind::StepDownRequested {
        holder: "node-a".into(),
        token,
        contender: "node-c".into(),
    };
    assert_eq!(
        asked,
        change("orders", expected),
        "the first step-down request names the holder, its token and the contender of \
         priority 6 over the holder's 5 (the contender of equal priority asks nothing)"
    );
}

/// Contenders reach the subscribers as they join, as they register again with another
/// priority, and as they leave by releasing, standby and holder alike, in that order.
pub async fn contenders_joining_and_leaving_are_pushed<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;
    request(&storage, "orders", "node-a", 3, LONG_TTL).await;
    request(&storage, "orders", "node-b", 7, LONG_TTL).await;
    request(&storage, "orders", "node-b", 2, LONG_TTL).await;
    release(&storage, "orders", "node-b").await;
    release(&storage, "orders", "node-a").await;

    let joined = |owner: &str, priority| LeaseChangeKind::ContenderJoined {
        owner: owner.into(),
        priority,
    };
    let left = |owner: &str| LeaseChangeKind::ContenderLeft {
        owner: owner.into(),
    };
    let expected = [
        ("node-a joins", joined("node-a", 3)),
        ("node-b joins", joined("node-b", 7)),
        (
            "node-b registers again with another priority",
            joined("node-b", 2),
        ),
        ("node-b, standing by, leaves by releasing", left("node-b")),
        ("node-a, the holder, leaves by releasing", left("node-a")),
    ];
    for (rule, kind) in expected {
        let heard = expect_change(&mut changes, rule, |change| {
            matches!(
                change.kind,
                LeaseChangeKind::ContenderJoined { .. } | LeaseChangeKind::ContenderLeft { .. }
            )
        })
        .await;
        assert_eq!(heard, change("orders", kind), "{rule}, in order");
    }
}

// ---------------------------------------------------------------------------------------------
// What reaches whom
// ---------------------------------------------------------------------------------------------

/// A renewal reaches nobody, nor does a standby's refresh with an unchanged priority: after
/// several of each, the first notice a subscriber hears is of the holder's release.
pub async fn a_renewal_pushes_nothing<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let token = acquire(&storage, "orders", "node-a", 0, LONG_TTL).await;
    request(&storage, "orders", "node-b", 0, LONG_TTL).await;
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;
    // Notices of the changes above may still be on their way; once node-c's joining is
    // heard, every later notice was caused by what follows.
    request(&storage, "orders", "node-c", 0, LONG_TTL).await;
    expect_change(&mut changes, "a contender joining is pushed", |change| {
        matches!(&change.kind, LeaseChangeKind::ContenderJoined { owner, .. } if owner == "node-c")
    })
    .await;

    for renewal in 0..5 {
        let renewed = acquire(&storage, "orders", "node-a", 0, LONG_TTL).await;
        assert_eq!(renewed, token, "renewal {renewal} keeps the token");
        for standby in ["node-b", "node-c"] {
            request(&storage, "orders", standby, 0, LONG_TTL).await;
        }
    }
    release(&storage, "orders", "node-a").await;

    let first = expect_change(&mut changes, "the release is pushed", |_| true).await;
    let of_the_release = first.lease_name == "orders"
        && matches!(
            &first.kind,
            LeaseChangeKind::Released { owner, .. } | LeaseChangeKind::ContenderLeft { owner }
                if owner == "node-a"
        );
    assert!(
        of_the_release,
        "a renewal and a standby's refresh push nothing: the first notice after them must be \
         of node-a's release, got {first:?}"
    );
}

/// A subscriber of one lease hears nothing of another, and a subscriber of every lease hears
/// both.
pub async fn subscribers_hear_only_the_leases_of_their_scope<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let mut orders = subscribe(&storage, LeaseScope::lease("orders")).await;
    let mut all = subscribe(&storage, LeaseScope::All).await;
    for lease_name in ["billing", "orders"] {
        acquire(&storage, lease_name, "node-a", 0, LONG_TTL).await;
    }
    for lease_name in ["billing", "orders"] {
        release(&storage, lease_name, "node-a").await;
    }

    let rule = "a subscriber of orders hears the release of orders";
    let heard = changes_until(&mut orders, rule, |change| {
        change.lease_name == "orders" && is_release(change)
    })
    .await;
    assert!(
        heard.iter().all(|change| change.lease_name == "orders"),
        "a subscriber of orders hears nothing of billing, heard {heard:?}"
    );

    // Leases change independently, so their notices may interleave in any order.
    let mut released = HashSet::new();
    changes_until(
        &mut all,
        "a subscriber of every lease hears both releases",
        |change| {
            if is_release(change) {
                released.insert(change.lease_name.clone());
            }
            released.len() == 2
        },
    )
    .await;
}

/// A change made through another handle of the storage, as another process would make it,
/// reaches a subscriber on the first handle.
pub async fn a_change_through_another_handle_is_pushed<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let other = factory.another_handle(&storage).await;
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;
    let token = acquire(&other, "orders", "node-b", 0, LONG_TTL).await;
    release(&other, "orders", "node-b").await;

    let rule = "an acquisition through another handle is pushed";
    expect_acquired(&mut changes, rule, "node-b", token, false).await;
    let rule = "a release through another handle is pushed";
    let released = expect_change(&mut changes, rule, is_release).await;
    let expected = LeaseChangeKind::Released {
        owner: "node-b".into(),
        token,
        successor: None,
    };
    assert_eq!(released, change("orders", expected), "{rule}");
}

/// Notices are pushed: a release made by another task reaches a subscriber within two
/// seconds while the subscriber does nothing but wait for its next notice.
pub async fn a_release_reaches_a_waiting_subscriber_without_polling<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let other = factory.another_handle(&storage).await;
    let token = acquire(&other, "orders", "node-a", 0, LONG_TTL).await;
    let mut changes = subscribe(&storage, LeaseScope::lease("orders")).await;

    let releaser = tokio::spawn(async move { release(&other, "orders", "node-a").await });
    let rule = "a release by another task reaches a subscriber that only waits";
    let waiting = expect_change(&mut changes, rule, is_release);
    let heard = tokio::time::timeout(PUSH_DEADLINE, waiting).await;
    tokio::time::timeout(DEADLINE, releaser)
        .await
        .expect("the release to finish")
        .expect("the releasing task");

    let released = heard.unwrap_or_else(|_| panic!("{rule}: nothing within {PUSH_DEADLINE:?}"));
    let expected = LeaseChangeKind::Released {
        owner: "node-a".into(),
        token,
        successor: None,
    };
    assert_eq!(released, change("orders", expected), "{rule}");
}

/// A subscriber that reads nothing never holds up lease requests: a flood of changes, more
/// than any backlog holds, is answered in full; the slow subscriber is then told that it
/// missed notices, and still gets the newest change after that.
pub async fn a_flood_of_changes_never_blocks_requests_and_a_slow_subscriber_is_told_it_lagged<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let mut slow = subscribe(&storage, LeaseScope::lease("orders")).await;
    // Each round is a release and an acquisition: at least two changes.
    let rounds = SUBSCRIBER_BACKLOG;
    let flood = async {
        for round in 0..rounds {
            let owner = if round % 2 == 0 { "node-a" } else { "node-b" };
            acquire(&storage, "orders", owner, 0, LONG_TTL).await;
            release(&storage, "orders", owner).await;
        }
    };
    tokio::time::timeout(FLOOD_DEADLINE, flood)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{rounds} acquisitions and releases with a subscriber that reads nothing must \
                 not block: not done within {FLOOD_DEADLINE:?}"
            )
        });
    let last = acquire(&storage, "orders", "node-c", 0, LONG_TTL).await;

    let first = tokio::time::timeout(DEADLINE, slow.next()).await;
    assert_eq!(
        first,
        Ok(Some(LeaseNotice::Missed)),
        "a subscriber that fell more than a backlog behind is told that it missed notices first"
    );
    let newest = changes_until(
        &mut slow,
        "after the missed notices, the slow subscriber still gets the newest change",
        |change| {
            matches!(&change.kind, LeaseChangeKind::Acquired { owner, token, .. }
                if owner == "node-c" && *token == last)
        },
    )
    .await;
    assert!(
        !newest.is_empty(),
        "lagging rule: a subscriber that lagged still receives the newest changes"
    );
}

// ---------------------------------------------------------------------------------------------
// Lifecycle and refusals
// ---------------------------------------------------------------------------------------------

/// Closing the storage ends every subscription of every handle of the process once its
/// backlog is read (`next` answers `None`), and subscribing to a closed storage is `Closed`.
pub async fn closing_the_storage_ends_every_subscription<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_lease_changes(factory).await else {
        return;
    };
    let clone = storage.clone();
    let mut one = subscribe(&storage, LeaseScope::lease("orders")).await;
    let mut all = subscribe(&clone, LeaseScope::All).await;
    // A backlog the subscribers have not read yet.
    acquire(&storage, "orders", "node-a", 0, LONG_TTL).await;
    storage
        .close()
        .await
        .or_rule("close", "close succeeds, and again once closed");

    for (which, changes) in [("of one lease", &mut one), ("of every lease", &mut all)] {
        let ended =
            tokio::time::timeout(DEADLINE, async { while changes.next().await.is_some() {} });
        ended.await.unwrap_or_else(|_| {
            panic!("closing the storage ends a subscription {which}: still open after {DEADLINE:?}")
        });
    }
    for (which, handle) in [("the closed handle", &storage), ("a clone of it", &clone)] {
        for scope in [LeaseScope::lease("orders"), LeaseScope::All] {
            let what = format!("subscribe_lease_changes({scope:?}) through {which}");
            assert_closed(handle.subscribe_lease_changes(scope).await, &what);
        }
    }
}

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_A_STORAGE_WITHOUT_THE_CAPABILITY_REFUSES_SUBSCRIPTIONS: &[Capability] = &[];

/// A storage without the capability refuses subscriptions with `Unsupported`: always when
/// its capabilities are hidden ([`EventsOnly`]), and the storage itself when it does not
/// declare the capability.
pub async fn a_storage_without_the_capability_refuses_subscriptions<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    support::assert_lease_changes_unsupported(&EventsOnly::new(storage.clone())).await;
    if support::lease_changes_supported(&storage).await {
        // One that declares it accepts subscriptions.
        subscribe(&storage, LeaseScope::All).await;
    }
}

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// A fresh storage, or `None` when it does not offer lease changes (having proved that
/// subscribing then refuses with `Unsupported`).
async fn storage_with_lease_changes<F: StorageFactory>(factory: &F) -> Option<F::Storage> {
    let storage = factory.create().await;
    support::lease_changes_supported(&storage)
        .await
        .then_some(storage)
}

/// Subscribes, which must succeed.
async fn subscribe<S: EventStorage + ?Sized>(storage: &S, scope: LeaseScope) -> LeaseChanges {
    storage
        .subscribe_lease_changes(scope.clone())
        .await
        .unwrap_or_else(|error| panic!("subscribe_lease_changes({scope:?}): {error}"))
}

/// Requests `lease_name`, which the caller must get (acquired or renewed); returns its token.
async fn acquire<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> FencingToken {
    let response = request(storage, lease_name, owner, priority, ttl).await;
    assert_eq!(
        (response.status, response.current_owner.as_str()),
        (LeaseStatus::Leader, owner),
        "{owner} must hold {lease_name}: {response:?}"
    );
    response.fencing_token
}

/// Waits until a contender registered no later than `registered_by` with `ttl` has lapsed on
/// the storage's clock.
async fn wait_until_lapsed<S: EventStorage + ?Sized>(
    storage: &S,
    registered_by: DateTime<Utc>,
    ttl: Duration,
) {
    let lapsed_after = registered_by + chrono::Duration::from_std(ttl).expect("ttl fits");
    support::eventually("a contender to lapse on the storage's clock", || async {
        storage_time(storage).await > lapsed_after
    })
    .await;
}

fn change(lease_name: &str, kind: LeaseChangeKind) -> LeaseChange {
    LeaseChange {
        lease_name: lease_name.to_owned(),
        kind,
    }
}

fn is_release(change: &LeaseChange) -> bool {
    matches!(change.kind, LeaseChangeKind::Released { .. })
}

/// The changes `changes` yields up to and including the first that `wanted` accepts.
/// `Missed` is skipped: it only says that notices may have been lost. Panics naming `rule`
/// when the subscription ends or [`DEADLINE`] passes first.
async fn changes_until(
    changes: &mut LeaseChanges,
    rule: &str,
    mut wanted: impl FnMut(&LeaseChange) -> bool,
) -> Vec<LeaseChange> {
    let mut heard = Vec::new();
    let read = async {
        loop {
            match changes.next().await {
                Some(LeaseNotice::Changed(change)) => {
                    let found = wanted(&change);
                    heard.push(change);
                    if found {
                        return true;
                    }
                }
                Some(LeaseNotice::Missed) => {}
                None => return false,
            }
        }
    };
    match tokio::time::timeout(DEADLINE, read).await {
        Ok(true) => heard,
        Ok(false) => panic!("{rule}: the subscription ended first, having heard {heard:?}"),
        Err(_) => panic!("{rule}: nothing such within {DEADLINE:?}, having heard {heard:?}"),
    }
}

/// The first change `changes` yields that `wanted` accepts, skipping the others; panics as
/// [`changes_until`].
async fn expect_change(
    changes: &mut LeaseChanges,
    rule: &str,
    wanted: impl FnMut(&LeaseChange) -> bool,
) -> LeaseChange {
    let mut heard = changes_until(changes, rule, wanted).await;
    heard
        .pop()
        .expect("changes_until ends with the wanted change")
}

/// Waits for the next acquisition and asserts that it is of `orders` by `owner` with `token`,
/// and whether it followed an expiry.
async fn expect_acquired(
    changes: &mut LeaseChanges,
    rule: &str,
    owner: &str,
    token: FencingToken,
    after_expiry: bool,
) {
    let acquired = expect_change(changes, rule, |change| {
        matches!(change.kind, LeaseChangeKind::Acquired { .. })
    })
    .await;
    let expected = LeaseChangeKind::Acquired {
        owner: owner.into(),
        token,
        after_expiry,
    };
    assert_eq!(acquired, change("orders", expected), "{rule}");
}
