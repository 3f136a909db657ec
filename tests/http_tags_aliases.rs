//! Tags and aliases of object versions over HTTP (docs/api/objects.md#tags-and-aliases): add,
//! remove, set, move, list, `include_tags_and_aliases` on `/obj/read` and `/objs/query`, the
//! tag and alias filters, aliases resolving in `/obj/read` and in refs, a deleted version
//! losing its labels, the bounds (each a 400 with its reason), and tenancy.

mod common;

use common::{Api, Server};
use serde_json::{Value, json};

const P: &str = "ent/tags";

async fn create(api: &Api, project: &str, name: &str, val: Value) -> String {
    let body = json!({"obj": {"project_id": project, "object_id": name, "val": val}});
    api.post("/obj/create", &body).await.ok()["digest"].as_str().unwrap().to_owned()
}

async fn read(api: &Api, name: &str, digest: &str) -> Value {
    let body = json!({"project_id": P, "object_id": name, "digest": digest,
                      "include_tags_and_aliases": true});
    api.post("/obj/read", &body).await.ok()["obj"].clone()
}

fn tags_path(name: &str, digest: &str) -> String {
    format!("/objs/{name}/versions/{digest}/tags")
}

async fn add_tags(api: &Api, name: &str, digest: &str, tags: Value) -> common::Resp {
    api.put(&tags_path(name, digest), &json!({"project_id": P, "object_id": name, "tags": tags}))
        .await
}

async fn set_aliases(api: &Api, name: &str, digest: &str, aliases: Value) -> common::Resp {
    api.put(
        &format!("/objs/{name}/aliases"),
        &json!({"project_id": P, "digest": digest,
        "aliases": aliases}),
    )
    .await
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn labels_read_back_filter_and_resolve() {
    let server = Server::start();
    let api = server.admin();
    let d0 = create(&api, P, "doc", json!({"n": 0, "inner": {"k": "zero"}})).await;
    let d1 = create(&api, P, "doc", json!({"n": 1, "inner": {"k": "one"}})).await;

    add_tags(&api, "doc", &d0, json!(["b", "a", "b"])).await.ok();
    // A version may be named by index or `latest` as well as by digest.
    add_tags(&api, "doc", "latest", json!(["a"])).await.ok();
    add_tags(&api, "doc", "v0", json!(["c"])).await.ok();
    set_aliases(&api, "doc", &d0, json!(["prod", "stable"])).await.ok();

    let v0 = read(&api, "doc", &d0).await;
    assert_eq!(
        (strings(&v0["tags"]), strings(&v0["aliases"])),
        (vec!["a".into(), "b".into(), "c".into()], vec!["prod".into(), "stable".into()])
    );
    let v1 = read(&api, "doc", &d1).await;
    assert_eq!(
        (strings(&v1["tags"]), strings(&v1["aliases"])),
        (vec!["a".into()], vec!["latest".into()])
    );
    // Without the flag there is nothing to report.
    let plain = api
        .post("/obj/read", &json!({"project_id": P, "object_id": "doc", "digest": d0}))
        .await
        .ok();
    assert!(plain["obj"]["tags"].is_null() && plain["obj"]["aliases"].is_null(), "{plain}");

    // An alias reads its version wherever a version is read: /obj/read and refs (with extras).
    assert_eq!(read(&api, "doc", "prod").await["digest"], json!(d0));
    let refs = json!({"refs": [format!("weave:///{P}/object/doc:stable/key/inner/key/k"),
                               format!("weave:///{P}/object/doc:nope")]});
    assert_eq!(api.post("/refs/read_batch", &refs).await.ok()["vals"], json!(["zero", null]));
    api.post("/obj/read", &json!({"project_id": P, "object_id": "doc", "digest": "nope"}))
        .await
        .err(404);

    // Setting an alias elsewhere moves it; removing ignores names that are not there.
    set_aliases(&api, "doc", &d1, json!(["prod"])).await.ok();
    assert_eq!(read(&api, "doc", "prod").await["digest"], json!(d1));
    let remove = json!({"project_id": P, "aliases": ["stable", "latest", "never"]});
    api.post("/objs/doc/aliases/remove", &remove).await.ok();
    assert_eq!(strings(&read(&api, "doc", &d0).await["aliases"]), Vec::<String>::new());
    let remove = json!({"project_id": P, "object_id": "doc", "tags": ["b", "zzz"]});
    api.post(&format!("{}/remove", tags_path("doc", &d0)), &remove).await.ok();

    let list = |what: &'static str| {
        let api = api.clone();
        async move { strings(&api.get(&format!("/{what}?project_id={P}")).await.ok()[what]) }
    };
    assert_eq!(list("tags").await, ["a", "c"]);
    assert_eq!(list("aliases").await, ["prod"]);

    // /objs/query: tag filter (any of), alias filter (any of, `latest` computed).
    let query = |filter: Value| {
        let api = api.clone();
        async move {
            let body = json!({"project_id": P, "filter": filter, "include_tags_and_aliases": true,
                              "sort_by": [{"field": "created_at", "direction": "asc"}]});
            let objs = api.post("/objs/query", &body).await.ok()["objs"].clone();
            objs.as_array()
                .unwrap()
                .iter()
                .map(|o| o["digest"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let cases: Vec<(Value, Vec<&String>)> = vec![
        (json!({"tags": ["a"]}), vec![&d0, &d1]),
        (json!({"tags": ["c", "x"]}), vec![&d0]),
        (json!({"tags": ["x"]}), vec![]),
        (json!({"aliases": ["prod"]}), vec![&d1]),
        (json!({"aliases": ["latest"]}), vec![&d1]),
        (json!({"aliases": ["stable"]}), vec![]),
        (json!({"tags": ["c"], "aliases": ["latest"]}), vec![]),
        (json!({"tags": [], "aliases": []}), vec![&d0, &d1]),
    ];
    for (filter, want) in cases {
        let want: Vec<String> = want.into_iter().cloned().collect();
        assert_eq!(query(filter.clone()).await, want, "{filter}");
    }
}

#[tokio::test]
async fn deleting_a_version_drops_its_labels() {
    let server = Server::start();
    let api = server.admin();
    let d0 = create(&api, P, "gone", json!({"v": 0})).await;
    let d1 = create(&api, P, "gone", json!({"v": 1})).await;
    add_tags(&api, "gone", &d1, json!(["t"])).await.ok();
    set_aliases(&api, "gone", &d1, json!(["prod"])).await.ok();
    set_aliases(&api, "gone", &d0, json!(["old"])).await.ok();

    let del = json!({"project_id": P, "object_id": "gone", "digests": [d1]});
    api.post("/obj/delete", &del).await.ok();
    assert_eq!(api.get(&format!("/tags?project_id={P}")).await.ok()["tags"], json!([]));
    assert_eq!(api.get(&format!("/aliases?project_id={P}")).await.ok()["aliases"], json!(["old"]));
    api.post("/obj/read", &json!({"project_id": P, "object_id": "gone", "digest": "prod"}))
        .await
        .err(404);
    // Labelling a deleted version is a 404; so is an unknown one.
    add_tags(&api, "gone", &d1, json!(["t"])).await.err(404);
    set_aliases(&api, "gone", "v9", json!(["x"])).await.err(404);
    add_tags(&api, "nothing", "latest", json!(["t"])).await.err(404);

    // A revived version comes back without its old labels.
    create(&api, P, "gone", json!({"v": 1})).await;
    let back = read(&api, "gone", &d1).await;
    assert_eq!((back["tags"].clone(), back["aliases"].clone()), (json!([]), json!(["latest"])));
}

#[tokio::test]
async fn bounds_and_bad_input_are_400s() {
    let server = Server::start();
    let api = server.admin();
    let d = create(&api, P, "b", json!({})).await;
    let long_tag = "t".repeat(257);
    let long_alias = "a".repeat(129);
    let many: Vec<String> = (0..101).map(|i| format!("t{i}")).collect();
    // (what, tags to add or None, aliases to set or None, reason fragment)
    let cases: Vec<(Option<Value>, Option<Value>, &str)> = vec![
        (Some(json!(["two  spaces"])), None, "invalid tag"),
        (Some(json!([" lead"])), None, "invalid tag"),
        (Some(json!(["a/b"])), None, "invalid tag"),
        (Some(json!([""])), None, "invalid tag"),
        (Some(json!([long_tag])), None, "invalid tag"),
        (Some(json!(many)), None, "at most 100 tags"),
        (None, Some(json!(["latest"])), "reserved"),
        (None, Some(json!(["v3"])), "reserved"),
        (None, Some(json!(["a/b"])), "must not contain"),
        (None, Some(json!(["a:b"])), "must not contain"),
        (None, Some(json!(["   "])), "whitespace"),
        (None, Some(json!([long_alias])), "at most 128 characters"),
        (None, Some(json!(many)), "at most 100 aliases"),
    ];
    for (tags, aliases, reason) in cases {
        let r = match (&tags, &aliases) {
            (Some(t), _) => add_tags(&api, "b", &d, t.clone()).await,
            (_, Some(a)) => set_aliases(&api, "b", &d, a.clone()).await,
            _ => unreachable!(),
        };
        let msg = r.err(400);
        assert!(msg.contains(reason), "{tags:?} {aliases:?}: {msg}");
    }
    // Nothing of it was stored.
    let v = read(&api, "b", &d).await;
    assert_eq!((v["tags"].clone(), v["aliases"].clone()), (json!([]), json!(["latest"])));

    // Malformed requests: an object id refs cannot hold, a missing project, a body of the
    // wrong shape.
    add_tags(&api, "a%3Ab", &d, json!(["t"])).await.err(400);
    api.get("/tags").await.err(400);
    api.get("/aliases?project_id=no-slash").await.err(400);
    api.put(&tags_path("b", &d), &json!({"project_id": P, "tags": "t"})).await.err(400);
    api.post("/objs/query", &json!({"project_id": P, "filter": {"tags": vec!["t"; 10_001]}}))
        .await
        .err(400);
}

#[tokio::test]
async fn keys_see_only_their_entity() {
    let server = Server::start();
    let admin = server.admin();
    let d = create(&admin, P, "secret", json!({"s": 1})).await;
    set_aliases(&admin, "secret", &d, json!(["prod"])).await.ok();
    add_tags(&admin, "secret", &d, json!(["t"])).await.ok();

    let alice = server.client(Some(&server.create_entity_key("alice")));
    let body = json!({"project_id": P, "tags": ["x"]});
    alice.put(&tags_path("secret", &d), &body).await.err(403);
    alice.post(&format!("{}/remove", tags_path("secret", &d)), &body).await.err(403);
    let body = json!({"project_id": P, "digest": d, "aliases": ["mine"]});
    alice.put("/objs/secret/aliases", &body).await.err(403);
    alice
        .post("/objs/secret/aliases/remove", &json!({"project_id": P, "aliases": ["prod"]}))
        .await
        .err(403);
    alice.get(&format!("/tags?project_id={P}")).await.err(403);
    alice.get(&format!("/aliases?project_id={P}")).await.err(403);
    // A ref through another entity's alias reads nothing, like a missing object.
    let refs = json!({"refs": [format!("weave:///{P}/object/secret:prod")]});
    assert_eq!(alice.post("/refs/read_batch", &refs).await.ok()["vals"], json!([null]));

    // Alice's own project has labels of its own; the admin's are untouched.
    let mine = "alice/p";
    let dm = create(&alice, mine, "secret", json!({"s": 2})).await;
    alice.put(&tags_path("secret", &dm), &json!({"project_id": mine, "tags": ["own"]})).await.ok();
    assert_eq!(alice.get(&format!("/tags?project_id={mine}")).await.ok()["tags"], json!(["own"]));
    assert_eq!(admin.get(&format!("/tags?project_id={P}")).await.ok()["tags"], json!(["t"]));
    assert_eq!(
        admin.get(&format!("/aliases?project_id={P}")).await.ok()["aliases"],
        json!(["prod"])
    );
}
