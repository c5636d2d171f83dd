//! # Leader-elected projectors
//!
//! A projector that must run on exactly one instance of a deployment: it resumes from the
//! bookmark the previous owner left, hands over cleanly on deploys, and cannot do harm as a
//! zombie. Two mechanisms answer two questions: the **lease** decides *who* processes, the
//! **bookmark** decides *from where*.
//!
//! | piece | what it does |
//! |---|---|
//! | [`LeaderElector`] | one per instance: requests the lease every interval, publishes [`Leadership`] |
//! | [`Projector`] | runs a [`Projection`] in batches, bookmarks after each batch |
//! | [`ElectedProjector`] | runs the projector only while its instance leads, with its writes fenced |
//! | [`Fence`] | a lease name and token: a write carrying it succeeds only for the live holder |
//!
//! ## An example
//!
//! A revenue projection, run by every instance of a deployment on one shared storage
//! (`Arc<dyn EventStorage>` of any backend with leases). The instance that leads projects;
//! when it shuts down, the next one takes over from its bookmark.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! use eventstore::elector::LeaderElector;
//! use eventstore::projector::{ElectedProjector, Projection, ProjectionError, Projector};
//! use eventstore::store::{Envelope, NamedEvent};
//! use eventstore::{EventReference, EventStorage, EventStreamId, StoredEvent};
//!
//! /// The event, stored under an explicit name that a Rust rename does not change.
//! #[derive(Debug, serde::Serialize, serde::Deserialize)]
//! struct OrderPlaced { amount: u64 }
//!
//! impl NamedEvent for OrderPlaced {
//!     const EVENT_TYPE: &'static str = "OrderPlaced";
//! }
//!
//! /// The read model: revenue, committed once per batch (in real life: a table, in one
//! /// transaction with whatever else the batch changes).
//! struct Revenue { committed: Arc<Mutex<u64>>, pending: u64 }
//!
//! #[async_trait::async_trait]
//! impl Projection for Revenue {
//!     async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
//!         let order = Envelope::<OrderPlaced>::decode(event.clone())?;
//!         self.pending += order.event.amount;
//!         Ok(())
//!     }
//!     async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
//!         *self.committed.lock().unwrap() += std::mem::take(&mut self.pending);
//!         Ok(()) // the projector writes the bookmark after this returns
//!     }
//!     async fn cancel_batch(&mut self) {
//!         self.pending = 0;
//!     }
//! }
//!
//! /// One instance (its owner id a fresh `unique_owner_id()`): elects, and projects while
//! /// it leads, until `stopped`; then releases the lease, so that a standby takes over at once.
//! async fn run_instance(
//!     storage: Arc<dyn EventStorage>,
//!     revenue: Arc<Mutex<u64>>,
//!     stopped: impl std::future::Future<Output = ()>,
//! ) {
//!     let elector = LeaderElector::builder(storage.clone(), "revenue-projector")
//!         .ttl(Duration::from_secs(15))
//!         .start()
//!         .expect("a storage with leases");
//!     let projector = Projector::builder(storage, Revenue { committed: revenue, pending: 0 })
//!         .stream(EventStreamId::for_context("orders"))
//!         .bookmark("revenue")
//!         .build()
//!         .expect("valid settings");
//!     let mut elected = ElectedProjector::new(projector, elector.watch());
//!     elected.run_until(stopped).await.expect("the projection never fails");
//!     elector.shutdown().await.expect("the lease released");
//! }
//! ```
//!
//! The repository runs this projection on the in-memory backend with two instances and a
//! deploy between them (`eventstore-tests/tests/guide.rs`): the second instance resumes from
//! the first one's bookmark, so it projects only the orders the first did not, and leads
//! with the next fencing token.
//!
//! ## Leadership is a deadline, not a flag
//!
//! A lease is judged on the storage's clock, and the storage counts a ttl from when it
//! *received* a request. The elector counts from when it *sent* the request, on its own
//! monotonic clock, and gives up a small margin earlier: so it stops believing it leads
//! before the storage lets anyone else take over. A request that fails or hangs confirms
//! nothing; the elector publishes [`Leadership::Unknown`] at the deadline even while the
//! request is still outstanding, and [`LeadershipWatch::is_leader`] checks the deadline
//! itself on every call. No comparison of instants across machines happens anywhere.
//!
//! The request interval defaults to a third of the ttl, which leaves two failed attempts
//! before leadership lapses; the elector refuses an interval that is not shorter than the
//! ttl. Every wait is shortened by a random fraction, so that instances do not request in
//! lockstep after a failover.
//!
//! ## Owner ids
//!
//! An owner id must stay the same for the instance's lifetime and differ from every other
//! instance's. Two processes sharing an id each take the other's renewals for their own, and
//! both believe they lead. [`elector::unique_owner_id`] combines the host name, the process
//! id and a random suffix; call it once at start-up.
//!
//! ## Handing over
//!
//! Every storage of this project pushes lease changes ([`Capability::LeaseChanges`];
//! PostgreSQL behind a transaction-pooling PgBouncer only with a direct `listen_url`): the
//! elector follows its lease and asks the moment something calls for it, instead of at its
//! next request; without the capability it hears of each change at its next request. What is
//! pushed and what is polled:
//!
//! | event | how the elector hears of it | how soon (measured in `docs/BENCHMARKS.md`) |
//! |---|---|---|
//! | the leader releases (shutdown, step-down) | pushed: the preferred standby asks at once | milliseconds |
//! | a higher-priority instance starts, or [`LeaderElector::set_priority`] raises one | pushed: the holder asks at once and is asked to step down | milliseconds, plus the time the work takes to finish its unit |
//! | a notification was lost | pushed as [`LeaseNotice::Missed`]: every elector asks | milliseconds |
//! | the leader dies without releasing | polled: its lease lapses after the ttl; a standby's next request takes it | within a ttl and a request interval |
//! | renewals | polled, every request interval | |
//!
//! - **Deploys and restarts**: stop the work, then [`LeaderElector::shutdown`]. It releases
//!   the lease; the live contender with the highest priority asks at once and leads with the
//!   next token, while the others wait the handover grace
//!   ([`ElectorBuilder::handover_grace`]) and take the lease only if it did not.
//! - **Priority**: an instance with a higher priority makes the holder answer
//!   [`Leadership::StepDownRequested`] as soon as it registers. The work finishes its current
//!   unit and calls [`LeadershipWatch::acknowledge_step_down`]; the elector releases, and the
//!   higher-priority instance leads with the next token: no tenure in between. The instance
//!   that stepped down waits the handover grace and leads again if the preferred contender
//!   never asks; it then ignores that contender's standing request for a ttl (it probably
//!   died), and a later handover waits a whole request interval, in case the contender only
//!   polls. [`ElectedProjector`] acknowledges after the batch in hand. A holder that
//!   never acknowledges keeps renewing and keeps the lease.
//! - **Crashes**: a dead leader stops renewing; its lease lapses after its ttl on the
//!   storage's clock and a standby takes over with the next fencing token.
//!
//! Notifications are hints. A storage without them (or one that loses them) still elects
//! correctly by polling: a standby then learns of a release at its next request, and an
//! instance that stepped down stays out for a ttl so that the preferred contender gets in
//! first. To wait for leadership with a bound, use
//! [`LeadershipWatch::wait_for_leadership_within`].
//!
//! ## Zombies and fences
//!
//! A process paused past its ttl (a long GC pause, a suspended VM) wakes up still holding a
//! token that is no longer current. Every write it makes with that token's [`Fence`] is
//! refused by the storage itself with [`EventStorageError::Fenced`], naming the lease and
//! both tokens, and nothing is written: the check is atomic with the write
//! ([`Capability::FencedWrites`]). [`ElectedProjector`] bookmarks with its tenure's fence,
//! so a zombie cannot move the bookmark backwards; a projection's own appends can carry the
//! same fence with [`store::TypedStream::fenced`] or [`EventStorage::append_fenced`].
//!
//! ## When the storage fails
//!
//! A lost connection, a restarting server or a failover fails calls for a while. The elector
//! keeps asking on its interval and demotes itself once its deadline passes without a
//! confirmed request (see above). The projector pauses after a failure that may pass
//! ([`ProjectorError::may_pass`]: `Backend`, `Timeout`), from 100 ms doubling up to 5 s, each
//! pause shortened at random, and runs again while its instance leads: a leader that keeps
//! its lease keeps projecting. Errors that will not pass by themselves (a closed storage, a
//! missing schema, the projection's own) end `run_until`.
//!
//! ## When one instance is not enough
//!
//! One leader per lease means one instance does all the work of a stream. To spread the work,
//! split it into partitions (by tenant, by a hash of the stream) and start a
//! [`PartitionElector`] on every instance instead: each holds a balanced share of the
//! partitions, each partition under a lease and a fence of its own, and a
//! [`PartitionedProjector`] runs a projector per held partition with a bookmark per partition.
//! Joins and leaves move partitions as planned handovers, exactly like a step-down here; see
//! the [`partitions`] module.
//!
//! ## What this does not promise
//!
//! Processing is at-least-once: when a batch was committed but its bookmark did not land
//! (a crash in between, or a fence that stopped holding), the next leader handles that batch
//! again. Where that matters, let the projection keep its own position in its own store, in
//! the same transaction as its data, as the [`projector`] module describes.
//!
//! [`LeaderElector`]: crate::elector::LeaderElector
//! [`PartitionElector`]: crate::partitions::PartitionElector
//! [`PartitionedProjector`]: crate::projector::PartitionedProjector
//! [`ProjectorError::may_pass`]: crate::projector::ProjectorError::may_pass
//! [`partitions`]: crate::partitions
//! [`LeaderElector::set_priority`]: crate::elector::LeaderElector::set_priority
//! [`ElectorBuilder::handover_grace`]: crate::elector::ElectorBuilder::handover_grace
//! [`LeadershipWatch::wait_for_leadership_within`]: crate::elector::LeadershipWatch::wait_for_leadership_within
//! [`LeaseNotice::Missed`]: crate::LeaseNotice::Missed
//! [`Capability::LeaseChanges`]: crate::Capability::LeaseChanges
//! [`LeaderElector::shutdown`]: crate::elector::LeaderElector::shutdown
//! [`Leadership`]: crate::elector::Leadership
//! [`Leadership::Unknown`]: crate::elector::Leadership::Unknown
//! [`Leadership::StepDownRequested`]: crate::elector::Leadership::StepDownRequested
//! [`LeadershipWatch::is_leader`]: crate::elector::LeadershipWatch::is_leader
//! [`LeadershipWatch::acknowledge_step_down`]: crate::elector::LeadershipWatch::acknowledge_step_down
//! [`elector::unique_owner_id`]: crate::elector::unique_owner_id
//! [`Projector`]: crate::projector::Projector
//! [`Projection`]: crate::projector::Projection
//! [`ElectedProjector`]: crate::projector::ElectedProjector
//! [`projector`]: crate::projector
//! [`store::TypedStream::fenced`]: crate::store::TypedStream::fenced
//! [`Fence`]: crate::Fence
//! [`EventStorageError::Fenced`]: crate::EventStorageError::Fenced
//! [`Capability::FencedWrites`]: crate::Capability::FencedWrites
//! [`EventStorage::append_fenced`]: crate::EventStorage::append_fenced
