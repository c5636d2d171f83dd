//! Every metric of `eventstore::telemetry` (and the file backend's own) observed through a
//! recorder installed for this test binary: the elector's requests by outcome, acquisitions,
//! takeovers, step-downs, releases and leader gauge, fenced refusals, append latency on the memory and
//! file backends, and the file backend's group size and sync latency.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use eventstore::telemetry::{
    APPEND_SECONDS, ELECTOR_LEADER, FENCED_REFUSALS, LEASE_ACQUISITIONS, LEASE_RELEASES,
    LEASE_REQUESTS, LEASE_STEP_DOWNS, LEASE_TAKEOVERS, PARTITION_COUNT_MISMATCH,
};
use eventstore::{
    AppendCriteria, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence,
    LeaderElector, Leadership, LeaseRequest, PartitionElector,
};
use eventstore_memory::MemoryEventStorage;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use serde_json::json;

/// A recorder that keeps every value, for reading back without resetting anything.
struct TestRecorder {
    registry: Arc<Registry<Key, AtomicStorage>>,
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

/// The registry of the recorder installed for this binary.
fn registry() -> &'static Registry<Key, AtomicStorage> {
    static REGISTRY: OnceLock<Arc<Registry<Key, AtomicStorage>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let registry = Arc::new(Registry::atomic());
        metrics::set_global_recorder(TestRecorder {
            registry: Arc::clone(&registry),
        })
        .expect("the only recorder of this test binary");
        registry
    })
}

fn labels_match(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    let have: BTreeMap<&str, &str> = key.labels().map(|l| (l.key(), l.value())).collect();
    key.name() == name && labels.iter().all(|(k, v)| have.get(k) == Some(v))
}

fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    registry()
        .get_counter_handles()
        .iter()
        .filter(|(key, _)| labels_match(key, name, labels))
        .map(|(_, value)| value.load(std::sync::atomic::Ordering::SeqCst))
        .sum()
}

fn gauge(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    registry()
        .get_gauge_handles()
        .iter()
        .find(|(key, _)| labels_match(key, name, labels))
        .map(|(_, value)| f64::from_bits(value.load(std::sync::atomic::Ordering::SeqCst)))
}

fn histogram(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    registry()
        .get_histogram_handles()
        .iter()
        .filter(|(key, _)| labels_match(key, name, labels))
        .flat_map(|(_, bucket)| bucket.data())
        .collect()
}

/// Polls `condition` until it holds; panics naming `what` after a generous deadline. The
/// elector updates its metrics just after what `is_leader` says changes, so a reader may
/// briefly see the values before.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elector_metrics_follow_acquisition_step_down_handover_and_shutdown() {
    registry();
    let lease = "metrics-elector";
    let storage: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let start = |owner: &str, priority: i64| {
        LeaderElector::builder(Arc::clone(&storage), lease)
            .owner(owner)
            .priority(priority)
            .ttl(Duration::from_secs(2))
            .request_interval(Duration::from_millis(50))
            .start()
            .unwrap()
    };
    let low = start("pod-low", 0);
    eventually("pod-low to lead", || low.is_leader()).await;
    eventually("the acquisitions counter", || {
        counter(LEASE_ACQUISITIONS, &[("lease", lease)]) == 1
    })
    .await;
    eventually("pod-low's leader gauge", || {
        gauge(ELECTOR_LEADER, &[("lease", lease), ("owner", "pod-low")]) == Some(1.0)
    })
    .await;
    assert!(counter(LEASE_REQUESTS, &[("lease", lease), ("outcome", "leader")]) >= 1);

    // A contender of higher priority: pod-low is asked to step down, acknowledges, releases.
    let high = start("pod-high", 10);
    let mut watch = low.watch();
    eventually("a standby answer for pod-high", || {
        counter(LEASE_REQUESTS, &[("lease", lease), ("outcome", "standby")]) >= 1
    })
    .await;
    let token = loop {
        if let Leadership::StepDownRequested { token } = watch.current() {
            break token;
        }
        tokio::time::timeout(Duration::from_secs(30), watch.changed())
            .await
            .expect("a step-down request within 30 s")
            .unwrap();
    };
    assert!(
        counter(
            LEASE_REQUESTS,
            &[("lease", lease), ("outcome", "step_down_requested")]
        ) >= 1
    );
    watch.acknowledge_step_down(token);
    eventually("pod-high to lead", || high.is_leader()).await;
    eventually("the step-downs counter", || {
        counter(LEASE_STEP_DOWNS, &[("lease", lease)]) == 1
    })
    .await;
    eventually("the releases counter", || {
        counter(LEASE_RELEASES, &[("lease", lease)]) == 1
    })
    .await;
    eventually("the acquisitions counter", || {
        counter(LEASE_ACQUISITIONS, &[("lease", lease)]) == 2
    })
    .await;
    eventually("pod-low's leader gauge", || {
        gauge(ELECTOR_LEADER, &[("lease", lease), ("owner", "pod-low")]) == Some(0.0)
    })
    .await;
    eventually("pod-high's leader gauge", || {
        gauge(ELECTOR_LEADER, &[("lease", lease), ("owner", "pod-high")]) == Some(1.0)
    })
    .await;

    high.shutdown().await.unwrap();
    eventually("the releases counter", || {
        counter(LEASE_RELEASES, &[("lease", lease)]) == 2
    })
    .await;
    eventually("pod-high's leader gauge", || {
        gauge(ELECTOR_LEADER, &[("lease", lease), ("owner", "pod-high")]) == Some(0.0)
    })
    .await;
    low.shutdown().await.unwrap();
    assert_eq!(
        counter(LEASE_TAKEOVERS, &[("lease", lease)]),
        0,
        "a planned handover is no takeover"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_of_a_crashed_leader_is_counted() {
    registry();
    let lease = "metrics-takeover";
    let storage: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let start = |owner: &str| {
        LeaderElector::builder(Arc::clone(&storage), lease)
            .owner(owner)
            .ttl(Duration::from_millis(300))
            .request_interval(Duration::from_millis(50))
            .start()
            .unwrap()
    };
    let crashing = start("pod-a");
    eventually("pod-a to lead", || crashing.is_leader()).await;
    let standby = start("pod-b");
    eventually("a standby answer for pod-b", || {
        counter(LEASE_REQUESTS, &[("lease", lease), ("outcome", "standby")]) >= 1
    })
    .await;
    assert_eq!(counter(LEASE_TAKEOVERS, &[("lease", lease)]), 0);

    crashing.abort(); // no release: pod-b waits out the ttl, then takes over.
    eventually("pod-b to lead", || standby.is_leader()).await;
    eventually("the takeovers counter", || {
        counter(LEASE_TAKEOVERS, &[("lease", lease)]) == 1
    })
    .await;
    standby.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_lease_requests_are_counted_as_failed() {
    registry();
    let lease = "metrics-failed-requests";
    let storage: Arc<dyn EventStorage> = Arc::new(WithoutLeases);
    let elector = LeaderElector::builder(storage, lease)
        .owner("pod-a")
        .ttl(Duration::from_secs(2))
        .request_interval(Duration::from_millis(20))
        .start();
    match elector {
        Ok(elector) => {
            eventually("a failed request", || {
                counter(LEASE_REQUESTS, &[("lease", lease), ("outcome", "failed")]) >= 1
            })
            .await;
            elector.abort();
        }
        // An elector may refuse a storage without the lease capability at start.
        Err(error) => assert!(
            matches!(error, EventStorageError::Unsupported { .. }),
            "{error}"
        ),
    }
}

/// A storage whose lease requests all fail.
#[derive(Debug)]
struct WithoutLeases;

#[async_trait::async_trait]
impl EventStorage for WithoutLeases {
    fn name(&self) -> &str {
        "without-leases"
    }
    fn supports(&self, capability: eventstore::Capability) -> bool {
        capability == eventstore::Capability::Lease
    }
    async fn append(
        &self,
        _: AppendCriteria,
        _: &EventStreamId,
        _: Vec<EventToStore>,
    ) -> eventstore::StorageResult<Vec<eventstore::StoredEvent>> {
        Ok(Vec::new())
    }
    async fn query(
        &self,
        _: &eventstore::EventFilter,
        _: &EventStreamId,
        _: Option<&eventstore::EventReference>,
        _: eventstore::Limit,
        _: eventstore::Direction,
    ) -> eventstore::StorageResult<Vec<eventstore::StoredEvent>> {
        Ok(Vec::new())
    }
    async fn get_event_by_id(
        &self,
        _: eventstore::EventId,
    ) -> eventstore::StorageResult<Option<eventstore::StoredEvent>> {
        Ok(None)
    }
    async fn head(
        &self,
        _: &EventStreamId,
    ) -> eventstore::StorageResult<Option<eventstore::EventReference>> {
        Ok(None)
    }
    async fn bookmark(
        &self,
        _: &str,
        _: &eventstore::EventReference,
        _: eventstore::Tags,
    ) -> eventstore::StorageResult<()> {
        Ok(())
    }
    async fn get_bookmark(
        &self,
        _: &str,
    ) -> eventstore::StorageResult<Option<eventstore::EventReference>> {
        Ok(None)
    }
    async fn remove_bookmark(&self, _: &str) -> eventstore::StorageResult<()> {
        Ok(())
    }
    async fn get_bookmarks(&self) -> eventstore::StorageResult<Vec<eventstore::Bookmark>> {
        Ok(Vec::new())
    }
    async fn request_lease(
        &self,
        _: LeaseRequest,
    ) -> eventstore::StorageResult<eventstore::LeaseResponse> {
        Err(EventStorageError::backend(
            "the lease table is unreachable",
            std::io::Error::other("injected"),
        ))
    }
    async fn close(&self) -> eventstore::StorageResult<()> {
        Ok(())
    }
}

#[tokio::test]
async fn fenced_refusals_are_counted_per_lease() {
    registry();
    let lease = "metrics-fenced";
    let storage = MemoryEventStorage::new();
    let first = storage
        .request_lease(LeaseRequest::new(
            lease,
            "pod-a",
            0,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    storage.release_lease(lease, "pod-a").await.unwrap();
    storage
        .request_lease(LeaseRequest::new(
            lease,
            "pod-b",
            0,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let stale = Fence::new(lease, first.fencing_token);
    let refused = storage
        .append_fenced(
            &stale,
            AppendCriteria::none(),
            &EventStreamId::for_context("orders"),
            vec![EventToStore::new("OrderPlaced", json!({}))],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, EventStorageError::Fenced { .. }),
        "{refused}"
    );
    assert_eq!(counter(FENCED_REFUSALS, &[("lease", lease)]), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_latency_and_the_file_backends_group_commit_are_recorded() {
    registry();
    let stream = EventStreamId::for_context("orders");
    let event = || EventToStore::new("OrderPlaced", json!({ "order": 1 }));

    let memory = MemoryEventStorage::new();
    let before = histogram(APPEND_SECONDS, &[("backend", "memory")]).len();
    memory
        .append(AppendCriteria::none(), &stream, vec![event()])
        .await
        .unwrap();
    assert!(histogram(APPEND_SECONDS, &[("backend", "memory")]).len() > before);

    let dir = tempfile::tempdir().unwrap();
    let file = eventstore_file::FileEventStorage::open(dir.path())
        .await
        .unwrap();
    let appends_before = histogram(APPEND_SECONDS, &[("backend", "file")]).len();
    let groups_before = histogram("eventstore_file_group_size", &[]);
    let syncs_before = histogram("eventstore_file_sync_seconds", &[]).len();
    let mut appenders = Vec::new();
    for _ in 0..8 {
        let file = file.clone();
        let stream = stream.clone();
        appenders.push(tokio::spawn(async move {
            file.append(AppendCriteria::none(), &stream, vec![event()])
                .await
                .unwrap();
        }));
    }
    for appender in appenders {
        appender.await.unwrap();
    }
    let appends = histogram(APPEND_SECONDS, &[("backend", "file")]);
    assert_eq!(appends.len() - appends_before, 8);
    assert!(appends.iter().all(|seconds| *seconds >= 0.0));
    let groups = histogram("eventstore_file_group_size", &[]);
    let commands: f64 = groups.iter().sum::<f64>() - groups_before.iter().sum::<f64>();
    assert_eq!(commands, 8.0, "every append in one group: {groups:?}");
    let new_groups = groups.len() - groups_before.len();
    assert!((1..=8).contains(&new_groups), "{groups:?}");
    let syncs = histogram("eventstore_file_sync_seconds", &[]).len() - syncs_before;
    assert_eq!(syncs, new_groups, "one sync per group");
    file.close().await.unwrap();
}

/// Members of one group started with different partition counts are told apart: each member
/// announces its count with its membership, so both see the other's, and the member with the
/// smaller count also sees partitions beyond it held. Each says so until the other is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_counting_different_partitions_set_the_mismatch_gauge() {
    registry();
    let storage = MemoryEventStorage::new();
    let start = |owner: &str, partitions: u32| {
        let handle: Arc<dyn EventStorage> = Arc::new(storage.clone());
        PartitionElector::builder(handle, "mismatched", partitions)
            .owner(owner)
            .ttl(Duration::from_secs(3))
            .start()
            .unwrap()
    };
    let more = start("pod-more", 4);
    let more_watch = more.watch();
    eventually("the member counting 4 to hold all 4", || {
        more_watch.held().len() == 4
    })
    .await;
    let fewer = start("pod-fewer", 2);
    let labels = |owner| [("group", "mismatched"), ("owner", owner)];
    eventually("the member counting 2 to see the mismatch", || {
        gauge(PARTITION_COUNT_MISMATCH, &labels("pod-fewer")) == Some(1.0)
    })
    .await;
    eventually("the member counting 4 to see the mismatch", || {
        gauge(PARTITION_COUNT_MISMATCH, &labels("pod-more")) == Some(1.0)
    })
    .await;

    more.shutdown().await.unwrap();
    assert_eq!(
        gauge(PARTITION_COUNT_MISMATCH, &labels("pod-more")),
        Some(0.0),
        "a stopped member's gauge says nothing any more"
    );
    eventually("the mismatch to clear once the other member left", || {
        gauge(PARTITION_COUNT_MISMATCH, &labels("pod-fewer")) == Some(0.0)
    })
    .await;
    fewer.shutdown().await.unwrap();
}
