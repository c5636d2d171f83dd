//! A batch is decided set by set (`request_leases`), one request step by step
//! (`request_lease`), and the storage sends a batch's plain requests first to a statement of
//! their own (`plain_batch_statement`): all must give the same answers, leave the same rows
//! and notify the same changes. Three stores start empty and get the same random traffic in
//! one transaction per round (so all see the same `now()`): the first in batches, the second
//! one request per call, the third in batches as the storage sends them.

use std::collections::BTreeMap;
use std::time::Duration;

use eventstore::EventStorage;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgListener, PgRow};
use sqlx::{PgConnection, Row};

use crate::common;

const LEASES: [&str; 6] = ["l0", "l1", "l2", "l3", "l4", "l5"];
const OWNERS: [&str; 4] = ["a", "b", "c", "d"];
const ROUNDS: usize = 80;

/// One lease request as the function takes it.
#[derive(Debug, Clone)]
struct Asked {
    lease: &'static str,
    owner: &'static str,
    priority: i64,
    ttl_ms: i64,
}

/// One answer: status, token, owner, took over.
type Answer = (String, i64, String, bool);

/// Up to 12 requests over 6 leases, so leases repeat; now and then one lease asked for more
/// often than the function answers in layers (it then goes step by step).
fn random_batch(rng: &mut StdRng) -> Vec<Asked> {
    let count = rng.gen_range(2..=12);
    let mut batch = random_requests(rng, count);
    if rng.gen_bool(0.1) {
        let lease = LEASES[rng.gen_range(0..LEASES.len())];
        batch.extend(
            random_requests(rng, 6)
                .into_iter()
                .map(|a| Asked { lease, ..a }),
        );
    }
    batch
}

fn random_requests(rng: &mut StdRng, count: usize) -> Vec<Asked> {
    (0..count)
        .map(|_| Asked {
            lease: LEASES[rng.gen_range(0..LEASES.len())],
            owner: OWNERS[rng.gen_range(0..OWNERS.len())],
            priority: rng.gen_range(0..3),
            // Mostly long, sometimes lapsing within a round or two.
            ttl_ms: if rng.gen_bool(0.25) {
                rng.gen_range(1..30)
            } else {
                60_000
            },
        })
        .collect()
}

async fn call(connection: &mut PgConnection, prefix: &str, batch: &[Asked]) -> Vec<Answer> {
    let rows: Vec<PgRow> = sqlx::query(&format!(
        "SELECT lease_status, lease_token, lease_owner, lease_took_over \
         FROM {prefix}request_leases($1, $2, $3, $4, '10s') ORDER BY lease_index"
    ))
    .bind(batch.iter().map(|a| a.lease).collect::<Vec<_>>())
    .bind(batch.iter().map(|a| a.owner).collect::<Vec<_>>())
    .bind(batch.iter().map(|a| a.priority).collect::<Vec<_>>())
    .bind(
        batch
            .iter()
            .map(|a| PgInterval {
                months: 0,
                days: 0,
                microseconds: a.ttl_ms * 1_000,
            })
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut *connection)
    .await
    .unwrap();
    rows.iter()
        .map(|row| {
            (
                row.get("lease_status"),
                row.get("lease_token"),
                row.get("lease_owner"),
                row.get("lease_took_over"),
            )
        })
        .collect()
}

/// How many requests of `batch` are standbys refreshing a live registration at the same
/// priority on a lease held live by another owner: those whose lease has no lapsed contender
/// (a batch answers them in its first statement) and those whose lease has one (answered
/// with everything else, which forgets the lapsed).
async fn standby_refreshes(
    connection: &mut PgConnection,
    prefix: &str,
    batch: &[Asked],
) -> (i64, i64) {
    let row = sqlx::query(&format!(
        "SELECT count(*) FILTER (WHERE NOT lapsed) AS plain, count(*) FILTER (WHERE lapsed)                 AS beside_lapsed          FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(n, o, p)          JOIN {prefix}leases AS l ON l.lease_name = r.n AND l.owner <> r.o               AND l.heartbeat_at + l.ttl >= now()          JOIN {prefix}lease_contenders AS c ON c.lease_name = r.n AND c.owner = r.o               AND c.priority = r.p AND c.heartbeat_at + c.ttl >= now()          CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM {prefix}lease_contenders AS x               WHERE x.lease_name = r.n AND x.heartbeat_at + x.ttl < now()) AS lapsed) AS z"
    ))
    .bind(batch.iter().map(|a| a.lease).collect::<Vec<_>>())
    .bind(batch.iter().map(|a| a.owner).collect::<Vec<_>>())
    .bind(batch.iter().map(|a| a.priority).collect::<Vec<_>>())
    .fetch_one(&mut *connection)
    .await
    .unwrap();
    (row.get("plain"), row.get("beside_lapsed"))
}

/// `batch` as the storage sends it: the requests for leases it asks for once, in name order,
/// to `statement` (the storage's plain batch), then the rest to `request_leases`; with how
/// many the statement served.
async fn call_plain_first(
    connection: &mut PgConnection,
    prefix: &str,
    statement: &str,
    batch: &[Asked],
) -> (Vec<Answer>, usize) {
    let mut asked = BTreeMap::new();
    for a in batch {
        *asked.entry(a.lease).or_insert(0) += 1;
    }
    let mut candidates: Vec<usize> = (0..batch.len())
        .filter(|&i| asked[batch[i].lease] == 1)
        .collect();
    candidates.sort_by_key(|&i| batch[i].lease);
    let pick = |f: fn(&Asked) -> i64| candidates.iter().map(|&i| f(&batch[i])).collect::<Vec<_>>();
    let rows: Vec<PgRow> = sqlx::query(statement)
        .bind(
            candidates
                .iter()
                .map(|&i| batch[i].lease)
                .collect::<Vec<_>>(),
        )
        .bind(
            candidates
                .iter()
                .map(|&i| batch[i].owner)
                .collect::<Vec<_>>(),
        )
        .bind(pick(|a| a.priority))
        .bind(
            pick(|a| a.ttl_ms)
                .into_iter()
                .map(|ms| PgInterval {
                    months: 0,
                    days: 0,
                    microseconds: ms * 1_000,
                })
                .collect::<Vec<_>>(),
        )
        .bind("10s")
        .fetch_all(&mut *connection)
        .await
        .unwrap();
    let mut answers: Vec<Option<Answer>> = vec![None; batch.len()];
    for row in &rows {
        let place: i32 = row.get(0);
        let standby: bool = row.get(3);
        let status = if standby { "standby" } else { "leader" };
        answers[candidates[place as usize - 1]] =
            Some((status.to_owned(), row.get(1), row.get(2), false));
    }
    let rest: Vec<usize> = (0..batch.len()).filter(|&i| answers[i].is_none()).collect();
    if !rest.is_empty() {
        let rest_batch: Vec<Asked> = rest.iter().map(|&i| batch[i].clone()).collect();
        for (i, answer) in rest
            .into_iter()
            .zip(call(connection, prefix, &rest_batch).await)
        {
            answers[i] = Some(answer);
        }
    }
    (answers.into_iter().flatten().collect(), rows.len())
}

/// One request through `request_lease`, the function a single request goes to.
async fn call_one(connection: &mut PgConnection, prefix: &str, asked: &Asked) -> Answer {
    sqlx::query_as(&format!(
        "SELECT lease_status, lease_token, lease_owner, lease_took_over \
         FROM {prefix}request_lease($1, $2, $3, $4, '10s')"
    ))
    .bind(asked.lease)
    .bind(asked.owner)
    .bind(asked.priority)
    .bind(PgInterval {
        months: 0,
        days: 0,
        microseconds: asked.ttl_ms * 1_000,
    })
    .fetch_one(&mut *connection)
    .await
    .unwrap()
}

async fn release(connection: &mut PgConnection, prefix: &str, lease: &str, owner: &str) -> bool {
    sqlx::query_scalar(&format!("SELECT {prefix}release_lease($1, $2, '10s')"))
        .bind(lease)
        .bind(owner)
        .fetch_one(&mut *connection)
        .await
        .unwrap()
}

/// Every row of both lease tables of `prefix`, as text, in a fixed order.
async fn rows(connection: &mut PgConnection, prefix: &str) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT l::text FROM (SELECT * FROM {prefix}leases ORDER BY lease_name) AS l \
         UNION ALL \
         SELECT c::text FROM (SELECT * FROM {prefix}lease_contenders \
                              ORDER BY lease_name, owner) AS c"
    ))
    .fetch_all(&mut *connection)
    .await
    .unwrap()
}

/// The notifications of one round on `channel`, by lease, in the order sent, without the
/// place in its batch that a batch's change carries (`n`), and each change once: a round runs
/// the requests one by one in one transaction, which PostgreSQL delivers identical
/// notifications of once (`lease_changes` compares a batch with requests in transactions of
/// their own). A run of `contender_left` of one request is sorted, since lapsed contenders go
/// in no set order.
fn by_lease(payloads: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut leases: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for payload in payloads {
        let mut change: serde_json::Value = serde_json::from_str(payload).unwrap();
        if let Some(fields) = change.as_object_mut() {
            fields.remove("n");
        }
        if !seen.insert(change.to_string()) {
            continue;
        }
        let lease = change["lease"].as_str().unwrap_or("?").to_owned();
        leases.entry(lease).or_default().push(change);
    }
    leases
        .into_iter()
        .map(|(lease, changes)| {
            let mut texts: Vec<String> = Vec::new();
            let mut run: Vec<String> = Vec::new();
            for change in changes {
                if change["kind"] == "contender_left" {
                    run.push(change.to_string());
                    continue;
                }
                run.sort();
                texts.append(&mut run);
                texts.push(change.to_string());
            }
            run.sort();
            texts.append(&mut run);
            (lease, texts)
        })
        .collect()
}

/// The notifications that arrive on `listener` before `marker`, split by channel.
async fn drain(
    listener: &mut PgListener,
    connection: &mut PgConnection,
    marker: &str,
) -> BTreeMap<String, Vec<String>> {
    sqlx::query("SELECT pg_notify($1, 'end')")
        .bind(marker)
        .execute(&mut *connection)
        .await
        .unwrap();
    let mut channels: BTreeMap<String, Vec<String>> = BTreeMap::new();
    loop {
        let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("the round's notifications within 10 s")
            .unwrap();
        if notification.channel() == marker {
            return channels;
        }
        channels
            .entry(notification.channel().to_owned())
            .or_default()
            .push(notification.payload().to_owned());
    }
}

#[tokio::test]
async fn a_batch_answers_writes_and_notifies_as_its_requests_one_by_one() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let (batched, single, sent) = (
        common::unique_prefix(),
        common::unique_prefix(),
        common::unique_prefix(),
    );
    common::storage_on(&batched).await.close().await.unwrap();
    common::storage_on(&single).await.close().await.unwrap();
    let sent_storage = common::storage_on(&sent).await;
    let plain_statement = sent_storage.plain_batch_statement().to_owned();
    sent_storage.close().await.unwrap();
    let (batched_channel, single_channel, sent_channel) = (
        format!("{batched}lease_changes"),
        format!("{single}lease_changes"),
        format!("{sent}lease_changes"),
    );
    let marker = format!("{batched}round_end");
    let mut listener = PgListener::connect(&common::direct_url()).await.unwrap();
    listener
        .listen_all([
            batched_channel.as_str(),
            single_channel.as_str(),
            sent_channel.as_str(),
            marker.as_str(),
        ])
        .await
        .unwrap();

    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut connection = pool.acquire().await.unwrap();
    let (mut duplicates, mut took_over, mut kinds) = (0, 0, BTreeMap::new());
    let (mut plain_refreshes, mut refreshes_beside_lapsed, mut served_plain) = (0, 0, 0);
    for round in 0..ROUNDS {
        let batch = random_batch(&mut rng);
        let releases: Vec<(&str, &str)> = (0..rng.gen_range(0..3))
            .map(|_| {
                (
                    LEASES[rng.gen_range(0..LEASES.len())],
                    OWNERS[rng.gen_range(0..OWNERS.len())],
                )
            })
            .collect();

        let mut transaction = sqlx::Connection::begin(&mut *connection).await.unwrap();
        let (plain, beside_lapsed) = standby_refreshes(&mut transaction, &batched, &batch).await;
        plain_refreshes += plain;
        refreshes_beside_lapsed += beside_lapsed;
        let from_batch = call(&mut transaction, &batched, &batch).await;
        let mut one_by_one = Vec::new();
        for asked in &batch {
            one_by_one.push(call_one(&mut transaction, &single, asked).await);
        }
        let (plain_first, served) =
            call_plain_first(&mut transaction, &sent, &plain_statement, &batch).await;
        served_plain += served;
        assert_eq!(
            from_batch, one_by_one,
            "round {round} (seed {seed}): answers to {batch:?}"
        );
        assert_eq!(
            plain_first, one_by_one,
            "round {round} (seed {seed}): answers to {batch:?}, plain requests first"
        );
        for (lease, owner) in &releases {
            let released = release(&mut transaction, &single, lease, owner).await;
            for other in [&batched, &sent] {
                assert_eq!(
                    release(&mut transaction, other, lease, owner).await,
                    released,
                    "round {round} (seed {seed}): releasing {lease} by {owner} on {other}"
                );
            }
        }
        let single_rows = rows(&mut transaction, &single).await;
        for other in [&batched, &sent] {
            assert_eq!(
                rows(&mut transaction, other).await,
                single_rows,
                "round {round} (seed {seed}): rows after {batch:?} on {other}"
            );
        }
        transaction.commit().await.unwrap();

        let mut notified = drain(&mut listener, &mut connection, &marker).await;
        let (from_batch_changes, one_by_one_changes, plain_first_changes) = (
            notified.remove(&batched_channel).unwrap_or_default(),
            notified.remove(&single_channel).unwrap_or_default(),
            notified.remove(&sent_channel).unwrap_or_default(),
        );
        assert_eq!(
            by_lease(&from_batch_changes),
            by_lease(&one_by_one_changes),
            "round {round} (seed {seed}): notifications of {batch:?}"
        );
        assert_eq!(
            by_lease(&plain_first_changes),
            by_lease(&one_by_one_changes),
            "round {round} (seed {seed}): notifications of {batch:?}, plain requests first"
        );

        let mut seen = std::collections::HashSet::new();
        duplicates += batch.iter().filter(|a| !seen.insert(a.lease)).count();
        took_over += from_batch.iter().filter(|answer| answer.3).count();
        for answer in &from_batch {
            *kinds.entry(answer.0.clone()).or_insert(0) += 1;
        }
        for change in &from_batch_changes {
            let change: serde_json::Value = serde_json::from_str(change).unwrap();
            *kinds
                .entry(change["kind"].as_str().unwrap().to_owned())
                .or_insert(0) += 1;
        }
        // Short ttls lapse between rounds now and then.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..12))).await;
    }
    println!(
        "{duplicates} repeated leases in batches, {took_over} takeovers, {plain_refreshes} \
         plain standby refreshes, {refreshes_beside_lapsed} beside a lapsed contender, \
         {served_plain} served by the plain batch, {kinds:?}"
    );
    assert!(served_plain > 0, "the plain batch served no request");
    // The traffic covered what the two paths could disagree on.
    assert!(duplicates > 0, "no batch asked for a lease twice");
    assert!(took_over > 0, "no request took over an expired lease");
    assert!(
        plain_refreshes > 0,
        "no standby refreshed a live registration"
    );
    assert!(
        refreshes_beside_lapsed > 0,
        "no standby refreshed a live registration beside a lapsed contender"
    );
    for kind in [
        "leader",
        "standby",
        "step_down_requested",
        "acquired",
        "contender_joined",
        "contender_left",
        "released",
    ] {
        assert!(kinds.contains_key(kind), "no {kind} in {kinds:?}");
    }
}
