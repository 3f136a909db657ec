//! Tables and refs over HTTP (docs/api/refs.md#read-a-batch-of-refs, docs/api/tables.md,
//! docs/api/tables.md#create-a-table-from-row-digests): digests, round trips, updates, paging,
//! sorting, filters, chunked uploads of large tables, stats, ref resolution, tenancy and the 4xx
//! answers for bad input. Every write is read back and compared.

mod common;

use common::{Api, Server};
use heddle_proto::digest::{row_digest, table_digest};
use serde_json::{Value, json};

const P: &str = "ent/tables";
const EMPTY_TABLE: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

async fn create_table(api: &Api, project: &str, rows: &[Value]) -> (String, Vec<String>) {
    let body = json!({"table": {"project_id": project, "rows": rows, "expected_digest": null}});
    let r = api.post("/table/create", &body).await.ok();
    let digests: Vec<String> = serde_json::from_value(r["row_digests"].clone()).unwrap();
    assert_eq!(digests.len(), rows.len(), "{r}");
    (r["digest"].as_str().unwrap_or_else(|| panic!("no digest: {r}")).to_owned(), digests)
}

/// `/table/query` → `(digest, val, original_index)` per row.
async fn query(api: &Api, project: &str, digest: &str, extra: Value) -> Vec<(String, Value, u64)> {
    let mut body = json!({"project_id": project, "digest": digest});
    if let Value::Object(o) = extra {
        for (k, v) in o {
            body[k] = v;
        }
    }
    let r = api.post("/table/query", &body).await.ok();
    r["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {r}"))
        .iter()
        .map(|row| {
            (
                row["digest"].as_str().unwrap().to_owned(),
                row["val"].clone(),
                row["original_index"].as_u64().unwrap_or_else(|| panic!("no index: {row}")),
            )
        })
        .collect()
}

async fn count(api: &Api, project: &str, digest: &str) -> u64 {
    let r = api
        .post("/table/query_stats", &json!({"project_id": project, "digest": digest}))
        .await
        .ok();
    r["count"].as_u64().unwrap_or_else(|| panic!("no count: {r}"))
}

fn vals(rows: &[(String, Value, u64)]) -> Vec<Value> {
    rows.iter().map(|r| r.1.clone()).collect()
}

fn indexes(rows: &[(String, Value, u64)]) -> Vec<u64> {
    rows.iter().map(|r| r.2).collect()
}

#[tokio::test]
async fn create_and_read_back() {
    let server = Server::start();
    let api = server.admin();

    // The contract's vectors.
    let rows = [json!({"a": 1}), json!({"a": 2})];
    let (digest, row_digests) = create_table(&api, P, &rows).await;
    assert_eq!(digest, "1c95cdc46a75d6e7e971986a80adfcd676dd22f2222a3405c7743f3db8df6785");
    assert_eq!(
        row_digests,
        [
            "XdhgKMbg1k4iUYb5astpM4ssWXZN95FiEH9cS7NNExA",
            "5anVsDAOD1DTcuWp3fokIIqsmpQM6aNvJHOHIhriBf4"
        ]
    );
    let back = query(&api, P, &digest, json!({"filter": {"row_digests": null}})).await;
    assert_eq!(vals(&back), rows);
    assert_eq!(indexes(&back), [0, 1]);
    assert_eq!(back[1].0, row_digests[1]);
    assert_eq!(count(&api, P, &digest).await, 2);

    // Creating it again is idempotent.
    assert_eq!(create_table(&api, P, &rows).await.0, digest);

    // Nested values, unicode and duplicates (a row held twice is listed twice).
    let rich = [
        json!({"q": "what?", "nested": {"list": [1, 2.5, null, true], "é": "ü😀"}}),
        json!({"a": 1}),
        json!({"q": "what?", "nested": {"list": [1, 2.5, null, true], "é": "ü😀"}}),
    ];
    let (rich_digest, rich_rows) = create_table(&api, P, &rich).await;
    assert_eq!(rich_rows[0], rich_rows[2]);
    assert_eq!(rich_rows[1], row_digests[0], "rows are content-addressed across tables");
    assert_eq!(rich_digest, table_digest(&rich_rows));
    let back = query(&api, P, &rich_digest, json!({})).await;
    assert_eq!(vals(&back), rich);
    assert_eq!(indexes(&back), [0, 1, 2]);

    // The empty table.
    let (empty, none) = create_table(&api, P, &[]).await;
    assert_eq!((empty.as_str(), none.len()), (EMPTY_TABLE, 0));
    assert!(query(&api, P, EMPTY_TABLE, json!({})).await.is_empty());
    assert_eq!(count(&api, P, EMPTY_TABLE).await, 0);

    // expected_digest: right → accepted; wrong → 409 and nothing stored under it.
    let body = |expected: &str| json!({"table": {"project_id": P, "rows": [{"z": 1}], "expected_digest": expected}});
    let right = table_digest(&[row_digest(&json!({"z": 1}))]);
    assert_eq!(api.post("/table/create", &body(&right)).await.ok()["digest"], right.as_str());
    api.post("/table/create", &body(&"0".repeat(64))).await.err(409);

    // Rows must be objects.
    for bad in [json!(1), json!("x"), json!([1, 2]), json!(null), json!(true)] {
        let body = json!({"table": {"project_id": P, "rows": [{"ok": 1}, bad]}});
        let reason = api.post("/table/create", &body).await.err(400);
        assert!(reason.contains("row 1"), "{reason}");
    }
    // Malformed requests.
    api.post("/table/create", &json!({"table": {"project_id": P}})).await.err(400);
    api.post("/table/create", &json!({"table": {"project_id": "nope", "rows": []}})).await.err(400);
    api.post_raw("/table/create", "{not json").await.err(400);

    // Unknown tables are 404 everywhere, also in another project of the same entity.
    api.post("/table/query", &json!({"project_id": P, "digest": "0".repeat(64)})).await.err(404);
    api.post("/table/query_stats", &json!({"project_id": P, "digest": "nope"})).await.err(404);
    api.post("/table/query", &json!({"project_id": "ent/other", "digest": digest})).await.err(404);
}

#[tokio::test]
async fn oversized_rows_are_413() {
    let server = Server::start_with(&["--max-body-bytes", "65536"]);
    let api = server.admin();
    let big = "x".repeat(100_000);
    let body = json!({"table": {"project_id": P, "rows": [{"big": big}]}});
    api.post("/table/create", &body).await.err(413);
    let (base, _) = create_table(&api, P, &[json!({"a": 1})]).await;
    let body = json!({"project_id": P, "base_digest": base,
                      "updates": [{"append": {"row": {"big": "y".repeat(100_000)}}}]});
    api.post("/table/update", &body).await.err(413);
    assert_eq!(count(&api, P, &base).await, 1);
}

#[tokio::test]
async fn updates_apply_in_order() {
    let server = Server::start();
    let api = server.admin();
    let (a, b, c) = (json!({"r": "a"}), json!({"r": "b"}), json!({"r": "c"}));
    let (base, base_rows) = create_table(&api, P, &[a.clone(), b.clone()]).await;
    let update = |updates: Value| json!({"project_id": P, "base_digest": base, "updates": updates});

    let r = api
        .post(
            "/table/update",
            &update(json!([
                {"append": {"row": c}},
                {"insert": {"index": 0, "row": c}},
                {"pop": {"index": 2}},
                {"insert": {"index": 3, "row": {"r": "d"}}},
            ])),
        )
        .await
        .ok();
    // [a, b] → [a, b, c] → [c, a, b, c] → [c, a, c] → [c, a, c, d]
    let want = [c.clone(), a.clone(), c.clone(), json!({"r": "d"})];
    let want_digests: Vec<String> = want.iter().map(row_digest).collect();
    assert_eq!(r["digest"], table_digest(&want_digests).as_str(), "{r}");
    let (dc, dd) = (row_digest(&c), row_digest(&json!({"r": "d"})));
    assert_eq!(r["updated_row_digests"], json!([dc, dc, base_rows[1], dd]));
    let new = r["digest"].as_str().unwrap();
    let back = query(&api, P, new, json!({})).await;
    assert_eq!(vals(&back), want);
    // The same rows created directly give the same table.
    assert_eq!(create_table(&api, P, &want).await.0, new);
    // The base is unchanged.
    assert_eq!(vals(&query(&api, P, &base, json!({})).await), [a.clone(), b.clone()]);

    // No updates: the same table.
    let r = api.post("/table/update", &update(json!([]))).await.ok();
    assert_eq!(
        (r["digest"].as_str(), r["updated_row_digests"].clone()),
        (Some(base.as_str()), json!([]))
    );

    // Bad indexes and rows → 400; nothing changes.
    for bad in [
        json!([{"pop": {"index": 2}}]),
        json!([{"pop": {"index": -1}}]),
        json!([{"insert": {"index": 3, "row": {"r": 1}}}]),
        json!([{"insert": {"index": -1, "row": {"r": 1}}}]),
        json!([{"append": {"row": {"r": 1}}}, {"pop": {"index": 9}}]),
        json!([{"append": {"row": [1]}}]),
        json!([{"append": {"row": "x"}}]),
        json!([{"frobnicate": {"index": 0}}]),
        json!([{"pop": {}}]),
    ] {
        api.post("/table/update", &update(bad.clone())).await.err(400);
    }
    assert_eq!(count(&api, P, &base).await, 2);

    // Unknown base → 404.
    let body = json!({"project_id": P, "base_digest": "0".repeat(64),
                      "updates": [{"append": {"row": {"r": 1}}}]});
    api.post("/table/update", &body).await.err(404);

    // Chained updates from the empty table (the SDK's fallback for large tables).
    let (mut digest, _) = create_table(&api, P, &[]).await;
    let mut all = Vec::new();
    for chunk in 0..3 {
        let rows: Vec<Value> = (0..4).map(|i| json!({"chunk": chunk, "i": i})).collect();
        let updates: Vec<Value> = rows.iter().map(|r| json!({"append": {"row": r}})).collect();
        let body = json!({"project_id": P, "base_digest": digest, "updates": updates});
        let r = api.post("/table/update", &body).await.ok();
        let got: Vec<String> = serde_json::from_value(r["updated_row_digests"].clone()).unwrap();
        assert_eq!(got, rows.iter().map(row_digest).collect::<Vec<_>>());
        digest = r["digest"].as_str().unwrap().to_owned();
        all.extend(rows);
    }
    assert_eq!(vals(&query(&api, P, &digest, json!({})).await), all);
}

#[tokio::test]
async fn query_pages_sorts_and_filters() {
    let server = Server::start();
    let api = server.admin();
    let rows: Vec<Value> = (0..250)
        .map(|i| json!({"i": i, "g": i % 3, "s": format!("s{:03}", 249 - i), "m": {"x": i % 7}}))
        .collect();
    let (digest, row_digests) = create_table(&api, P, &rows).await;
    assert_eq!(count(&api, P, &digest).await, 250);

    // The SDK's paging: limit 100 until a short page.
    let mut got = Vec::new();
    for page in 0.. {
        let r = query(&api, P, &digest, json!({"limit": 100, "offset": page * 100})).await;
        let n = r.len();
        got.extend(r);
        if n < 100 {
            break;
        }
    }
    assert_eq!(vals(&got), rows);
    assert_eq!(indexes(&got), (0..250).collect::<Vec<u64>>());
    assert!(query(&api, P, &digest, json!({"offset": 250})).await.is_empty());
    assert!(query(&api, P, &digest, json!({"limit": 0})).await.is_empty());
    let tail = query(&api, P, &digest, json!({"offset": 245})).await;
    assert_eq!(indexes(&tail), [245, 246, 247, 248, 249]);

    // sort_by: descending number.
    let r = query(
        &api,
        P,
        &digest,
        json!({"sort_by": [{"field": "i", "direction": "desc"}],
                                          "limit": 3}),
    )
    .await;
    assert_eq!(indexes(&r), [249, 248, 247]);
    // sort_by a string, ascending (s runs opposite to i).
    let r = query(
        &api,
        P,
        &digest,
        json!({"sort_by": [{"field": "s", "direction": "asc"}],
                                          "limit": 2, "offset": 1}),
    )
    .await;
    assert_eq!(indexes(&r), [248, 247]);
    // Two keys, one a dot path: m.x ascending, then i descending.
    let r = query(
        &api,
        P,
        &digest,
        json!({"sort_by": [{"field": "m.x", "direction": "asc"}, {"field": "i", "direction": "desc"}],
               "limit": 3}),
    )
    .await;
    assert_eq!(indexes(&r), [245, 238, 231]);
    for (_, val, idx) in &r {
        assert_eq!(*val, rows[*idx as usize], "values travel with their index");
    }

    // filter.row_digests: only those rows, in table order, with their original index.
    let only = json!([row_digests[7], row_digests[3], "not-a-row"]);
    let r = query(&api, P, &digest, json!({"filter": {"row_digests": only}})).await;
    assert_eq!(indexes(&r), [3, 7]);
    assert_eq!(vals(&r), [rows[3].clone(), rows[7].clone()]);
    // Filter, sort and page together.
    let only: Vec<&String> = row_digests.iter().step_by(10).collect();
    let r = query(
        &api,
        P,
        &digest,
        json!({"filter": {"row_digests": only}, "sort_by": [{"field": "i", "direction": "desc"}],
               "offset": 1, "limit": 2}),
    )
    .await;
    assert_eq!(indexes(&r), [230, 220]);
    let r = query(&api, P, &digest, json!({"filter": {"row_digests": []}})).await;
    assert!(r.is_empty());

    // Bad paging and sorting → 400.
    for bad in [
        json!({"limit": -1}),
        json!({"offset": -5}),
        json!({"sort_by": [{"field": "i", "direction": "sideways"}]}),
        json!({"sort_by": [{"field": ""}]}),
        json!({"limit": "ten"}),
    ] {
        let mut body = json!({"project_id": P, "digest": digest});
        for (k, v) in bad.as_object().unwrap() {
            body[k] = v.clone();
        }
        api.post("/table/query", &body).await.err(400);
    }
}

#[tokio::test]
async fn query_stats_batch_counts_and_sizes() {
    let server = Server::start();
    let api = server.admin();
    let (one, _) = create_table(&api, P, &[json!({"a": 1})]).await;
    let (dup, _) =
        create_table(&api, P, &[json!({"a": 1}), json!({"a": 1}), json!({"bb": 22})]).await;
    let body = json!({"project_id": P, "digests": [one, "0".repeat(64), dup, one],
                      "include_storage_size": true});
    let r = api.post("/table/query_stats_batch", &body).await.ok();
    // {"a":1} is 7 bytes, {"bb":22} 9; a row held twice counts twice.
    assert_eq!(
        r,
        json!({"tables": [
            {"digest": one, "count": 1, "storage_size_bytes": 7},
            {"digest": dup, "count": 3, "storage_size_bytes": 23},
        ]})
    );
    let body = json!({"project_id": P, "digests": [dup]});
    let r = api.post("/table/query_stats_batch", &body).await.ok();
    assert_eq!(r, json!({"tables": [{"digest": dup, "count": 3, "storage_size_bytes": null}]}));
    let r = api.post("/table/query_stats_batch", &json!({"project_id": P, "digests": null})).await;
    assert_eq!(r.ok(), json!({"tables": []}));
}

#[tokio::test]
async fn create_from_digests_combines_chunks() {
    let server = Server::start();
    let api = server.admin();
    let cfd = |body: Value| {
        let api = api.clone();
        async move { api.post("/table/create_from_digests", &body).await }
    };

    // The SDK's probe: an empty list must not be a 404.
    let r = cfd(json!({"project_id": P, "row_digests": [], "expected_digest": null})).await.ok();
    assert_eq!(r, json!({"digest": EMPTY_TABLE}));

    let first: Vec<Value> = (0..3).map(|i| json!({"chunk": 0, "i": i})).collect();
    let second: Vec<Value> = (0..2).map(|i| json!({"chunk": 1, "i": i})).collect();
    let (_, d1) = create_table(&api, P, &first).await;
    let (_, d2) = create_table(&api, P, &second).await;
    let mut all_digests = d1.clone();
    all_digests.extend(d2.clone());
    all_digests.push(d1[0].clone()); // duplicates are fine
    let want = table_digest(&all_digests);
    let r = cfd(json!({"project_id": P, "row_digests": all_digests, "expected_digest": want}))
        .await
        .ok();
    assert_eq!(r, json!({"digest": want}));
    let mut all = first.clone();
    all.extend(second);
    all.push(first[0].clone());
    let back = query(&api, P, &want, json!({})).await;
    assert_eq!(vals(&back), all);
    assert_eq!(indexes(&back), (0..6).collect::<Vec<u64>>());
    // Same as creating all rows at once.
    assert_eq!(create_table(&api, P, &all).await.0, want);

    // Wrong expected digest → 409; unknown or malformed row digests → 400; rows of another
    // project (same entity) are not this project's rows → 400.
    cfd(json!({"project_id": P, "row_digests": d1, "expected_digest": "0".repeat(64)}))
        .await
        .err(409);
    let unknown = row_digest(&json!({"never": "stored"}));
    let reason = cfd(json!({"project_id": P, "row_digests": [d1[0], unknown]})).await.err(400);
    assert!(reason.contains(&unknown), "{reason}");
    cfd(json!({"project_id": P, "row_digests": ["short"]})).await.err(400);
    cfd(json!({"project_id": "ent/elsewhere", "row_digests": d1})).await.err(400);
}

/// A 5,000-row dataset uploaded the way the SDK does it (chunks via `/table/create`, combined
/// with `/table/create_from_digests`), then paged back, counted and appended to.
#[tokio::test]
async fn large_tables() {
    let server = Server::start();
    let api = server.admin();
    let rows: Vec<Value> = (0..5000)
        .map(|i| json!({"id": i, "question": format!("What is {i} + {i}?"), "answer": 2 * i}))
        .collect();
    let mut digests = Vec::new();
    for chunk in rows.chunks(1000) {
        digests.extend(create_table(&api, P, chunk).await.1);
    }
    let body = json!({"project_id": P, "row_digests": digests});
    let digest = api.post("/table/create_from_digests", &body).await.ok()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(digest, table_digest(&digests));
    assert_eq!(count(&api, P, &digest).await, 5000);
    let mut got = Vec::new();
    let mut offset = 0;
    loop {
        let page = query(&api, P, &digest, json!({"limit": 100, "offset": offset})).await;
        assert!(page.iter().zip(offset..).all(|(r, i)| r.2 == i), "original_index at {offset}");
        let n = page.len();
        got.extend(vals(&page));
        offset += 100;
        if n < 100 {
            break;
        }
    }
    assert_eq!(got, rows);
    let r = query(
        &api,
        P,
        &digest,
        json!({"sort_by": [{"field": "answer", "direction": "desc"}],
                                          "limit": 2}),
    )
    .await;
    assert_eq!(indexes(&r), [4999, 4998]);

    let body = json!({"project_id": P, "base_digest": digest,
                      "updates": [{"append": {"row": {"id": 5000}}}, {"pop": {"index": 0}}]});
    let r = api.post("/table/update", &body).await.ok();
    let new = r["digest"].as_str().unwrap();
    assert_eq!(count(&api, P, new).await, 5000);
    let last = query(&api, P, new, json!({"offset": 4998})).await;
    assert_eq!(vals(&last), [rows[4999].clone(), json!({"id": 5000})]);
}

#[tokio::test]
async fn tables_keep_tenants_apart() {
    let server = Server::start();
    let admin = server.admin();
    let alice = server.client(Some(&server.create_entity_key("alice")));
    let (bobs, bob_rows) = create_table(&admin, "bob/p", &[json!({"secret": 1})]).await;
    let (_, alice_rows) = create_table(&alice, "alice/p", &[json!({"mine": 1})]).await;
    assert_eq!(alice_rows.len(), 1);
    let forbidden = [
        ("/table/create", json!({"table": {"project_id": "bob/p", "rows": []}})),
        ("/table/query", json!({"project_id": "bob/p", "digest": bobs})),
        ("/table/query_stats", json!({"project_id": "bob/p", "digest": bobs})),
        ("/table/query_stats_batch", json!({"project_id": "bob/p", "digests": [bobs]})),
        ("/table/update", json!({"project_id": "bob/p", "base_digest": bobs, "updates": []})),
        ("/table/create_from_digests", json!({"project_id": "bob/p", "row_digests": bob_rows})),
    ];
    for (path, body) in forbidden {
        alice.post(path, &body).await.err(403);
    }
    // Bob's rows cannot be pulled into Alice's project by digest.
    let body = json!({"project_id": "alice/p", "row_digests": bob_rows});
    alice.post("/table/create_from_digests", &body).await.err(400);
    alice.post("/table/query", &json!({"project_id": "alice/p", "digest": bobs})).await.err(404);
    alice
        .client_without_auth()
        .post("/table/query_stats", &json!({"project_id": "alice/p", "digest": bobs}))
        .await
        .err(401);
}

// ---------------------------------------------------------------------------------------------
// Refs

async fn create_obj(api: &Api, project: &str, object_id: &str, val: Value) -> String {
    let body = json!({"obj": {"project_id": project, "object_id": object_id, "val": val}});
    api.post("/obj/create", &body).await.ok()["digest"].as_str().unwrap().to_owned()
}

async fn read_refs(api: &Api, refs: &[String]) -> Vec<Value> {
    let r = api.post("/refs/read_batch", &json!({ "refs": refs })).await.ok();
    let vals = r["vals"].as_array().unwrap_or_else(|| panic!("no vals: {r}")).clone();
    assert_eq!(vals.len(), refs.len(), "{r}");
    vals
}

#[tokio::test]
async fn refs_resolve_objects_rows_and_paths() {
    let server = Server::start();
    let api = server.admin();
    let rows = [json!({"q": "a/b", "n": 1}), json!({"q": "x", "n": 2})];
    let (table, row_digests) = create_table(&api, P, &rows).await;
    let inner_val = json!({"x": {"y": 5}, "list": [10, 20]});
    let inner = create_obj(&api, P, "inner", inner_val.clone()).await;
    let ds_val = json!({
        "_type": "Dataset", "name": "my ds", "rows": format!("weave:///{P}/table/{table}"),
        "meta": {"k/ey:%": [10, 20, {"deep": "v"}], "a b": "space"},
        "other": format!("weave:///{P}/object/inner:{inner}"),
        "other_path": format!("weave:///{P}/object/inner:{inner}/key/x"),
        "latest": format!("weave:///{P}/object/inner:latest"),
        "_class_name": "Dataset", "_bases": ["Object", "BaseModel"],
    });
    let ds = create_obj(&api, P, "my_ds", ds_val.clone()).await;
    let op_val = json!({"_type": "CustomWeaveType", "weave_type": {"type": "Op"},
                        "files": {"obj.py": "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"}});
    let op = create_obj(&api, P, "my_op", op_val.clone()).await;
    let base = format!("weave:///{P}/object/my_ds:{ds}");
    let r = |suffix: &str| format!("{base}{suffix}");
    let cases: Vec<(String, Value)> = vec![
        (base.clone(), ds_val.clone()),
        (format!("weave:///{P}/object/my_ds:latest"), ds_val.clone()),
        (format!("weave:///{P}/object/my_ds:v0"), ds_val.clone()),
        (format!("weave:///{P}/object/my_ds"), ds_val.clone()),
        (format!("weave:///{P}/op/my_op:{op}"), op_val.clone()),
        (r("/attr/rows"), json!(format!("weave:///{P}/table/{table}"))),
        (r(&format!("/attr/rows/id/{}", row_digests[1])), rows[1].clone()),
        (r(&format!("/attr/rows/id/{}/key/q", row_digests[0])), json!("a/b")),
        (r("/key/meta/key/k%2Fey%3A%25/index/2/key/deep"), json!("v")),
        (r("/key/meta/key/a%20b"), json!("space")),
        (r("/attr/other"), json!(format!("weave:///{P}/object/inner:{inner}"))),
        (r("/attr/other/key/x/key/y"), json!(5)),
        (r("/attr/other/attr/list/index/1"), json!(20)),
        (r("/attr/other_path/key/y"), json!(5)),
        (r("/attr/latest/key/x"), json!({"y": 5})),
        (format!("weave:///{P}/object/inner:{inner}/key/x"), json!({"y": 5})),
        // Unresolvable → null.
        (r("/key/meta/key/k%2Fey%3A%25/index/5"), Value::Null),
        (r("/key/meta/key/k%2Fey%3A%25/index/-1"), Value::Null),
        (r("/key/nope"), Value::Null),
        (r("/key/name/key/deeper"), Value::Null),
        (r("/key/meta/index/0"), Value::Null),
        (r(&format!("/attr/rows/id/{}", row_digest(&json!({"not": "in table"})))), Value::Null),
        (r("/attr/name/id/whatever"), Value::Null),
        (format!("weave:///{P}/object/my_ds:{}", "A".repeat(43)), Value::Null),
        (format!("weave:///{P}/object/my_ds:v7"), Value::Null),
        (format!("weave:///{P}/object/nobody:latest"), Value::Null),
        (format!("weave:///ent/elsewhere/object/my_ds:{ds}"), Value::Null),
    ];
    let refs: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let got = read_refs(&api, &refs).await;
    for ((uri, want), got) in cases.iter().zip(&got) {
        assert_eq!(got, want, "{uri}");
    }
    // Duplicates in one batch each get their value.
    let twice = [refs[6].clone(), refs[6].clone()];
    assert_eq!(read_refs(&api, &twice).await, [rows[1].clone(), rows[1].clone()]);
    assert!(read_refs(&api, &[]).await.is_empty());
}

#[tokio::test]
async fn refs_reject_bad_batches() {
    let server = Server::start();
    let api = server.admin();
    let digest = create_obj(&api, P, "o", json!({"a": 1})).await;
    let good = format!("weave:///{P}/object/o:{digest}");
    assert_eq!(read_refs(&api, &vec![good.clone(); 1000]).await.len(), 1000);
    let reason =
        api.post("/refs/read_batch", &json!({"refs": vec![good.clone(); 1001]})).await.err(400);
    assert!(reason.contains("1001"), "{reason}");
    for bad in [
        format!("weave:///{P}/table/{EMPTY_TABLE}"),
        format!("weave:///{P}/call/0192aaaa-0000-7000-8000-000000000000"),
        "not a ref".to_owned(),
        format!("weave:///{P}"),
        format!("{good}/key"),
        format!("{good}/bogus/x"),
        format!("{good}/index/one"),
        format!("{good}/key/%zz"),
    ] {
        let body = json!({"refs": [good.clone(), bad.clone()]});
        api.post("/refs/read_batch", &body).await.err(400);
    }
    api.post("/refs/read_batch", &json!({"refs": "x"})).await.err(400);
    api.post("/refs/read_batch", &json!({})).await.err(400);
}

#[tokio::test]
async fn refs_stay_inside_their_project() {
    let server = Server::start();
    let admin = server.admin();
    let alice = server.client(Some(&server.create_entity_key("alice")));
    let bob_secret = create_obj(&admin, "bob/p", "secret", json!({"pin": 1234})).await;
    let (bob_table, bob_rows) = create_table(&admin, "bob/p", &[json!({"pin": 1})]).await;
    let bob_ref = format!("weave:///bob/p/object/secret:{bob_secret}");
    // Alice's object points into Bob's project, and into another project of her own.
    let mine = create_obj(&alice, "alice/q", "mine", json!({"x": 1})).await;
    let lure = create_obj(
        &alice,
        "alice/p",
        "lure",
        json!({"bob": bob_ref, "bob_rows": format!("weave:///bob/p/table/{bob_table}"),
               "mine": format!("weave:///alice/q/object/mine:{mine}")}),
    )
    .await;
    let lure_ref = format!("weave:///alice/p/object/lure:{lure}");
    let refs = [
        bob_ref.clone(),
        format!("{bob_ref}/key/pin"),
        format!("{lure_ref}/key/bob/key/pin"),
        format!("{lure_ref}/key/bob_rows/id/{}", bob_rows[0]),
        format!("{lure_ref}/key/mine/key/x"),
        format!("weave:///alice/q/object/mine:{mine}/key/x"),
        format!("{lure_ref}/key/bob"),
    ];
    let got = read_refs(&alice, &refs).await;
    assert_eq!(
        got,
        [
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            // Embedded refs are followed only inside the project the walk started in.
            Value::Null,
            json!(1),
            json!(bob_ref),
        ]
    );
    // The admin may read Bob's object directly, but a walk still never leaves its project.
    let got = read_refs(&admin, &refs).await;
    assert_eq!(got[..2], [json!({"pin": 1234}), json!(1234)]);
    assert_eq!(got[2], Value::Null);
}
