//! The ClickHouse store against the test ClickHouse (chdb behind its HTTP interface): schema
//! migrations, and what the HTTP suites cannot see (rows on disk, insert deduplication).
//! The HTTP conformance suites run on this store with `HEDDLE_TEST_STORE=clickhouse`.

mod common;

use common::clickhouse::ClickHouse;
use heddle_proto::ProjectId;
use heddle_proto::calls::{CallPart, CallsQueryReq, EndPart, StartPart};
use heddle_proto::time::Micros;
use heddle_store::clickhouse::{ClickHouseStore, migrations};
use heddle_store::prelude::*;
use heddle_store::{KeyRecord, StoreError};

async fn connect(ch: &ClickHouse) -> ClickHouseStore {
    let db = ch.database.as_deref().unwrap_or("default");
    ClickHouseStore::connect(&ch.url, "default", "", db).await.expect("connecting")
}

async fn tables(store: &ClickHouseStore) -> Vec<String> {
    store
        .client()
        .query("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
        .fetch_all::<String>()
        .await
        .unwrap()
}

#[tokio::test]
async fn migrations_apply_once_and_are_idempotent() {
    let ch = ClickHouse::start();
    let store = connect(&ch).await;
    let all: Vec<u32> = migrations::versions();
    assert_eq!(migrations::applied(store.client()).await.unwrap(), all);
    assert_eq!(
        tables(&store).await,
        [
            "annotation_queue_items",
            "annotation_queue_progress",
            "annotation_queues",
            "api_key_revocations",
            "api_keys",
            "call_blob_chunks",
            "call_parts",
            "feedback",
            "file_chunks",
            "files",
            "heddle_health",
            "heddle_schema_migrations",
            "llm_token_prices",
            "object_aliases",
            "object_tags",
            "objects",
            "otel_logs",
            "project_settings",
            "table_rows",
            "tables"
        ]
    );

    // Running again (directly, or by a second process starting) changes nothing.
    assert_eq!(migrations::migrate(store.client()).await.unwrap(), Vec::<u32>::new());
    let again = connect(&ch).await;
    assert_eq!(migrations::applied(again.client()).await.unwrap(), all);
    let recorded: u64 = again
        .client()
        .query("SELECT count() FROM heddle_schema_migrations")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(recorded, all.len() as u64, "each version recorded once");

    // A migration interrupted after some of its statements is applied again in full: its
    // statements are idempotent, and the version is recorded only at the end.
    store.client().query("DROP TABLE files").execute().await.unwrap();
    store
        .client()
        .query("ALTER TABLE heddle_schema_migrations DELETE WHERE version = 1")
        .with_setting("mutations_sync", "1")
        .execute()
        .await
        .unwrap();
    assert_eq!(migrations::migrate(store.client()).await.unwrap(), [1]);
    assert!(tables(&store).await.contains(&"files".to_owned()));
    assert_eq!(migrations::applied(store.client()).await.unwrap(), all);
}

/// The migrations as a database created before SQLite and ClickHouse shared their numbering
/// recorded them: objects and files chunks as 2, tables as 3 (now 3 and 4).
const OLD_NUMBERING: &[(u32, &str)] = &[
    (1, include_str!("../store/src/clickhouse/migrations/0001_init.sql")),
    (2, include_str!("../store/src/clickhouse/migrations/0003_objects_files.sql")),
    (3, include_str!("../store/src/clickhouse/migrations/0004_tables.sql")),
    (5, include_str!("../store/src/clickhouse/migrations/0005_feedback.sql")),
    (6, include_str!("../store/src/clickhouse/migrations/0006_costs.sql")),
    (7, include_str!("../store/src/clickhouse/migrations/0007_key_revocation.sql")),
    (8, include_str!("../store/src/clickhouse/migrations/0008_blobs.sql")),
];

/// The text of the migrations numbered after the old numbering ended (8).
fn newer_migrations_text() -> String {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("store/src/clickhouse/migrations");
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name[..4].parse::<u32>().is_ok_and(|n| n > 8) {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    text
}

/// A database migrated by the old numbering, up to and including `last`, holding a file and a
/// table when their migrations are in.
async fn old_database(ch: &ClickHouse, last: u32) -> clickhouse::Client {
    let base = clickhouse::Client::default().with_url(&ch.url).with_user("default");
    let client = match ch.database.as_deref() {
        Some(db) => {
            base.query(&format!("CREATE DATABASE IF NOT EXISTS `{db}`")).execute().await.unwrap();
            base.with_database(db)
        }
        None => base,
    };
    migrations::applied(&client).await.unwrap(); // creates the log
    for (version, file) in OLD_NUMBERING.iter().filter(|(v, _)| *v <= last) {
        for stmt in migrations::statements(file) {
            client.query(&stmt).execute().await.unwrap();
        }
        client
            .query("INSERT INTO heddle_schema_migrations (version) VALUES (?)")
            .bind(version)
            .execute()
            .await
            .unwrap();
    }
    client
}

#[tokio::test]
async fn databases_from_before_the_shared_numbering_migrate() {
    let project = ProjectId::parse("e/p").unwrap();
    let mut all_and_old_2 = migrations::versions();
    all_and_old_2.push(2);
    all_and_old_2.sort();

    // Fully migrated by the old numbering, with data in the renumbered tables.
    let ch = ClickHouse::start();
    let client = old_database(&ch, 8).await;
    for insert in [
        "INSERT INTO file_chunks (project_id, digest, chunk_index, data) VALUES ('e/p', 'f1', 0, 'abc')",
        "INSERT INTO files (project_id, digest, size_bytes, content, created_at, n_chunks) \
         VALUES ('e/p', 'f1', 3, '', now64(6), 1)",
        "INSERT INTO table_rows (project_id, digest, val, size_bytes, created_at) \
         VALUES ('e/p', 'r1', '{\"a\": 1}', 8, now64(6))",
        "INSERT INTO tables (project_id, digest, row_count, row_digests, created_at) \
         VALUES ('e/p', 't1', 1, ['r1'], now64(6))",
    ] {
        client.query(insert).execute().await.unwrap();
    }
    let before: Vec<String> = client
        .query("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
        .fetch_all()
        .await
        .unwrap();
    // Only tables (4) is applied again, a no-op, and the migrations newer than the old
    // numbering; the old 2 stays and means nothing.
    let newer: Vec<u32> = migrations::versions().into_iter().filter(|v| *v > 8).collect();
    let again: Vec<u32> = std::iter::once(4).chain(newer.iter().copied()).collect();
    assert_eq!(migrations::migrate(&client).await.unwrap(), again);
    assert_eq!(migrations::applied(&client).await.unwrap(), all_and_old_2);
    assert_eq!(migrations::migrate(&client).await.unwrap(), Vec::<u32>::new());
    let store = connect(&ch).await;
    let after = tables(&store).await;
    assert!(before.iter().all(|t| after.contains(t)), "no table lost: {after:?}");
    let newer_sql = newer_migrations_text();
    for added in after.iter().filter(|t| !before.contains(t)) {
        let created = format!("CREATE TABLE IF NOT EXISTS {added} ");
        assert!(newer_sql.contains(&created), "{added} added by no newer migration");
    }
    assert_eq!(store.read_file(&project, "f1").await.unwrap(), &b"abc"[..]);
    let slice = store.table_slice(&project, "t1", 0, None).await.unwrap().unwrap();
    assert_eq!(slice.row_digests, ["r1"]);
    let read = store.read_rows(&project, &slice.row_digests, true).await.unwrap();
    assert_eq!(read["r1"].val.as_ref().unwrap().get(), "{\"a\": 1}");

    // Stopped by the old numbering after objects and files (old 2): tables come now, as 4.
    let ch = ClickHouse::start();
    let client = old_database(&ch, 2).await;
    let rest: Vec<u32> = migrations::versions().into_iter().filter(|v| *v > 2).collect();
    assert_eq!(migrations::migrate(&client).await.unwrap(), rest);
    let store = connect(&ch).await;
    assert!(tables(&store).await.contains(&"tables".to_owned()));
    assert_eq!(migrations::applied(store.client()).await.unwrap(), all_and_old_2);
}

fn part(id: &str, start: bool, end: bool) -> CallPart {
    CallPart {
        project: ProjectId::parse("e/p").unwrap(),
        id: id.to_owned(),
        trace_id: Some("t".into()),
        start: start.then(|| StartPart {
            op_name: "op".into(),
            display_name: None,
            parent_id: None,
            thread_id: None,
            turn_id: None,
            started_at: Micros(1_000_000),
            attributes: "{}".into(),
            inputs: r#"{"x": 1.0}"#.into(),
            otel_dump: None,
            wb_user_id: None,
            wb_run_id: None,
            wb_run_step: None,
        }),
        end: end.then(|| EndPart {
            ended_at: Micros(3_000_000),
            summary: "{}".into(),
            output: Some("2".into()),
            exception: None,
            wb_run_step_end: None,
            display_name: None,
        }),
    }
}

async fn rows_of(store: &ClickHouseStore, id: &str) -> u64 {
    store
        .client()
        .query("SELECT count() FROM call_parts WHERE project_id = 'e/p' AND id = ?")
        .bind(id)
        .fetch_one()
        .await
        .unwrap()
}

#[tokio::test]
async fn batches_under_one_token_are_stored_once() {
    let ch = ClickHouse::start();
    let store = connect(&ch).await;
    let batch = vec![part("a", true, false), part("a", false, true), part("b", true, true)];
    store.apply_call_parts_once(batch.clone(), "p0:1-3").await.unwrap();
    store.apply_call_parts_once(batch.clone(), "p0:1-3").await.unwrap();
    assert_eq!(rows_of(&store, "a").await, 2, "the repeated batch was not stored again");

    // Without a token the rows are stored again, and the calls read the same.
    store.apply_call_parts(batch).await.unwrap();
    assert_eq!(rows_of(&store, "a").await, 4);
    let q: CallsQueryReq =
        serde_json::from_value(serde_json::json!({"project_id": "e/p"})).unwrap();
    assert_eq!(store.count_calls(q.validate().unwrap()).await.unwrap(), 2);
    let q: CallsQueryReq =
        serde_json::from_value(serde_json::json!({"project_id": "e/p"})).unwrap();
    let calls: Vec<_> = futures::StreamExt::collect::<Vec<_>>(
        store.query_calls(q.validate().unwrap()).await.unwrap(),
    )
    .await;
    let a = calls[0].as_ref().unwrap();
    assert_eq!(
        (a.id.as_str(), a.inputs.get(), a.output.as_ref().unwrap().get()),
        ("a", r#"{"x": 1.0}"#, "2")
    );
    assert_eq!(a.ended_at, Some(Micros(3_000_000)));
}

#[tokio::test]
async fn files_are_stored_in_chunks_and_old_inline_files_still_read() {
    use bytes::Bytes;
    let ch = ClickHouse::start();
    let store = connect(&ch).await;
    let project = ProjectId::parse("e/p").unwrap();
    let content: Bytes =
        (0..(5usize << 20) / 2).map(|i| (i % 253) as u8).collect::<Vec<_>>().into();
    store.create_file(&project, "big", content.clone()).await.unwrap();
    store.create_file(&project, "big", content.clone()).await.unwrap(); // idempotent
    let chunks: Vec<(u32, u64)> = store
        .client()
        .query("SELECT chunk_index, length(data) FROM file_chunks WHERE digest = 'big' ORDER BY chunk_index")
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(chunks, [(0, 1 << 20), (1, 1 << 20), (2, 1 << 19)], "2.5 MiB in 1 MiB chunks");
    let row: (u64, u32, u64) = store
        .client()
        .query("SELECT size_bytes, n_chunks, length(content) FROM files WHERE digest = 'big'")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(row, (content.len() as u64, 3, 0), "the file row carries no content");
    assert_eq!(store.read_file(&project, "big").await.unwrap(), content);

    // A file written before chunking (schema version 1: content in the file row) reads as it
    // was, and counts in the stats.
    store
        .client()
        .query(
            "INSERT INTO files (project_id, digest, size_bytes, content, created_at) \
             VALUES ('e/p', 'old', 3, 'abc', now64(6))",
        )
        .execute()
        .await
        .unwrap();
    assert_eq!(store.read_file(&project, "old").await.unwrap(), Bytes::from_static(b"abc"));
    assert_eq!(store.files_size(&project).await.unwrap(), content.len() as u64 + 3);
}

#[tokio::test]
async fn keys_are_listed_and_revoked() {
    let ch = ClickHouse::start();
    let store = connect(&ch).await;
    let (admin, alice, bob) = ("a0".repeat(32), "b1".repeat(32), "c2".repeat(32));
    store.create_key(&admin, None).await.unwrap();
    store.create_key(&alice, Some("alice")).await.unwrap();
    store.create_key(&bob, Some("bob")).await.unwrap();
    assert!(store.has_admin_key().await.unwrap());

    let listed = store.list_keys().await.unwrap();
    let mut ids: Vec<(&str, Option<&str>)> =
        listed.iter().map(|k| (k.id.as_str(), k.entity.as_deref())).collect();
    ids.sort();
    assert_eq!(
        ids,
        [("a0a0a0a0a0a0", None), ("b1b1b1b1b1b1", Some("alice")), ("c2c2c2c2c2c2", Some("bob"))]
    );
    assert!(listed.iter().all(|k| k.revoked_at.is_none() && k.created_at.0 > 0), "{listed:?}");
    assert!(listed.windows(2).all(|w| w[0].created_at <= w[1].created_at), "oldest first");

    let revoked = store.revoke_key("B1B1B1B1B1B1").await.unwrap();
    assert_eq!(revoked.entity.as_deref(), Some("alice"));
    let at = revoked.revoked_at.expect("revoked");
    assert_eq!(store.lookup_key(&alice).await.unwrap(), None);
    assert_eq!(
        store.lookup_key(&bob).await.unwrap(),
        Some(KeyRecord { entity: Some("bob".into()) })
    );
    // Again: nothing changes, the first revocation time stays, also when a second process
    // revoked it at the same time (two revocation rows: the earliest counts).
    assert_eq!(store.revoke_key("b1b1b1b1b1b1").await.unwrap().revoked_at, Some(at));
    store
        .client()
        .query("INSERT INTO api_key_revocations (key_hash, revoked_at) VALUES (?, now64(6))")
        .bind(&alice)
        .execute()
        .await
        .unwrap();
    let listed = store.list_keys().await.unwrap();
    let alice_listed = listed.iter().find(|k| k.id == "b1b1b1b1b1b1").unwrap();
    assert_eq!(alice_listed.revoked_at, Some(at));
    assert_eq!(listed.iter().filter(|k| k.revoked_at.is_some()).count(), 1, "{listed:?}");
    assert_eq!(listed.len(), 3);

    // Revoking the only admin key leaves none: the next `serve` generates a new one.
    store.revoke_key("a0a0a0a0a0a0").await.unwrap();
    assert!(!store.has_admin_key().await.unwrap());
    assert_eq!(store.lookup_key(&admin).await.unwrap(), None);

    assert!(matches!(store.revoke_key("d3d3d3d3d3d3").await, Err(StoreError::NotFound(_))));
    for bad in ["b1b1", "b1b1b1b1b1b1b1", "b1b1b1b1b1bx", "%"] {
        assert!(matches!(store.revoke_key(bad).await, Err(StoreError::Invalid(_))), "{bad}");
    }
    assert_eq!(store.lookup_key(&bob).await.unwrap().unwrap().entity.as_deref(), Some("bob"));
}
