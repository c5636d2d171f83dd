//! Scenarios: the declared capabilities are consistent with each other and with the methods.
//!
//! A capability is a fact the backend declares with `supports`; these scenarios diagnose a
//! declaration that contradicts itself or the methods, by name, before the scenarios of the
//! capability fail for reasons that do not say why: a capability declared without one it
//! needs, a method answering although its capability is not declared, and a capability
//! declared with a method left at the trait's default body (which answers `Unsupported`).

use std::fmt::Debug;

use eventstore_api::EventStorageExt;
use eventstore_api::{
    AppendCriteria, Capability, EventStorage, EventStorageError, EventStreamId, Fence,
    FencingToken, LeaseScope, StorageResult, Tags,
};

use crate::events::{append, labelled};
use crate::support::request;
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[eventstore_api::Capability] = &[];

/// The capabilities that need another one to be declared with them.
const IMPLICATIONS: &[(Capability, Capability, &str)] = &[
    (
        Capability::FencedWrites,
        Capability::Lease,
        "a fence carries a lease's token, checked against the lease",
    ),
    (
        Capability::LeaseChanges,
        Capability::Lease,
        "the changes pushed are those of leases",
    ),
    (
        Capability::LeaseOutcomes,
        Capability::Lease,
        "the outcomes are those of lease requests and releases",
    ),
];

/// The stream the scenarios write to.
fn stream() -> EventStreamId {
    EventStreamId::for_context("capabilities")
}

/// `FencedWrites`, `LeaseChanges` and `LeaseOutcomes` are declared only together with
/// `Lease`, which they need.
pub async fn capabilities_that_need_leases_are_declared_with_leases<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    for &(capability, needed, why) in IMPLICATIONS {
        assert!(
            !storage.supports(capability) || storage.supports(needed),
            "capability rule: Capability::{capability:?} needs Capability::{needed:?} ({why}), \
             but supports(Capability::{capability:?}) is true and \
             supports(Capability::{needed:?}) is false: declare both, or neither"
        );
    }
}

/// Every method of a capability the storage does not declare answers `Unsupported`, as the
/// trait's default bodies do: a method that answers anything else is an override the
/// declaration does not cover.
pub async fn methods_of_an_undeclared_capability_answer_unsupported<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    for (capability, answers) in answers_of_every_capability(&storage).await {
        if storage.supports(capability) {
            continue;
        }
        for (method, answer) in answers {
            assert!(
                matches!(answer, Err(EventStorageError::Unsupported { .. })),
                "capability rule: supports(Capability::{capability:?}) is false, so {method} \
                 must answer Unsupported (the trait's default body), but it answered {}: \
                 declare the capability, or remove the override",
                describe(&answer)
            );
        }
    }
}

/// Every method of a capability the storage declares is implemented: none answers
/// `Unsupported`, the answer of the trait's default body. (Whether the answers are right is
/// for the capability's own scenarios to prove.)
pub async fn methods_of_a_declared_capability_are_implemented<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    for (capability, answers) in answers_of_every_capability(&storage).await {
        if !storage.supports(capability) {
            continue;
        }
        for (method, answer) in answers {
            if let Err(error @ EventStorageError::Unsupported { .. }) = &answer {
                panic!(
                    "capability rule: supports(Capability::{capability:?}) is true, but {method} \
                     answered Unsupported ({error}), which is the trait's default body: \
                     implement it, or stop declaring the capability"
                );
            }
        }
    }
}

/// An answer, the value left out: `Ok(..)`, or the error.
type Answer = StorageResult<String>;

/// Each capability with the answer of each of its methods to valid input, on a storage that
/// holds one event.
async fn answers_of_every_capability<S: EventStorage + ?Sized>(
    storage: &S,
) -> Vec<(Capability, Vec<(&'static str, Answer)>)> {
    let stored = append(storage, &stream(), vec![labelled("Noted", "first")]).await;
    let reference = stored[0].reference;

    let mut lease = vec![
        (
            "request_lease",
            shown(
                storage
                    .request_lease(request("capabilities", "node-a"))
                    .await,
            ),
        ),
        (
            "request_leases",
            shown(
                storage
                    .request_leases(vec![request("capabilities", "node-a")])
                    .await,
            ),
        ),
        ("get_leases", shown(storage.get_leases().await)),
        (
            "get_contenders",
            shown(storage.get_contenders("capabilities").await),
        ),
        ("storage_time", shown(storage.storage_time().await)),
    ];
    // The token the lease was granted with, so that a fenced write may succeed.
    let token = storage
        .get_leases()
        .await
        .ok()
        .and_then(|leases| leases.into_iter().next())
        .map_or(FencingToken(1), |lease| lease.fencing_token);
    let fence = Fence::new("capabilities", token);
    let fenced_writes = vec![
        (
            "append_fenced",
            shown(
                storage
                    .append_fenced(
                        &fence,
                        AppendCriteria::none(),
                        &stream(),
                        vec![labelled("Noted", "fenced")],
                    )
                    .await,
            ),
        ),
        (
            "bookmark_fenced",
            shown(
                storage
                    .bookmark_fenced(&fence, "reader", &reference, Tags::none())
                    .await,
            ),
        ),
    ];
    lease.push((
        "release_lease",
        shown(storage.release_lease("capabilities", "node-a").await),
    ));
    let lease_changes = vec![(
        "subscribe_lease_changes",
        shown(storage.subscribe_lease_changes(LeaseScope::All).await),
    )];
    let lease_outcomes = vec![
        (
            "request_leases_with_outcome",
            shown(
                storage
                    .request_leases_with_outcome(vec![request("capabilities-outcome", "node-a")])
                    .await,
            ),
        ),
        (
            "release_lease_with_outcome",
            shown(
                storage
                    .release_lease_with_outcome("capabilities-outcome", "node-a")
                    .await,
            ),
        ),
    ];
    let append_hints = vec![(
        "subscribe_appends",
        shown(storage.subscribe_appends(&stream()).await),
    )];
    vec![
        (Capability::Lease, lease),
        (Capability::FencedWrites, fenced_writes),
        (Capability::LeaseChanges, lease_changes),
        (Capability::LeaseOutcomes, lease_outcomes),
        (Capability::AppendHints, append_hints),
    ]
}

/// `result` with its value shown in a message.
fn shown<T: Debug>(result: StorageResult<T>) -> Answer {
    result.map(|value| format!("{value:?}"))
}

/// `Ok(value)` or `Err(error)`, for a message.
fn describe(answer: &Answer) -> String {
    match answer {
        Ok(value) => format!("Ok({value})"),
        Err(error) => format!("Err({error})"),
    }
}
