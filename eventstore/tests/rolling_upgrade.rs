//! Partition members beside a member of an earlier version, which announced itself with a
//! lease of its own (`{group}/members/{owner}`) and sees only members announced so: while one
//! is live, a member announces itself that way too, besides its seat, and stops once it is
//! gone.

use std::sync::Arc;
use std::time::Duration;

use eventstore::partitions::member_lease_name;
use eventstore::EventStorageExt;
use eventstore::{EventStorage, Lease, LeaseRequest, PartitionElector};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, LONG_TTL};

const GROUP: &str = "upgrading";
const PARTITIONS: u32 = 4;

/// The group's lease `name` as the storage has it, if it is live now.
async fn live(storage: &MemoryEventStorage, name: &str) -> Option<Lease> {
    let now = storage.storage_time().await.unwrap();
    let leases = storage.get_leases_with_prefix(name).await.unwrap();
    leases
        .into_iter()
        .find(|lease| lease.lease_name == name && !lease.is_expired_at(now))
}

#[tokio::test]
async fn a_member_announces_itself_as_earlier_versions_did_while_one_of_them_is_live() {
    let storage = Arc::new(MemoryEventStorage::new());
    // A member of an earlier version, announcing its partition count as they did.
    let earlier = member_lease_name(GROUP, "earlier");
    let announcement = LeaseRequest::new(&earlier, "earlier", i64::from(PARTITIONS), LONG_TTL);
    storage.request_lease(announcement).await.unwrap();

    let shared: Arc<dyn EventStorage> = storage.clone();
    let member = PartitionElector::builder(shared, GROUP, PARTITIONS)
        .owner("current")
        .ttl(Duration::from_millis(600))
        .start()
        .unwrap();
    let watch = member.watch();
    let as_before = member_lease_name(GROUP, "current");
    eventually(
        "the member to announce itself as the earlier one sees members",
        || async { live(&storage, &as_before).await.is_some() },
    )
    .await;
    let seated = storage
        .get_leases_with_prefix(&format!("{GROUP}/seats/"))
        .await;
    assert!(
        seated.unwrap().iter().any(|lease| lease.owner == "current"),
        "the member holds a seat as well"
    );
    eventually(
        "the member to leave half the group to the earlier one",
        || async { watch.held().len() == 2 },
    )
    .await;

    // The earlier member leaves: the member takes the whole group and stops announcing
    // itself the old way, which then lapses.
    storage.release_lease(&earlier, "earlier").await.unwrap();
    eventually("the member to hold the whole group", || async {
        watch.held().len() == PARTITIONS as usize
    })
    .await;
    eventually("the announcement the old way to lapse", || async {
        live(&storage, &as_before).await.is_none()
    })
    .await;
    let seat = storage
        .get_leases_with_prefix(&format!("{GROUP}/seats/"))
        .await
        .unwrap()
        .into_iter()
        .find(|lease| lease.owner == "current")
        .expect("the member's seat");
    assert!(live(&storage, &seat.lease_name).await.is_some());

    member.shutdown().await.unwrap();
    assert!(
        live(&storage, &seat.lease_name).await.is_none(),
        "leaving releases the seat"
    );
}

#[tokio::test]
async fn an_earlier_member_that_joins_sees_the_current_members_at_once() {
    let storage = Arc::new(MemoryEventStorage::new());
    let shared: Arc<dyn EventStorage> = storage.clone();
    // A renewal only every 20 s: what follows must come from the look the join calls for.
    let member = PartitionElector::builder(shared, GROUP, PARTITIONS)
        .owner("current")
        .ttl(Duration::from_secs(60))
        .start()
        .unwrap();
    let watch = member.watch();
    eventually("the lone member to hold the whole group", || async {
        watch.held().len() == PARTITIONS as usize
    })
    .await;
    let earlier = member_lease_name(GROUP, "earlier");
    let announcement = LeaseRequest::new(&earlier, "earlier", i64::from(PARTITIONS), LONG_TTL);
    storage.request_lease(announcement).await.unwrap();
    eventually(
        "the member to announce itself as the earlier one sees members",
        || async {
            live(&storage, &member_lease_name(GROUP, "current"))
                .await
                .is_some()
        },
    )
    .await;
    member.shutdown().await.unwrap();
}

#[tokio::test]
async fn members_that_announced_themselves_as_before_stop_once_the_earlier_member_is_gone() {
    let storage = Arc::new(MemoryEventStorage::new());
    let earlier = member_lease_name(GROUP, "earlier");
    let announcement = LeaseRequest::new(&earlier, "earlier", i64::from(PARTITIONS), LONG_TTL);
    storage.request_lease(announcement).await.unwrap();
    let start = |owner: &str| {
        let shared: Arc<dyn EventStorage> = storage.clone();
        PartitionElector::builder(shared, GROUP, PARTITIONS)
            .owner(owner)
            .ttl(Duration::from_millis(600))
            .start()
            .unwrap()
    };
    let members = [start("first"), start("second")];
    for owner in ["first", "second"] {
        eventually("both members to announce themselves as before", || async {
            live(&storage, &member_lease_name(GROUP, owner))
                .await
                .is_some()
        })
        .await;
    }
    // Each sees the other's announcement as before, beside its seat: neither keeps the other
    // announcing itself so once the earlier member has left.
    storage.release_lease(&earlier, "earlier").await.unwrap();
    for owner in ["first", "second"] {
        eventually("the announcements as before to lapse", || async {
            live(&storage, &member_lease_name(GROUP, owner))
                .await
                .is_none()
        })
        .await;
    }
    let watches = members.each_ref().map(PartitionElector::watch);
    eventually("the two members to share the group", || async {
        watches.iter().all(|watch| watch.held().len() == 2)
    })
    .await;
    for member in members {
        member.shutdown().await.unwrap();
    }
}
