//! A partition member reads its own group's leases, not every lease of the storage: a storage
//! shared by many groups and leases (and keeping every lease it ever granted) must not make
//! each member's round read them all.

use std::sync::Arc;
use std::time::Duration;

use eventstore::partitions::GroupStatus;
use eventstore::EventStorageExt;
use eventstore::{EventStorage, EventStorageError, LeaseRequest, PartitionElector};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, LONG_TTL};
use eventstore_tck::wrappers::Unreliable;

#[tokio::test]
async fn a_member_reads_its_groups_leases_alone() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    for n in 0..100 {
        let request = LeaseRequest::new(format!("other/{n}"), "elsewhere", 0, LONG_TTL);
        storage.request_lease(request).await.unwrap();
    }
    let shared: Arc<dyn EventStorage> = storage.clone();
    let member = PartitionElector::builder(shared, "numbers", 2)
        .ttl(Duration::from_millis(600))
        .start()
        .unwrap();
    let watch = member.watch();
    eventually("the only member to hold both partitions", || async {
        watch.held().len() == 2
    })
    .await;
    // A few more rounds: each renews the partitions, which moves their heartbeat.
    let heartbeat = || async {
        let leases = storage.inner().get_leases_with_prefix("numbers/0").await;
        leases.unwrap()[0].heartbeat_at
    };
    for _ in 0..3 {
        let before = heartbeat().await;
        eventually("another round", || async { heartbeat().await > before }).await;
    }
    assert_eq!(
        storage.lease_listings(),
        0,
        "a round listed every lease of the storage"
    );
    member.shutdown().await.unwrap();
}

/// A name no group can have is refused as invalid input: `work/seats` would otherwise read
/// the seats of group `work` as partitions of a group of its own. A closed storage says
/// `Closed` first, as every storage call does.
#[tokio::test]
async fn a_status_of_a_name_no_group_can_have_is_refused() {
    let storage = MemoryEventStorage::new();
    for name in ["work/seats", "", " "] {
        let refused = GroupStatus::read(&storage, name).await.unwrap_err();
        assert!(
            matches!(&refused, EventStorageError::InvalidInput { field, .. } if field == "partition group"),
            "{name:?}: {refused:?}"
        );
    }
    storage.close().await.unwrap();
    let refused = GroupStatus::read(&storage, "work/seats").await.unwrap_err();
    assert!(matches!(refused, EventStorageError::Closed), "{refused:?}");
}
