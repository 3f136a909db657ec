//! Blobs of the distributed write path (large call parts moved out of their Kafka records) on
//! both backends: written and read back byte for byte, idempotent, per project; and the write
//! probe the consumer uses to tell an outage from a bad batch.

mod common;

use bytes::Bytes;
use common::clickhouse::ClickHouse;
use heddle_proto::ProjectId;
use heddle_proto::digest::bytes_digest;
use heddle_store::clickhouse::ClickHouseStore;
use heddle_store::sqlite::{SqliteOptions, SqliteStore};
use heddle_store::{Store, StoreError};

fn content(size: usize, seed: u8) -> Bytes {
    (0..size).map(|i| (i % 251) as u8 ^ seed).collect::<Vec<_>>().into()
}

async fn check_blobs(store: &dyn Store) {
    let p = ProjectId::parse("e/p").unwrap();
    let other = ProjectId::parse("e/other").unwrap();
    // Sizes around the 1 MiB chunk boundary, and a large one.
    for size in [1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 20 << 20] {
        let blob = content(size, size as u8);
        let digest = bytes_digest(&blob);
        store.put_blob(&p, &digest, blob.clone()).await.unwrap();
        store.put_blob(&p, &digest, blob.clone()).await.unwrap(); // a retry: the same bytes
        let back = store.read_blob(&p, &digest, size as u64).await.unwrap();
        assert!(back == blob, "blob of {size} bytes read back differently");
        // Tenancy: another project does not see it.
        let err = store.read_blob(&other, &digest, size as u64).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{size}: {err:?}");
    }
    let err = store.read_blob(&p, &bytes_digest(b"never stored"), 12).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    // The reference's size guards against reading a blob as something it is not.
    let blob = content(3 << 20, 7);
    let digest = bytes_digest(&blob);
    store.put_blob(&p, &digest, blob).await.unwrap();
    assert!(store.read_blob(&p, &digest, 2 << 20).await.is_err(), "wrong size accepted");

    store.probe_write().await.unwrap();
    store.probe_write().await.unwrap();
}

#[tokio::test]
async fn sqlite_stores_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    check_blobs(&store).await;
}

#[tokio::test]
async fn clickhouse_stores_blobs() {
    let ch = ClickHouse::start();
    let db = ch.database.as_deref().unwrap_or("default");
    let store = ClickHouseStore::connect(&ch.url, "default", "", db).await.unwrap();
    check_blobs(&store).await;
    // A repeated write is not stored again.
    let rows: u64 = store
        .client()
        .query("SELECT count() FROM call_blob_chunks WHERE digest = ?")
        .bind(bytes_digest(&content(1, 1)))
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(rows, 1, "the 1-byte blob written twice is one row");
}
