//! The guide for backend authors: from an empty crate to a backend that passes the kit.
//!
//! # 1. Dependencies
//!
//! A backend depends on the API (and on `async-trait`, which
//! [`EventStorage`](eventstore_api::EventStorage) and [`StorageFactory`](crate::StorageFactory)
//! are written with); the kit and tokio are dev-dependencies. The crates are not on crates.io
//! yet: depend on them by git, pinning a `rev` for reproducible builds, or by path to a
//! checkout (`eventstore-api = { path = "../eventstore/eventstore-api" }`).
//!
//! ```toml
//! [dependencies]
//! eventstore-api = { git = "https://github.com/eventstore-rs/eventstore" }
//! async-trait = "0.1"
//!
//! [dev-dependencies]
//! eventstore-tck = { git = "https://github.com/eventstore-rs/eventstore" }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! A backend that keeps events anywhere but in memory also needs the types the model is made
//! of, at the major versions `eventstore-api` uses: `serde_json = "1"` (payloads are
//! `serde_json::Value`), `chrono = "0.4"` (timestamps are `DateTime<Utc>`) and `uuid = "1"`
//! (an [`EventId`](eventstore_api::EventId) wraps a `Uuid`), plus its own driver.
//!
//! # 2. A minimal backend
//!
//! Events in a `Vec` behind a mutex, bookmarks in a map, no leases, and the kit run against
//! it. This is the file `tests/minimal_backend.rs` of this crate, shown as it is:
//! `cargo test -p eventstore-tck --test minimal_backend` runs the whole kit against it, in CI
//! too, and this page compiles it. (The repository's `tests-external/minimal-backend` is the
//! same backend, built in CI against the crates as they are packaged.)
//!
#![doc = concat!("```rust,no_run\n", include_str!("../tests/minimal_backend.rs"), "# fn main() {}\n```")]
//!
//! Put the factory and the [`tck_tests!`](crate::tck_tests) call in your crate's `tests/tck.rs`;
//! `cargo test --test tck` runs every scenario, `cargo test --test tck leases::` one module.
//! Scenarios run in parallel, so `create` must isolate storages from each other (a unique
//! directory, table prefix or schema each time) and must not need cleaning up between runs.
//! Make `another_handle` as independent as your backend allows (a separate connection pool
//! for a database), because the contention scenarios race the two handles against each
//! other. If your backend allows only one handle per storage (an exclusively locked
//! directory, say), return a clone.
//!
//! If your backend's clock is in its process (an `eventstore_api::in_process::StorageClock`),
//! implement [`StorageFactory::step_clock`](crate::StorageFactory::step_clock) too: step that
//! clock forward (`StorageClock::advance`) and answer `Some(())`. The
//! [`storage_clock`](crate::storage_clock) scenarios then step it and check that
//! `storage_time`, lease expiry, event timestamps and bookmark times all follow it: a time
//! read from the wall clock instead agrees with the storage's clock until the system clock
//! steps, so no other scenario can tell. Where the factory cannot step the clock (the
//! default answers `None`; a database server's clock cannot be stepped from a test), those
//! scenarios print why and pass without running.
//!
//! Give the macro the capabilities `supports` answers true for (`capabilities = []` here); the
//! scenarios that need others are reported as ignored, each naming the capability (section 8).
//! Scenarios panic with a message naming the rule that failed and, for an expected error, the
//! variant and the input rule. Time-based scenarios use short ttls and poll the storage's
//! clock with a deadline ([`support::eventually`](crate::support::eventually)); they never
//! rely on a sleep being long enough.
//!
//! # 3. Input rules: automatic with `Admission`
//!
//! Every method answers in one order: a closed storage answers `Closed`, whatever the input;
//! an open one refuses invalid input with `InvalidInput` and changes nothing; only then does
//! it look at what it stores. [`Admission::admit`](eventstore_api::admission::Admission::admit)
//! does both steps, so start every method with it, naming the call's
//! [`Operation`](eventstore_api::admission::Operation); keep one `Admission` shared by every
//! handle of a storage. Each operation applies these rules of
//! [`eventstore_api::validate`]:
//!
//! | method | `Operation` | input rule |
//! |---|---|---|
//! | `append` | `Append` | `validate_criteria`, then `validate_append`: `validate_append_stream` (no wildcard) and `validate_events` (types, tags, payloads, keys; no key twice; at most `MAX_BATCH_BYTES`) |
//! | `query`, `read` | `Query` | `validate_filter` and `validate_stream` (wildcards allowed) |
//! | `head` | `Head` | `validate_stream` |
//! | `subscribe` to `Subscription::Appends` | `SubscribeAppends` | `validate_stream` |
//! | `get_event_by_id`, `get_bookmarks`, `get_leases`, `storage_time`, `subscribe` to `Subscription::LeaseChanges` | `Read` | none |
//! | `bookmark` | `Bookmark` | `validate_reader` and `validate_bookmark_tags` (each tag valid, at most `MAX_BATCH_BYTES` in all) |
//! | `get_bookmark`, `remove_bookmark` | `Reader` | `validate_reader` |
//! | `request_lease` | `RequestLease` | `validate_lease_request` |
//! | `request_leases` | `RequestLeases` | `validate_lease_requests` (one invalid request refuses the batch) |
//! | `request_leases_with_outcome` | `RequestLeases` | `validate_lease_requests`, as `request_leases` |
//! | `release_lease` | `ReleaseLease` | `validate_release` |
//! | `release_leases` | `ReleaseLeases` | `validate_releases` (one invalid name refuses the call) |
//! | `list_leases`, `list_contenders` | `Leases` | `validate_lease_selection`: a lease name must be valid (`validate_name`), a prefix valid text (`validate_text`) |
//! | `append_fenced` | `AppendFenced` | `validate_fence`, then as `append` |
//! | `bookmark_fenced` | `BookmarkFenced` | `validate_fence`, then as `bookmark` |
//!
//! The methods of a capability the backend does not declare need no admission: their default
//! bodies answer `Unsupported`.
//!
//! # 4. The trait: what you write and what comes with it
//!
//! [`EventStorage`](eventstore_api::EventStorage) has 24 methods; its documentation tables
//! which ones a backend writes for each capability and which have default bodies built on
//! those. A backend of events and bookmarks writes nine (`name`, `supports`, `append`, `query`,
//! `get_event_by_id`, `bookmark`, `remove_bookmark`, `get_bookmarks` and `close`); with
//! leases, five more; with fenced writes, sixteen in all. The
//! defaults are correct, and a backend overrides one to do the same work in fewer steps:
//!
//! - **`read`** takes a [`ReadRequest`](eventstore_api::ReadRequest): the query's filter,
//!   stream, bound, limit and direction, plus whether payloads come decoded or as JSON text
//!   ([`Payloads`](eventstore_api::Payloads)) and whether the events come in one answer or
//!   as a stream that holds a page or two at a time ([`Delivery`](eventstore_api::Delivery)).
//!   The default answers whole reads from `query` and streams in keyset pages of `query`;
//!   override it to stream natively (a cursor) or to hand out the text you store
//!   (`Capability::RawPayloads`). Callers use the conveniences of
//!   [`EventStorageExt`](eventstore_api::EventStorageExt) (`query_raw`, `query_stream`,
//!   `query_raw_stream`), which are built on `read` and are not yours to write.
//! - **`list_leases`** and **`list_contenders`** take a
//!   [`LeaseSelection`](eventstore_api::LeaseSelection): every lease, one by name, or those
//!   whose names start with a prefix. `list_leases` defaults to filtering `get_leases`;
//!   `list_contenders` has no default with leases (a contender is not visible through any
//!   other method), so a backend with leases writes it (`LeaseTable::contenders_in`).
//! - **`subscribe`** takes a [`Subscription`](eventstore_api::Subscription), lease changes or
//!   append hints, and answers a [`Subscribed`](eventstore_api::Subscribed) stream of the
//!   matching kind.
//! - **`release_leases`** answers a [`ReleaseOutcome`](eventstore_api::ReleaseOutcome) per
//!   lease (held, or not held); a backend that cannot tell which of several leases it held
//!   answers `Unreported` for those, never a guess.
//!
//! The trait only grows by methods with default bodies, and the methods the contract fixes keep
//! their signatures, so a backend written against one version compiles against the next;
//! `CHANGELOG.md` in the repository says, per version, what changed for backend authors and
//! how to migrate.
//!
//! **Wrapping a storage.** To wrap a storage (to count calls, to inject faults, to hide a
//! capability), implement [`Decorator`](eventstore_api::decorator::Decorator): name the
//! inner storage's type and return it from `inner()`, and override only what you change.
//! Every other method, `supports` included, forwards to the inner storage, so a wrapper can
//! never claim a capability whose methods it fails to forward: the kit's
//! [`decorators`](crate::decorators) scenarios elect a leader behind one. A wrapper that writes
//! its forwarding by hand should carry `#[deny(clippy::missing_trait_methods)]` on its
//! `impl EventStorage`, so that a method added later breaks its build instead of falling to
//! a default.
//!
//! # 5. Helpers
//!
//! What a backend decides is mostly decided by the API already:
//!
//! - [`EventFilter::matches`](eventstore_api::EventFilter::matches): whether a stored event
//!   matches a query's filter.
//! - [`AppendCriteria::is_violated_by`](eventstore_api::AppendCriteria::is_violated_by):
//!   whether a stored event of the stream appended to breaks the append's condition.
//! - [`EventStreamId::covers`](eventstore_api::EventStreamId::covers): whether a stream
//!   (a wildcard, or a context with any purpose) covers an event's stream, for `query`,
//!   `head` and subscriptions.
//! - [`Limit::as_usize`](eventstore_api::Limit::as_usize): the limit as a count for `take`,
//!   `usize::MAX` when unlimited.
//! - [`EventReference::at`](eventstore_api::EventReference::at): the reference of an event
//!   at a position, for a backend whose commit order is its position order.
//! - `eventstore_api::idempotency::judge`: whether a batch is new, a retry or a conflict,
//!   given the events stored under its keys.
//! - `eventstore_api::in_process::StorageClock`: "now" that never goes backwards, for a
//!   backend whose clock is the process's.
//!
//! # 6. What the contract means where it is short
//!
//! - **`after` on a backward read** bounds the storage's order, not the reading direction:
//!   it selects the events after the reference, then the read returns them newest first.
//!   Reading `e0..e4` backward after `e1` answers `e4, e3, e2`. The limit counts from the
//!   first event in the reading direction (the newest, backward).
//! - **A bound is a place in the order**: `after`, `until` and `expected_last` compare
//!   `EventReference::order_key` (`(tx, position)`), not the reference with its id. `Ord`
//!   breaks ties by id only to agree with `Eq`; a reference kept without its id bounds as the
//!   event at its place does.
//! - **An empty batch** stores nothing and answers an empty list. It carries no idempotency
//!   key, so it is never a retry, and its criteria are checked as any batch's: a violated
//!   condition is `OptimisticLock`.
//! - **Append criteria look only at the stream appended to.** Events of other streams never
//!   conflict, even when the filter matches them.
//! - **One timestamp per batch**: a batch is one write at one instant, so all its events carry
//!   the same timestamp, from the storage's clock.
//! - **Positions** are the backend's own numbering: they may start at 0 or 1 and leave gaps;
//!   only their order (with `tx`) is fixed.
//! - **Errors name the stream** as [`EventStreamId`](eventstore_api::EventStreamId) displays it
//!   (`orders/default`), and `OptimisticLock` names the criteria's expected last event exactly
//!   as given.
//! - **The storage's own coordinates** of a bookmark: `bookmark` looks the event up by the
//!   reference's id and keeps the reference this storage gave that event (its position and
//!   `tx`), whatever position or `tx` the caller passed with the id; `get_bookmark` and
//!   `get_bookmarks` answer that reference.
//! - **`close` closes every handle, and `another_handle` stands for another process.** Clones
//!   of a storage are handles in one process and share its open or closed state: `close` on
//!   any of them closes all. A handle from `another_handle` stands for a second process on
//!   the same data: the kit never expects one process's `close` to reach it, and checks only
//!   that what one handle writes, the other reads. A backend in memory, which has no second
//!   process, returns a clone; closing it then closes both, which no scenario minds.
//!
//! # 7. What every backend promises
//!
//! Events and bookmarks are not optional ([`events`](crate::events), [`bookmarks`](crate::bookmarks), [`lifecycle`](crate::lifecycle)):
//!
//! - **Appends** are all or nothing; the condition of a conditional append
//!   ([`AppendCriteria`](eventstore_api::AppendCriteria)) is checked atomically with the
//!   write, so of several racing appends to one boundary exactly one wins.
//! - **Idempotency keys** are unique per stream; a batch whose events are all stored under
//!   their keys is a retry, stores nothing and answers the stored events; a stored key with a
//!   different event, or stored keys mixed with new ones, is `IdempotencyConflict`.
//!   `eventstore_api::idempotency::judge` decides it: look up the stored events, then call it.
//! - **Queries** return the events of the covered streams that match the filter, strictly
//!   after `after`, in the asked direction, at most `limit` of them.
//! - **Bookmarks** name an event the storage holds (else `UnknownEvent`, old bookmark kept) and
//!   are reported in the storage's own coordinates.
//! - **Input rules and their order**: start every method with
//!   `eventstore_api::admission::Admission::admit`. A closed storage answers `Closed`, whatever
//!   the input; an open one refuses invalid input with `InvalidInput` before changing anything,
//!   exactly as every other backend does.
//! - **Close** is idempotent, closes every handle, and leaves only `name` answering. It also
//!   ends every subscription the storage handed out, lease changes and append hints alike:
//!   each yields what it still holds, then `None`, at once (close the hubs,
//!   `LeaseChangeHub::close` and `AppendHintHub::close`, in `close`). A reader blocked on a
//!   subscription of a closed storage would otherwise wait forever;
//!   [`lifecycle::close_ends_every_subscription_promptly`](crate::lifecycle::close_ends_every_subscription_promptly)
//!   checks it within two seconds.
//!
//! # 8. Capabilities
//!
//! A capability is a fact your backend declares with
//! [`EventStorage::supports`](eventstore_api::EventStorage::supports); the kit reads it at run
//! time and holds you to it.
//!
//! - **`Capability::Lease`**: `request_lease`, `request_leases`, `release_lease`,
//!   `release_leases`, `get_leases`, `list_leases`, `list_contenders` and `storage_time`
//!   follow the lease rules exactly ([`leases`](crate::leases)). `list_contenders`' default
//!   body answers `Unsupported` whatever `supports` says, so implement it
//!   (`LeaseTable::contenders_in` answers it); the other defaults are built on the methods
//!   above. One call
//!   acquires, renews and registers the contender; expiry is judged on the storage's clock
//!   only; a fencing token is 1 for the first holder, unchanged by renewal, and strictly
//!   higher on every other grant, never repeating, also after a release or a restart;
//!   concurrent requests elect exactly one holder; a release makes the lease acquirable at
//!   once and withdraws the contender; strictly higher live priority asks the holder to step
//!   down and nothing else does; a batch answers exactly as its requests one by one and one
//!   invalid request refuses it whole.
//!   Without this capability, leave the trait's default bodies in place, which answer
//!   `Unsupported`.
//! - **`Capability::FencedWrites`** (needs `Lease`): `append_fenced` and `bookmark_fenced`
//!   write only while the fence's lease is live on the storage's clock with the presented
//!   token as its current one, checked atomically with the write; otherwise `Fenced` and
//!   nothing written ([`fenced_writes`](crate::fenced_writes), [`election`](crate::election)).
//!   The token alone is not enough: the current token of a lease that expired or was
//!   released, with nobody taking it since, fences nothing. And check and write are one step:
//!   hold the lock the lease table is under from the check until the write is done, with
//!   no await point between that lets a release or a takeover in (a database checks inside
//!   the write's transaction, holding a lock on the lease that a release or a takeover must
//!   take exclusively, as the PostgreSQL backend does). Without it, those methods return
//!   `Unsupported`.
//! - **`Capability::LeaseChanges`** (needs `Lease`): `subscribe` to
//!   `Subscription::LeaseChanges` pushes every
//!   change of the leases in its scope ([`lease_changes`](crate::lease_changes)): releases (owner, token, preferred
//!   successor), acquisitions (token, and whether they took over an expired tenure),
//!   step-down requests, contenders joining and leaving, from every handle of the storage;
//!   a renewal pushes nothing, and closing the storage ends every subscription. Notifications
//!   are hints that only wake requesters early: every decision stays with `request_lease`.
//!   `eventstore_api::lease_changes::LeaseChangeHub` does the fan-out: publish each change
//!   there and hand out its subscriptions. Without the capability, such a `subscribe` returns
//!   `Unsupported`.
//! - **`Capability::LeaseOutcomes`** (needs `Lease`): `request_leases_with_outcome` answers
//!   as `request_leases` and says for each answer whether it took the lease over from
//!   another owner that let it expire without a release; `release_leases` says for each lease
//!   whether the caller held it ([`lease_outcomes`](crate::lease_outcomes)). Decide both in
//!   the same step as the answer: `eventstore_api::in_process::LeaseTable` returns them from
//!   `request_with_outcome` and `release`. Without the capability,
//!   `request_leases_with_outcome` returns `Unsupported` and `release_leases`' default answers
//!   `Unreported` outcomes; electors then count no takeovers.
//! - **`Capability::RawPayloads`**: a `read` with `Payloads::Raw` hands out payloads as the
//!   JSON text the backend read, which typed streams decode from directly. Declare it when
//!   your backend stores payloads as text and overrides `read` to return that text; the
//!   default writes `query`'s values out, correct but no cheaper. Typed replays then stream
//!   raw reads; a backend that overrides `read` to stream natively serves both payload kinds
//!   from that one method. Nothing a caller can observe
//!   depends on it, so no scenario needs it and `tck_tests!` does not take it: every backend
//!   runs the scenarios that hold `query_raw` to `query`
//!   ([`query_raw_returns_what_query_returns_with_payloads_as_text`](crate::events::query_raw_returns_what_query_returns_with_payloads_as_text))
//!   and `query_raw_stream` to `query_raw`
//!   ([`query_raw_stream_yields_what_query_raw_returns`](crate::events::query_raw_stream_yields_what_query_raw_returns)).
//!
//! Give [`tck_tests!`](crate::tck_tests) the capabilities `supports` answers true for. The
//! test of a scenario that needs one you do not declare (its module says which in code, in a
//! constant `NEEDS: &[Capability]`, or `NEEDS_<SCENARIO>` for one scenario) is reported as
//! ignored with the reason, `needs Capability::Lease, which this
//! backend does not declare`, and
//! `declared_capabilities::match_the_storage_and_decide_which_scenarios_run` prints how many
//! scenarios ran and how many did not apply, by capability; for the minimal backend, when this
//! was written:
//!
//! ```text
//! eventstore-tck on `vec`: 180 scenarios: 85 run, 95 not applicable
//!   6 need Capability::AppendHints, which this backend does not declare
//!   89 need Capability::Lease, which this backend does not declare
//! ```
//!
//! That test fails when the list given to the macro and `supports` disagree. A backend
//! written before leases existed still passes the kit, by refusing them honestly.
//!
//! # 9. Append hints
//!
//! With `Capability::AppendHints`, `subscribe(Subscription::Appends { stream })` hands out a
//! subscription of
//! **hints**: each says that events were appended to a stream the subscription covers, up to
//! a reference ([`AppendHint`](eventstore_api::AppendHint)). A hint only wakes a reader early
//! (a projector, a `query_stream` that follows the log): the read itself decides what is new,
//! and the reader keeps polling on its own timer, so a missed hint costs at most one poll
//! interval ([`append_hints`](crate::append_hints)).
//!
//! - **After the append is durable**: publish the hint once the append is committed (the
//!   transaction committed, the file synced), never before; on PostgreSQL a read right after
//!   may still hold the event back behind older writes (the visibility barrier), and a reader
//!   then reads again later.
//! - **At most one per append**: one hint naming the batch's last event, never one per event;
//!   a retry that stores nothing and a refused append send none.
//! - **The subscription ends on `close`**: closing the storage ends every subscription (its
//!   stream yields `None`), as it ends those of lease changes.
//! - **The hub**: keep one [`AppendHintHub`](eventstore_api::append_hints::AppendHintHub) per
//!   storage, shared by its handles: `subscribe` hands out the subscriptions (a scope's
//!   channel goes with its last subscription), `publish` sends a hint to the subscriptions
//!   whose stream covers it, `missed` tells them to read again when hints may have been lost
//!   (a reconnect), and `close`, called from the storage's `close`, ends them all.
//!
//! Without the capability, `subscribe` keeps its default body, which answers `Unsupported`;
//! readers then poll.
//!
//! # 10. Beyond the scenarios
//!
//! [`wrappers`](crate::wrappers) holds storages that wrap yours to stage what a healthy backend does not do on
//! demand: [`wrappers::EventsOnly`](crate::wrappers::EventsOnly) hides its capabilities, [`wrappers::Unreliable`](crate::wrappers::Unreliable) stops
//! answering at the flip of a switch. Use them in your own tests of code that runs on a
//! storage; [`support`](crate::support) has the polling and assertions the scenarios are written with.
//!
//! The kit is itself checked against mistakes: `docs/MUTATIONS.md` in the repository lists the
//! deliberate mistakes put into a small backend, one at a time, and the kit's score.
