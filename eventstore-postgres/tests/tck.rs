//! The whole conformance kit against a real PostgreSQL server, each scenario on a prefix of
//! its own so that they run in parallel and again without cleanup.

mod common;

use async_trait::async_trait;
use eventstore_postgres::PostgresEventStorage;
use eventstore_tck::StorageFactory;

/// Fresh storages on unique prefixes of the test database, with append hints on, so that
/// the kit's append hint scenarios run too.
struct PostgresFactory;

#[async_trait]
impl StorageFactory for PostgresFactory {
    type Storage = PostgresEventStorage;

    /// Outside CI an unreachable server skips the kit (saying why); under `CI=true`
    /// `try_pool` fails the test instead.
    async fn unavailable(&self) -> Option<String> {
        match common::try_pool().await {
            Some(pool) => {
                pool.close().await;
                None
            }
            None => Some(format!(
                "PostgreSQL at {} is unreachable",
                common::database_url()
            )),
        }
    }

    async fn create(&self) -> PostgresEventStorage {
        common::hinting_storage_on(&common::unique_prefix()).await
    }

    async fn another_handle(&self, storage: &PostgresEventStorage) -> PostgresEventStorage {
        common::hinting_storage_on(storage.prefix()).await
    }
}

eventstore_tck::tck_tests!(
    PostgresFactory,
    capabilities = [
        Lease,
        FencedWrites,
        LeaseChanges,
        LeaseOutcomes,
        AppendHints
    ]
);
