//! Small tools the scenarios share: polling with a deadline, the storage's clock, lease
//! requests, and assertions on the errors the contract fixes.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use eventstore_api::EventStorageExt;
use eventstore_api::{
    Capability, EventStorage, EventStorageError, LeaseRequest, LeaseScope, StorageResult,
};

/// How long a scenario waits for a condition that should become true (an expiry, say)
/// before it fails. Generous, because CI machines are shared and slow.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A ttl long enough that a lease never expires during a scenario.
pub const LONG_TTL: Duration = Duration::from_secs(60);

/// A ttl short enough that scenarios can wait for it to expire.
pub const SHORT_TTL: Duration = Duration::from_millis(150);

/// Polls `condition` every few milliseconds until it returns `true`; panics naming `what`
/// when [`DEADLINE`] passes first. Timing in scenarios never relies on a bare sleep.
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if condition().await {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The expiry rule, which every failure of a wait for an expiry names.
pub const EXPIRY_RULE: &str = "expiry is judged on the storage's clock only: a lease is \
    expired once storage_time is strictly after its heartbeat_at + ttl";

/// The message of a check that follows a wait for an expiry ([`wait_until_expired`]):
/// [`EXPIRY_RULE`], that the lease was expired by it, and what `follows` from that.
pub fn after_expiry(follows: &str) -> String {
    format!(
        "{EXPIRY_RULE}; the lease was expired by that rule (storage_time after heartbeat_at + \
         ttl, as get_leases lists it), so {follows}"
    )
}

/// Waits until `lease_name` is expired on the storage's own clock; panics naming
/// [`EXPIRY_RULE`], the lease and the storage's time when [`DEADLINE`] passes first.
pub async fn wait_until_expired<S: EventStorage + ?Sized>(storage: &S, lease_name: &str) {
    let start = Instant::now();
    loop {
        let now = answer(
            storage.storage_time().await,
            "storage_time",
            "storage_time answers on a storage with Capability::Lease",
        );
        let leases = answer(
            storage.get_leases().await,
            "get_leases",
            "get_leases answers on a storage with Capability::Lease",
        );
        let lease = leases.iter().find(|lease| lease.lease_name == lease_name);
        if lease.is_some_and(|lease| lease.is_expired_at(now)) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{EXPIRY_RULE}; yet lease {lease_name:?} is still not expired after {DEADLINE:?}: \
             storage_time {now}, lease {lease:?} (get_leases lists expired leases too)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A request with [`LONG_TTL`] and priority 0.
pub fn request(lease_name: &str, owner: &str) -> LeaseRequest {
    LeaseRequest::new(lease_name, owner, 0, LONG_TTL)
}

/// Whether the storage claims leases. When it does not, asserts that every lease method
/// refuses with `Unsupported`, so a lease scenario still proves something on such a backend.
pub async fn leases_supported<S: EventStorage + ?Sized>(storage: &S) -> bool {
    if storage.supports(Capability::Lease) {
        return true;
    }
    assert_lease_methods_unsupported(storage).await;
    false
}

/// Asserts that every lease method of `storage` returns `Unsupported`.
pub async fn assert_lease_methods_unsupported<S: EventStorage + ?Sized>(storage: &S) {
    assert_unsupported(
        storage.request_lease(request("l", "o")).await,
        "request_lease while supports(Capability::Lease) is false",
    );
    assert_unsupported(
        storage.request_leases(vec![request("l", "o")]).await,
        "request_leases while supports(Capability::Lease) is false",
    );
    assert_unsupported(
        storage.release_lease("l", "o").await,
        "release_lease while supports(Capability::Lease) is false",
    );
    assert_unsupported(
        storage.release_leases(&["l".to_owned()], "o").await,
        "release_leases while supports(Capability::Lease) is false",
    );
    assert_unsupported(
        storage.get_leases().await,
        "get_leases while supports(Capability::Lease) is false",
    );
    assert_unsupported(
        storage.get_leases_with_prefix("l").await,
        "get_leases_with_prefix while supports(Capability::Lease) is false",
    );
    assert_unsupported(
        storage.storage_time().await,
        "storage_time while supports(Capability::Lease) is false",
    );
}

/// Whether the storage claims lease changes (which implies leases). When it does not,
/// asserts that `subscribe_lease_changes` refuses with `Unsupported`, so a lease-change
/// scenario still proves something on such a backend.
pub async fn lease_changes_supported<S: EventStorage + ?Sized>(storage: &S) -> bool {
    if storage.supports(Capability::LeaseChanges) {
        assert!(
            storage.supports(Capability::Lease),
            "Capability::LeaseChanges implies Capability::Lease"
        );
        return true;
    }
    assert_lease_changes_unsupported(storage).await;
    false
}

/// Asserts that `subscribe_lease_changes` of `storage` returns `Unsupported`, for one lease
/// and for every lease.
pub async fn assert_lease_changes_unsupported<S: EventStorage + ?Sized>(storage: &S) {
    for scope in [LeaseScope::lease("l"), LeaseScope::All] {
        let what = format!("subscribe_lease_changes({scope:?})");
        assert_unsupported(storage.subscribe_lease_changes(scope).await, &what);
    }
}

/// A span of the storage's clock, from when it was opened to when an instant is checked
/// against it: storage-assigned times (event timestamps, bookmark `updated_at`) must fall
/// inside.
///
/// The storage's clock is `storage_time` where the backend offers [`Capability::Lease`];
/// otherwise the local clock stands in, widened by [`ClockWindow::LOCAL_SLACK_MILLIS`] on
/// both sides because the backend's clock may be another machine's.
#[derive(Debug, Clone, Copy)]
pub struct ClockWindow {
    opened_at: DateTime<Utc>,
}

impl ClockWindow {
    /// How far a backend without `storage_time` may stray from the local clock.
    pub const LOCAL_SLACK_MILLIS: i64 = 1_000;

    /// Opens a window now, on `storage`'s clock.
    pub async fn open<S: EventStorage + ?Sized>(storage: &S) -> Self {
        ClockWindow {
            opened_at: Self::now(storage).await,
        }
    }

    /// "Now" on `storage`'s clock, or on the local clock when it has none to offer.
    pub async fn now<S: EventStorage + ?Sized>(storage: &S) -> DateTime<Utc> {
        if storage.supports(Capability::Lease) {
            storage
                .storage_time()
                .await
                .unwrap_or_else(|err| panic!("storage_time failed: {err}"))
        } else {
            Utc::now()
        }
    }

    /// Asserts that `instant` lies between the opening of the window and now.
    pub async fn assert_contains<S: EventStorage + ?Sized>(
        &self,
        storage: &S,
        what: &str,
        instant: DateTime<Utc>,
    ) {
        let closed_at = Self::now(storage).await;
        let slack = if storage.supports(Capability::Lease) {
            chrono::Duration::zero()
        } else {
            chrono::Duration::milliseconds(Self::LOCAL_SLACK_MILLIS)
        };
        assert!(
            self.opened_at - slack <= instant && instant <= closed_at + slack,
            "{what} {instant} must lie on the storage's clock between {} and {closed_at} \
             (slack {slack})",
            self.opened_at
        );
    }
}

/// The value of `result`, a backend's answer to `what`; panics naming the `rule` that says
/// the call succeeds, and the error, when it is `Err`.
///
/// ```should_panic
/// # use eventstore_api::{EventStorageError, StorageResult};
/// let refused: StorageResult<u32> = Err(EventStorageError::Closed);
/// eventstore_tck::support::answer(refused, "head", "an open storage answers head");
/// ```
#[track_caller]
pub fn answer<T>(result: StorageResult<T>, what: &str, rule: &str) -> T {
    result.unwrap_or_else(|error| panic!("{rule}: {what} failed with Err({error})"))
}

/// A backend's answer, taken naming the rule that says the call succeeds: a scenario never
/// fails on a bare `expect` or `unwrap` of what the backend answered.
pub trait Answer<T> {
    /// The value; panics naming the `rule` that says the call `what` succeeds, and the
    /// error, when the backend refused it.
    fn or_rule(self, what: &str, rule: &str) -> T;
}

impl<T> Answer<T> for StorageResult<T> {
    #[track_caller]
    fn or_rule(self, what: &str, rule: &str) -> T {
        answer(self, what, rule)
    }
}

/// The one item of `items`, a backend's answer to `what`; panics naming the `rule` that says
/// there is exactly one, and what there was, otherwise.
#[track_caller]
pub fn only<T: Debug>(items: Vec<T>, what: &str, rule: &str) -> T {
    let [item]: [T; 1] = items.try_into().unwrap_or_else(|items: Vec<T>| {
        panic!(
            "{rule}: {what} answered {} items, not one: {items:?}",
            items.len()
        )
    });
    item
}

/// The `N` items of `items`, a backend's answer to `what`; panics naming the `rule` that says
/// there are exactly `N`, and what there was, otherwise.
#[track_caller]
pub fn exactly<const N: usize, T: Debug>(items: Vec<T>, what: &str, rule: &str) -> [T; N] {
    items.try_into().unwrap_or_else(|items: Vec<T>| {
        panic!(
            "{rule}: {what} answered {} items, not {N}: {items:?}",
            items.len()
        )
    })
}

/// The item at `index` of `items`, a backend's answer to `what`; panics naming the `rule`
/// that says it is there, and what there was, otherwise.
#[track_caller]
pub fn nth<'a, T: Debug>(items: &'a [T], index: usize, what: &str, rule: &str) -> &'a T {
    items.get(index).unwrap_or_else(|| {
        panic!(
            "{rule}: {what} answered {} items, so none at index {index}: {items:?}",
            items.len()
        )
    })
}

/// The error of `result`; panics naming `what` and the `expected` error when it is `Ok`.
pub fn expect_err<T: Debug>(
    result: StorageResult<T>,
    what: &str,
    expected: &str,
) -> EventStorageError {
    match result {
        Ok(value) => panic!("{what}: expected {expected}, got Ok({value:?})"),
        Err(err) => err,
    }
}

/// Asserts that `result` is `InvalidInput`, the answer of the input rule `rule` (a function
/// of `eventstore_api::validate`, e.g. `validate_events`, which
/// `eventstore_api::admission::Admission::admit` applies for each method).
pub fn assert_invalid_input<T: Debug>(result: StorageResult<T>, what: &str, rule: &str) {
    let expected = format!(
        "Err(InvalidInput) by the input rule eventstore_api::validate::{rule}, which \
         Admission::admit applies"
    );
    let err = expect_err(result, what, &expected);
    let EventStorageError::InvalidInput { field, problem, .. } = &err else {
        panic!(
            "{what}: expected Err(InvalidInput) by the input rule \
             eventstore_api::validate::{rule}, got Err({err})"
        );
    };
    assert!(
        !field.trim().is_empty() && !problem.trim().is_empty(),
        "{what}: InvalidInput must name what was wrong and the rule it broke, got field \
         {field:?} and problem {problem:?}"
    );
}

/// Asserts that `result` is `Closed`: a closed storage answers `Closed` to every call but
/// `name`, before it looks at the input (`eventstore_api::admission`).
pub fn assert_closed<T: Debug>(result: StorageResult<T>, what: &str) {
    let expected = "Err(Closed), as every call but name answers on a closed storage";
    let err = expect_err(result, what, expected);
    assert!(
        matches!(err, EventStorageError::Closed),
        "{what}: expected Err(Closed), as every call but name answers on a closed storage, \
         got Err({err})"
    );
}

/// Asserts that `result` is `Unsupported`, the answer of a method of a capability the
/// storage does not declare (the trait's default body).
pub fn assert_unsupported<T: Debug>(result: StorageResult<T>, what: &str) {
    let expected = "Err(Unsupported), the answer of a method of an undeclared capability";
    let err = expect_err(result, what, expected);
    assert!(
        matches!(err, EventStorageError::Unsupported { .. }),
        "{what}: expected Err(Unsupported), the answer of a method of an undeclared \
         capability, got Err({err})"
    );
}

/// The messages of `error` and of every source in its chain, outermost first.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut chain = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    chain
}

/// Prints the chain of `error` and asserts that no message repeats a message further down the
/// chain, so that a report of the whole chain (anyhow, eyre, tracing) shows each text once.
pub fn assert_chain_repeats_no_text(error: &(dyn std::error::Error + 'static), what: &str) {
    let chain = error_chain(error);
    eprintln!("{what}: error chain:");
    for (depth, message) in chain.iter().enumerate() {
        eprintln!("  {depth}: {message}");
    }
    assert!(
        chain.len() > 1,
        "{what}: the error keeps no source: {chain:?}"
    );
    for (depth, message) in chain.iter().enumerate() {
        for deeper in chain[depth + 1..]
            .iter()
            .filter(|deeper| !deeper.is_empty())
        {
            assert!(
                !message.contains(deeper.as_str()),
                "{what}: message {depth} {message:?} repeats its source's text {deeper:?}"
            );
        }
    }
}

/// Awaits `future`; panics naming `what` when it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {limit:?}"))
}
