//! The whole conformance kit against a real PostgreSQL server, each scenario on a prefix of
//! its own so that they run in parallel and again without cleanup.

mod common;

use async_trait::async_trait;
use eventstore_postgres::PostgresEventStorage;
use eventstore_tck::StorageFactory;

/// Fresh storages on unique prefixes of the test database.
struct PostgresFactory;

#[async_trait]
impl StorageFactory for PostgresFactory {
    type Storage = PostgresEventStorage;

    async fn create(&self) -> PostgresEventStorage {
        match common::try_pool().await {
            Some(pool) => pool.close().await,
            // Outside CI, without a server, the kit cannot run: the message said why.
            None => std::process::exit(0),
        }
        common::storage_on(&common::unique_prefix()).await
    }

    async fn another_handle(&self, storage: &PostgresEventStorage) -> PostgresEventStorage {
        common::storage_on(storage.prefix()).await
    }
}

eventstore_tck::tck_tests!(PostgresFactory);
