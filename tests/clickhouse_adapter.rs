//! The test ClickHouse (chdb behind `tests/support/clickhouse_http.py`) speaks what the
//! `clickhouse` crate sends: LZ4-compressed RowBinary inserts, server-side parameters as
//! multipart forms, settings as URL parameters (insert deduplication tokens), and errors with
//! their ClickHouse codes.

mod common;

use clickhouse::{Client, Row};
use common::clickhouse::ClickHouse;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
struct Item {
    project_id: String,
    id: String,
    n: u64,
    note: Option<String>,
    payload: String,
}

fn items(n: u64) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            project_id: format!("e/p{}", i % 2),
            id: format!("id-{i:05}"),
            n: i,
            note: (i % 3 == 0).then(|| format!("note {i} ünïcode")),
            payload: "x".repeat((i % 7) as usize * 100),
        })
        .collect()
}

async fn insert(client: &Client, rows: &[Item]) -> clickhouse::error::Result<()> {
    let mut insert = client.insert::<Item>("items").await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await
}

#[tokio::test]
async fn speaks_what_the_clickhouse_crate_sends() {
    let ch = ClickHouse::start();
    let client = Client::default().with_url(&ch.url); // default compression: LZ4
    let table = "CREATE TABLE IF NOT EXISTS items (project_id String, id String, n UInt64, \
                 note Nullable(String), payload String) ENGINE = MergeTree ORDER BY (project_id, id) \
                 SETTINGS non_replicated_deduplication_window = 1000";
    client.query(table).execute().await.unwrap();

    // LZ4-framed insert, read back with a bound parameter (multipart form).
    let rows = items(3_000);
    insert(&client, &rows).await.unwrap();
    let back: Vec<Item> = client
        .query("SELECT ?fields FROM items WHERE project_id = {p:String} ORDER BY id")
        .param("p", "e/p1")
        .fetch_all()
        .await
        .unwrap();
    let want: Vec<Item> = rows.iter().filter(|r| r.project_id == "e/p1").cloned().collect();
    assert_eq!(back, want);

    // The same batch under the same deduplication token is stored once; a new token stores it.
    let dedup = client.clone().with_setting("insert_deduplication_token", "batch-7");
    let extra = items(10).into_iter().map(|mut r| {
        r.project_id = "e/dedup".into();
        r
    });
    let extra: Vec<Item> = extra.collect();
    insert(&dedup, &extra).await.unwrap();
    insert(&dedup, &extra).await.unwrap();
    let count = |c: Client| async move {
        c.query("SELECT count() FROM items WHERE project_id = 'e/dedup'")
            .fetch_one::<u64>()
            .await
            .unwrap()
    };
    assert_eq!(count(client.clone()).await, 10);
    let other = client.clone().with_setting("insert_deduplication_token", "batch-8");
    insert(&other, &extra).await.unwrap();
    assert_eq!(count(client.clone()).await, 20);

    // Uncompressed clients work too.
    let plain = Client::default().with_url(&ch.url).with_compression(clickhouse::Compression::None);
    assert_eq!(count(plain).await, 20);

    // Errors carry ClickHouse's code and message.
    let err = client.query("SELECT nope FROM items").fetch_all::<u64>().await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("47") && text.contains("nope"), "{text}");
}
