//! Object listing, deletion and classes over HTTP (docs/api/objects.md#create-an-object,
//! docs/api/objects.md#query-objects, docs/api/objects.md#delete-an-object): `/objs/query` with
//! every filter, sort and paging; `/obj/delete` of some or all versions and what reads see
//! afterwards; built-in classes and name/class collisions on `/obj/create`.

mod common;

use common::{Api, Server};
use heddle_proto::digest::object_digest;
use serde_json::{Value, json};

const P: &str = "ent/q";

fn obj_body(object_id: &str, val: &Value) -> Value {
    json!({"obj": {"project_id": P, "object_id": object_id, "val": val,
                   "builtin_object_class": null, "set_base_object_class": null,
                   "expected_digest": null, "wb_user_id": null}})
}

async fn create(api: &Api, object_id: &str, val: &Value) -> String {
    let r = api.post("/obj/create", &obj_body(object_id, val)).await.ok();
    assert_eq!(r["object_id"], object_id, "{r}");
    r["digest"].as_str().unwrap_or_else(|| panic!("no digest: {r}")).to_owned()
}

async fn read(api: &Api, object_id: &str, digest: &str) -> common::Resp {
    api.post("/obj/read", &json!({"project_id": P, "object_id": object_id, "digest": digest})).await
}

async fn query(api: &Api, body: Value) -> Vec<Value> {
    let mut body = body;
    body["project_id"] = json!(P);
    let r = api.post("/objs/query", &body).await.ok();
    r["objs"].as_array().unwrap_or_else(|| panic!("no objs: {r}")).clone()
}

/// `object_id:vN` of each row, in order.
fn versions(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| format!("{}:v{}", r["object_id"].as_str().unwrap(), r["version_index"]))
        .collect()
}

fn model(x: i64) -> Value {
    json!({"_type": "MyModel", "name": "m", "x": x, "_class_name": "MyModel",
           "_bases": ["Model", "Object", "BaseModel"]})
}

fn op(n: i64) -> Value {
    json!({"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {"obj.py": format!("d{n}")}})
}

/// (name, request, expected `object_id:vN` in order)
type QueryCase = (&'static str, Value, Vec<&'static str>);

#[tokio::test]
async fn objs_query_filters_sorting_and_paging() {
    let server = Server::start();
    let api = server.admin();
    // Created in this order (created_at increases): (object_id, value)
    let dataset = json!({"_type": "Dataset", "name": "ds", "rows": "weave:///ent/q/table/abc",
                         "_class_name": "Dataset", "_bases": ["Object", "BaseModel"]});
    let evaluation = json!({"_type": "Evaluation", "name": "ev", "_class_name": "Evaluation",
                            "_bases": ["Object", "BaseModel"]});
    let plain = json!({"a": 1, "s": "text"});
    let writes = [
        ("model_a", model(1)),
        ("op_f", op(0)),
        ("ds", dataset),
        ("model_a", model(2)),
        ("eval", evaluation),
        ("plain", plain),
        ("op_f", op(1)),
    ];
    let mut digests = std::collections::HashMap::new();
    for (id, val) in &writes {
        let d = create(&api, id, val).await;
        digests.insert(d.clone(), val.clone());
    }
    // A built-in class, stamped by the server.
    let r = api
        .post(
            "/obj/create",
            &json!({"obj": {"project_id": P, "object_id": "lb", "val": {"name": "board"},
                            "builtin_object_class": "Leaderboard"}}),
        )
        .await
        .ok();
    assert_eq!(r["object_id"], "lb");

    let all = vec![
        "ds:v0",
        "eval:v0",
        "lb:v0",
        "model_a:v0",
        "model_a:v1",
        "op_f:v0",
        "op_f:v1",
        "plain:v0",
    ];
    let evaluations_request = json!({
        "filter": {"base_object_classes": ["Evaluation"], "exclude_base_object_classes": null,
                   "leaf_object_classes": null, "object_ids": null, "is_op": false,
                   "latest_only": null, "tags": null, "aliases": null},
        "limit": null, "offset": null, "sort_by": null, "metadata_only": false,
        "include_storage_size": false, "include_tags_and_aliases": false});
    let cases: Vec<QueryCase> = vec![
        ("everything, by object_id then version", json!({}), all.clone()),
        (
            "null filter and paging",
            json!({"filter": null, "limit": null, "offset": null}),
            all.clone(),
        ),
        ("ops", json!({"filter": {"is_op": true}}), vec!["op_f:v0", "op_f:v1"]),
        (
            "non-ops",
            json!({"filter": {"is_op": false}}),
            vec!["ds:v0", "eval:v0", "lb:v0", "model_a:v0", "model_a:v1", "plain:v0"],
        ),
        (
            "latest only",
            json!({"filter": {"latest_only": true}}),
            vec!["ds:v0", "eval:v0", "lb:v0", "model_a:v1", "op_f:v1", "plain:v0"],
        ),
        (
            "base class",
            json!({"filter": {"base_object_classes": ["Model"]}}),
            vec!["model_a:v0", "model_a:v1"],
        ),
        (
            "base classes, any of",
            json!({"filter": {"base_object_classes": ["Dataset", "Leaderboard", "Nope"]}}),
            vec!["ds:v0", "lb:v0"],
        ),
        (
            "excluded base classes keep values without a class",
            json!({"filter": {"exclude_base_object_classes": ["Model", "Dataset"]}}),
            vec!["eval:v0", "lb:v0", "op_f:v0", "op_f:v1", "plain:v0"],
        ),
        (
            "leaf class",
            json!({"filter": {"leaf_object_classes": ["MyModel"]}}),
            vec!["model_a:v0", "model_a:v1"],
        ),
        (
            "a base class is not a leaf class",
            json!({"filter": {"leaf_object_classes": ["Model"]}}),
            vec![],
        ),
        (
            "object ids",
            json!({"filter": {"object_ids": ["plain", "ds", "missing"]}}),
            vec!["ds:v0", "plain:v0"],
        ),
        (
            "empty lists do not filter",
            json!({"filter": {"object_ids": [], "base_object_classes": []}}),
            all.clone(),
        ),
        (
            "filters combine",
            json!({"filter": {"object_ids": ["model_a", "op_f"], "latest_only": true, "is_op": false}}),
            vec!["model_a:v1"],
        ),
        ("get_evaluations' request", evaluations_request, vec!["eval:v0"]),
        (
            "created_at descending",
            json!({"sort_by": [{"field": "created_at", "direction": "desc"}]}),
            vec![
                "lb:v0",
                "op_f:v1",
                "plain:v0",
                "eval:v0",
                "model_a:v1",
                "ds:v0",
                "op_f:v0",
                "model_a:v0",
            ],
        ),
        (
            "created_at ascending",
            json!({"sort_by": [{"field": "created_at", "direction": "asc"}]}),
            vec![
                "model_a:v0",
                "op_f:v0",
                "ds:v0",
                "model_a:v1",
                "eval:v0",
                "plain:v0",
                "op_f:v1",
                "lb:v0",
            ],
        ),
        (
            "object_id descending, versions ascending",
            json!({"sort_by": [{"field": "object_id", "direction": "desc"}]}),
            vec![
                "plain:v0",
                "op_f:v0",
                "op_f:v1",
                "model_a:v0",
                "model_a:v1",
                "lb:v0",
                "eval:v0",
                "ds:v0",
            ],
        ),
        (
            "limit and offset",
            json!({"limit": 3, "offset": 2}),
            vec!["lb:v0", "model_a:v0", "model_a:v1"],
        ),
        ("offset without limit", json!({"offset": 6}), vec!["op_f:v1", "plain:v0"]),
        ("offset past the end", json!({"offset": 100, "limit": 5}), vec![]),
        ("limit 0", json!({"limit": 0}), vec![]),
        (
            "latest alias",
            json!({"filter": {"aliases": ["latest"], "object_ids": ["op_f"]}}),
            vec!["op_f:v1"],
        ),
        ("unknown alias", json!({"filter": {"aliases": ["production"]}}), vec![]),
        ("tags (none exist)", json!({"filter": {"tags": ["t"]}}), vec![]),
    ];
    let mut failures = Vec::new();
    for (name, body, want) in cases {
        let got = versions(&query(&api, body).await);
        if got != want {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Every row is a full ObjSchema, its value the one stored under its digest.
    let rows = query(&api, json!({})).await;
    for row in &rows {
        let id = row["object_id"].as_str().unwrap();
        assert_eq!(row["project_id"], P, "{row}");
        let digest = row["digest"].as_str().unwrap();
        if id != "lb" {
            assert_eq!(&row["val"], &digests[digest], "{id}");
        }
        assert_eq!(object_digest(&row["val"]), digest, "{id}: digest of the value");
        let latest = (id != "model_a" && id != "op_f") || row["version_index"] == 1;
        assert_eq!(row["is_latest"], latest as i64, "{id}");
        assert_eq!(row["kind"], if id == "op_f" { "op" } else { "object" }, "{id}");
        assert_eq!(row["deleted_at"], Value::Null, "{id}");
        assert!(row["created_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{row}");
        assert_eq!(row["size_bytes"], Value::Null, "{id}: not asked for");
        // The same version reads back the same through /obj/read.
        let one = read(&api, id, digest).await.ok()["obj"].clone();
        for key in
            ["version_index", "is_latest", "kind", "base_object_class", "leaf_object_class", "val"]
        {
            assert_eq!(one[key], row[key], "{id}: {key}");
        }
    }
    let classes: Vec<(String, Value, Value)> = rows
        .iter()
        .map(|r| {
            (
                r["object_id"].as_str().unwrap().to_owned(),
                r["base_object_class"].clone(),
                r["leaf_object_class"].clone(),
            )
        })
        .collect();
    assert!(classes.contains(&("model_a".into(), json!("Model"), json!("MyModel"))), "{classes:?}");
    assert!(
        classes.contains(&("lb".into(), json!("Leaderboard"), json!("Leaderboard"))),
        "{classes:?}"
    );
    assert!(classes.contains(&("plain".into(), Value::Null, Value::Null)), "{classes:?}");

    // metadata_only leaves the values out; include_storage_size measures the stored value.
    let rows = query(&api, json!({"metadata_only": true, "include_storage_size": true})).await;
    assert_eq!(versions(&rows), all);
    for row in &rows {
        assert_eq!(row["val"], Value::Null, "{row}");
        let full = read(&api, row["object_id"].as_str().unwrap(), row["digest"].as_str().unwrap())
            .await
            .ok();
        let size = serde_json::to_string(&full["obj"]["val"]).unwrap().len();
        assert_eq!(row["size_bytes"], size, "{row}");
    }
    // Tags and aliases: no tags; `latest` on the latest versions.
    let rows =
        query(&api, json!({"include_tags_and_aliases": true, "filter": {"object_ids": ["op_f"]}}))
            .await;
    let got: Vec<(Value, Value)> =
        rows.iter().map(|r| (r["tags"].clone(), r["aliases"].clone())).collect();
    assert_eq!(got, [(json!([]), json!([])), (json!([]), json!(["latest"]))]);

    // Other projects see nothing; bad requests are 400.
    let other = api.post("/objs/query", &json!({"project_id": "ent/other"})).await.ok();
    assert_eq!(other["objs"], json!([]));
    for (name, body) in [
        (
            "sort by another field",
            json!({"project_id": P, "sort_by": [{"field": "digest", "direction": "asc"}]}),
        ),
        (
            "bad direction",
            json!({"project_id": P, "sort_by": [{"field": "object_id", "direction": "up"}]}),
        ),
        ("negative limit", json!({"project_id": P, "limit": -1})),
        ("negative offset", json!({"project_id": P, "offset": -1})),
        ("bad project", json!({"project_id": "noslash"})),
        ("no project", json!({})),
        ("filter not an object", json!({"project_id": P, "filter": "x"})),
    ] {
        let r = api.post("/objs/query", &body).await;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        r.err(400);
    }
}

#[tokio::test]
async fn obj_delete_some_then_all_versions() {
    let server = Server::start();
    let api = server.admin();
    let vals: Vec<Value> = (0..3).map(model).collect();
    let mut d = Vec::new();
    for v in &vals {
        d.push(create(&api, "thing", v).await);
    }
    let delete = |digests: Value| {
        let api = &api;
        async move {
            api.post(
                "/obj/delete",
                &json!({"project_id": P, "object_id": "thing", "digests": digests}),
            )
            .await
        }
    };

    // Deleting the latest makes the newest remaining version latest; indexes stay.
    let r = delete(json!([d[2]])).await.ok();
    assert_eq!(r["num_deleted"], 1, "{r}");
    assert_eq!(
        r["deleted_versions"],
        json!([{"digest": d[2], "base_object_class": "Model", "leaf_object_class": "MyModel"}])
    );
    let latest = read(&api, "thing", "latest").await.ok()["obj"].clone();
    assert_eq!(
        (&latest["digest"], &latest["version_index"], &latest["is_latest"]),
        (&json!(d[1]), &json!(1), &json!(1))
    );
    assert_eq!(read(&api, "thing", &d[0]).await.ok()["obj"]["is_latest"], 0);
    for sel in [d[2].as_str(), "v2"] {
        let r = read(&api, "thing", sel).await;
        r.err(404);
        let at = r.json()["deleted_at"].clone();
        assert!(at.as_str().is_some_and(|t| t.ends_with('Z')), "{sel}: deleted_at {at}");
    }
    let rows = query(&api, json!({"filter": {"object_ids": ["thing"]}})).await;
    assert_eq!(versions(&rows), ["thing:v0", "thing:v1"]);
    assert_eq!(rows[1]["is_latest"], 1);

    // A deleted or unknown version is not there to delete: 404, and nothing changes (all or
    // nothing, even when another listed version exists).
    let unknown = object_digest(&json!("never stored"));
    for digests in
        [json!([d[2]]), json!([unknown]), json!([d[0], unknown]), json!(["v2"]), json!(["v7"])]
    {
        delete(digests.clone()).await.err(404);
    }
    assert_eq!(versions(&query(&api, json!({})).await), ["thing:v0", "thing:v1"]);

    // Aliases resolve to content digests.
    let r = delete(json!(["v0", d[0]])).await.ok();
    assert_eq!(
        (r["num_deleted"].clone(), r["deleted_versions"][0]["digest"].clone()),
        (json!(1), json!(d[0]))
    );

    // Creating a deleted version's value again revives it with its index, and it is latest.
    assert_eq!(create(&api, "thing", &vals[2]).await, d[2]);
    let latest = read(&api, "thing", "latest").await.ok()["obj"].clone();
    assert_eq!((&latest["digest"], &latest["version_index"]), (&json!(d[2]), &json!(2)));
    assert_eq!(versions(&query(&api, json!({})).await), ["thing:v1", "thing:v2"]);

    // digests null deletes every live version; then the object is gone.
    let r = delete(Value::Null).await.ok();
    assert_eq!(r["num_deleted"], 2, "{r}");
    let gone: Vec<&str> = r["deleted_versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["digest"].as_str().unwrap())
        .collect();
    assert_eq!(gone, [d[1].as_str(), d[2].as_str()]);
    read(&api, "thing", "latest").await.err(404);
    assert_eq!(query(&api, json!({})).await, Vec::<Value>::new());
    delete(Value::Null).await.err(404);
    delete(json!(["latest"])).await.err(404);

    // A new value after that continues the version numbering.
    let d3 = create(&api, "thing", &model(3)).await;
    let latest = read(&api, "thing", "latest").await.ok()["obj"].clone();
    assert_eq!(
        (&latest["digest"], &latest["version_index"], &latest["is_latest"]),
        (&json!(d3), &json!(3), &json!(1))
    );

    // Bad requests.
    let many: Vec<String> = (0..101).map(|i| format!("v{i}")).collect();
    for (name, body, status) in [
        ("101 digests", json!({"project_id": P, "object_id": "thing", "digests": many}), 400),
        ("empty digest list", json!({"project_id": P, "object_id": "thing", "digests": []}), 400),
        ("not a digest", json!({"project_id": P, "object_id": "thing", "digests": ["nope"]}), 400),
        ("empty digest", json!({"project_id": P, "object_id": "thing", "digests": [""]}), 400),
        ("bad object id", json!({"project_id": P, "object_id": "a/b", "digests": null}), 400),
        ("bad project", json!({"project_id": "x", "object_id": "thing", "digests": null}), 400),
        ("no object id", json!({"project_id": P, "digests": null}), 400),
        ("unknown object", json!({"project_id": P, "object_id": "missing", "digests": null}), 404),
        (
            "unknown object, by digest",
            json!({"project_id": P, "object_id": "missing", "digests": [d3]}),
            404,
        ),
        (
            "another project",
            json!({"project_id": "ent/other", "object_id": "thing", "digests": null}),
            404,
        ),
    ] {
        let r = api.post("/obj/delete", &body).await;
        assert_eq!(r.status, status, "{name}: {}", r.text());
        r.err(status);
    }
    // None of them deleted anything.
    assert_eq!(read(&api, "thing", "latest").await.ok()["obj"]["digest"], json!(d3));
}

#[tokio::test]
async fn obj_create_builtin_classes_and_collisions() {
    let server = Server::start();
    let api = server.admin();
    let stamped = json!({"_type": "Leaderboard", "name": "board", "description": null,
                         "columns": [], "_class_name": "Leaderboard",
                         "_bases": ["BaseObject", "BaseModel"]});
    let want = object_digest(&stamped);
    for field in ["builtin_object_class", "set_base_object_class"] {
        let mut body = obj_body("lb", &json!({"name": "board", "columns": []}));
        body["obj"][field] = json!("Leaderboard");
        let r = api.post("/obj/create", &body).await.ok();
        assert_eq!(r["digest"], want, "{field}: digest of the stamped value");
    }
    let obj = read(&api, "lb", "latest").await.ok()["obj"].clone();
    assert_eq!(obj["val"], stamped);
    assert_eq!(
        (&obj["base_object_class"], &obj["leaf_object_class"]),
        (&json!("Leaderboard"), &json!("Leaderboard"))
    );
    assert_eq!(obj["version_index"], 0, "both spellings stored one version");
    // A value that already carries the class markers is kept as it is.
    let mut body = obj_body("lb", &stamped);
    body["obj"]["builtin_object_class"] = json!("Leaderboard");
    assert_eq!(api.post("/obj/create", &body).await.ok()["digest"], want);
    // expected_digest is of the stored (stamped) value.
    let mut body = obj_body("lb2", &json!({"name": "b2"}));
    body["obj"]["builtin_object_class"] = json!("Leaderboard");
    body["obj"]["expected_digest"] = json!(object_digest(&json!({"name": "b2"})));
    api.post("/obj/create", &body).await.err(409);

    let mut bad = Vec::new();
    for (name, class, other, val) in [
        ("unknown class", json!("NoSuchClass"), Value::Null, json!({"a": 1})),
        ("empty class", json!(""), Value::Null, json!({"a": 1})),
        ("not a dict", json!("Leaderboard"), Value::Null, json!([1, 2])),
        ("a scalar", json!("Leaderboard"), Value::Null, json!("x")),
        (
            "markers of another class",
            json!("AlertSpec"),
            Value::Null,
            json!({"_class_name": "Leaderboard", "_bases": ["BaseObject", "BaseModel"]}),
        ),
        ("the two fields disagree", json!("Leaderboard"), json!("SavedView"), json!({})),
    ] {
        let mut body = obj_body("bad_builtin", &val);
        body["obj"]["builtin_object_class"] = class;
        body["obj"]["set_base_object_class"] = other;
        let r = api.post("/obj/create", &body).await;
        if r.status != 400 {
            bad.push(format!("{name}: {} {}", r.status, r.text()));
        } else {
            r.err(400);
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    read(&api, "bad_builtin", "latest").await.err(404);

    // Name/class collisions: an object keeps its base class while it has live versions.
    let d0 = create(&api, "coll", &model(1)).await;
    create(&api, "coll", &model(2)).await; // same class: fine
    let dataset = json!({"_class_name": "Dataset", "_bases": ["Object", "BaseModel"], "rows": "x"});
    for (name, val) in [
        ("another class", dataset.clone()),
        ("no class", json!({"x": 1})),
        ("an op", op(1)),
        (
            "a built-in class",
            json!({"_class_name": "Leaderboard", "_bases": ["BaseObject", "BaseModel"]}),
        ),
    ] {
        let r = api.post("/obj/create", &obj_body("coll", &val)).await;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        r.err(400);
    }
    let r = api.post("/obj/create", &obj_body("lb", &json!({"plain": true}))).await;
    r.err(400);
    let latest = read(&api, "coll", "latest").await.ok()["obj"].clone();
    assert_eq!(
        (&latest["version_index"], &latest["leaf_object_class"]),
        (&json!(1), &json!("MyModel"))
    );
    // A plain object cannot become a Model either.
    create(&api, "plain", &json!({"x": 1})).await;
    api.post("/obj/create", &obj_body("plain", &model(1))).await.err(400);
    // Reviving an existing version of the same class still works; once every version is
    // deleted, the name is free for another class.
    assert_eq!(create(&api, "coll", &model(1)).await, d0);
    api.post("/obj/delete", &json!({"project_id": P, "object_id": "coll"})).await.ok();
    let d = create(&api, "coll", &dataset).await;
    let obj = read(&api, "coll", "latest").await.ok()["obj"].clone();
    assert_eq!(
        (&obj["digest"], &obj["base_object_class"], &obj["version_index"]),
        (&json!(d), &json!("Dataset"), &json!(2))
    );
    // ...and a deleted Model version of it cannot come back while the Dataset is live.
    api.post("/obj/create", &obj_body("coll", &model(1))).await.err(400);
}
