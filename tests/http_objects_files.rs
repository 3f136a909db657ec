//! Objects and files over HTTP (docs/api/digests.md, docs/api/files.md, docs/api/objects.md):
//! digests, versions, reads, kinds and classes, and byte-exact file round trips.

mod common;

use common::{Api, Server};
use heddle_proto::digest::bytes_digest;
use serde_json::{Value, json};

const P: &str = "ent/o";

/// Parses JSON text keeping numbers exactly as written (the test crate has arbitrary precision),
/// so values reach the server in the SDK's (Python's) number notation.
fn raw(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("bad test JSON {text}: {e}"))
}

async fn create(api: &Api, object_id: &str, val: Value) -> String {
    let body = json!({"obj": {"project_id": P, "object_id": object_id, "val": val,
                              "builtin_object_class": null, "set_base_object_class": null,
                              "expected_digest": null, "wb_user_id": null}});
    let r = api.post("/obj/create", &body).await.ok();
    assert_eq!(r["object_id"], object_id, "{r}");
    r["digest"].as_str().unwrap_or_else(|| panic!("no digest: {r}")).to_owned()
}

async fn read(api: &Api, object_id: &str, digest: &str) -> Value {
    let body = json!({"project_id": P, "object_id": object_id, "digest": digest});
    let r = api.post("/obj/read", &body).await.ok();
    let obj = r["obj"].clone();
    assert!(obj.is_object(), "no obj: {r}");
    obj
}

const VECTOR_DIGEST: &str = "8cSIeZmxOV9VXxSrqTBKnzAwHg5YwslsznIRY9ik5sM";

#[tokio::test]
async fn object_digests_match_the_sdk() {
    let server = Server::start();
    let api = server.admin();
    // (name, value as JSON text, digest from the SDK's own functions)
    let cases = [
        (
            "contract vector",
            r#"{"b": 1, "a": [1.0, "\u00e9", null, true, 1e-05, 1e+16, 123.456, -0.0, 100000000000000000000]}"#,
            VECTOR_DIGEST,
        ),
        (
            "contract vector, other spelling",
            r#"{"a":[1.0,"é",null,true,0.00001,1E16,123.4560,-0.0,100000000000000000000],"b":1}"#,
            VECTOR_DIGEST,
        ),
        (
            "contract vector, integral float written long",
            r#"{"a":[1.0,"é",null,true,1e-5,10000000000000000.0,123.456,-0.0,100000000000000000000],"b":1}"#,
            VECTOR_DIGEST,
        ),
        ("string", r#""hello""#, "WqdirjgYu3J688ejbUlApbjECpiUUtIwT8lYYz81Tno"),
        ("list", "[1, 2]", "OjFtbTImXEweRuREf6jVYYALY0obxkmBUlI81KYCtps"),
        (
            "non-ascii and astral",
            r#"{"x": {"b": [true], "a": "ü😀"}}"#,
            "xiYxmbsaC2ipyFVqb7s05HLRGtJeIsYjmXgc6xkoxuc",
        ),
        ("float", "1.5", "nymhMEOLgRcLkqQmUPmpQpHsrWC9R68qOIbnX39yhyU"),
        ("null", "null", "dCNOmKYnSYX12vHzasLXiswzlGT5UHA7jAGYkvmCuQs"),
        (
            "escapes and control characters",
            r#"{"ctl": "\u0000\u001f\n\t\"\\/", "k\u00e9": 0}"#,
            "6OxtDlV7a5pkIpIuHi75i5iL06Mo8kmuak3XsChKHmc",
        ),
        (
            "keys sorted by code point",
            r#"{"z": 1, "Z": 2, "a": {"b": -1}}"#,
            "AR913zlcSnlw0l0E5q6AfTnVM25sqokwSjp0C8k6xwc",
        ),
        ("huge int", "12345678901234567890123", "DHHr3Ec2vwmoiEV3UKoi98iVAmr7ZLQPj72UCSxhwZs"),
        ("large float", "123456789012345678.0", "lVXqqVcRiHXYfqTtnw4XvA9YDyZzn5ByLdXXqB6asuk"),
        ("0.1", "0.1", "FL5LRfGODYxntPcZtRRO7ohJfkE3CdEdhbCW2OI0YxA"),
        ("empty dict", "{}", "RBNvo1WzZ4oRRq0W9XhknpT7T8If536DEMBg9hyqY4o"),
        ("empty list", "[]", "T1PNoYwrqgwDVLtfmj7L5e0Sq02OEbqHPC8RFhICuUU"),
    ];
    let mut failures = Vec::new();
    for (i, (name, text, want)) in cases.iter().enumerate() {
        let object_id = format!("vec{i}");
        let got = create(&api, &object_id, raw(text)).await;
        if got != *want {
            failures.push(format!("{name}: digest {got}, want {want}"));
            continue;
        }
        // The stored value reads back equal (as a JSON value) to what was sent.
        let obj = read(&api, &object_id, want).await;
        let sent: Value = serde_json::from_str(text).unwrap();
        let back: Value = serde_json::from_str(&obj["val"].to_string()).unwrap();
        if !json_eq(&sent, &back) {
            failures.push(format!("{name}: read back {back}, sent {sent}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A correct expected_digest is accepted.
    let body = json!({"obj": {"project_id": P, "object_id": "vec-expected",
                              "val": raw(cases[0].1), "expected_digest": VECTOR_DIGEST}});
    assert_eq!(api.post("/obj/create", &body).await.ok()["digest"], VECTOR_DIGEST);
}

/// Equality of JSON values with numbers compared by value (the test crate keeps number text).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.to_string() == y.to_string() || x.as_f64() == y.as_f64() && x.as_f64().is_some()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[tokio::test]
async fn versions_latest_and_reads() {
    let server = Server::start();
    let api = server.admin();
    let v0 = json!({"name": "first", "n": 1});
    let v1 = json!({"name": "second", "n": 2});
    let d0 = create(&api, "thing", v0.clone()).await;
    assert_eq!(create(&api, "thing", v0.clone()).await, d0, "idempotent create");
    let obj = read(&api, "thing", "latest").await;
    assert_eq!(
        (obj["digest"].as_str(), obj["version_index"].as_i64()),
        (Some(d0.as_str()), Some(0))
    );
    assert_eq!(obj["is_latest"], 1);

    let d1 = create(&api, "thing", v1.clone()).await;
    assert_ne!(d0, d1);
    // Re-creating the first version is a no-op: no new version, latest stays v1.
    assert_eq!(create(&api, "thing", v0.clone()).await, d0);
    assert_eq!(create(&api, "thing", v1.clone()).await, d1);

    // (selector, digest, version_index, is_latest, val)
    let cases = [
        ("latest", &d1, 1, 1, &v1),
        ("v0", &d0, 0, 0, &v0),
        ("v1", &d1, 1, 1, &v1),
        (d0.as_str(), &d0, 0, 0, &v0),
        (d1.as_str(), &d1, 1, 1, &v1),
    ];
    for (sel, digest, index, latest, val) in cases {
        let obj = read(&api, "thing", sel).await;
        assert_eq!(obj["digest"], json!(digest), "{sel}: the real content digest");
        assert_eq!(obj["version_index"], index, "{sel}");
        assert_eq!(obj["is_latest"], latest, "{sel}");
        assert_eq!(&obj["val"], val, "{sel}");
        assert_eq!(obj["project_id"], P, "{sel}");
        assert_eq!(obj["object_id"], "thing", "{sel}");
        assert_eq!(obj["kind"], "object", "{sel}");
        assert_eq!(obj["deleted_at"], Value::Null, "{sel}");
        let created = obj["created_at"].as_str().unwrap_or_else(|| panic!("{sel}: {obj}"));
        assert!(created.ends_with('Z') || created.ends_with("+00:00"), "{sel}: {created}");
        for key in ["base_object_class", "leaf_object_class", "wb_user_id"] {
            assert!(obj.as_object().unwrap().contains_key(key), "{sel}: no {key}");
        }
    }

    // metadata_only leaves the value out.
    let body =
        json!({"project_id": P, "object_id": "thing", "digest": "latest", "metadata_only": true});
    let obj = api.post("/obj/read", &body).await.ok()["obj"].clone();
    assert_eq!(obj["digest"], json!(d1));
    assert!(obj["val"].is_null() || obj["val"] == json!({}), "{obj}");

    // Another object's versions are independent.
    let other = create(&api, "other", v1.clone()).await;
    assert_eq!(other, d1, "same value, same digest");
    let obj = read(&api, "other", "latest").await;
    assert_eq!((obj["version_index"].clone(), obj["is_latest"].clone()), (json!(0), json!(1)));
    assert_eq!(read(&api, "thing", "latest").await["version_index"], 1);

    // Unknown versions and objects: 404 with a reason.
    for (object_id, sel) in [
        ("thing", "v2"),
        ("thing", "v99"),
        ("thing", "notadigest"),
        ("thing", "8cSIeZmxOV9VXxSrqTBKnzAwHg5YwslsznIRY9ik5sM"),
        ("missing", "latest"),
        ("missing", "v0"),
    ] {
        let body = json!({"project_id": P, "object_id": object_id, "digest": sel});
        api.post("/obj/read", &body).await.err(404);
    }
    // Another project does not see these objects.
    let body = json!({"project_id": "ent/elsewhere", "object_id": "thing", "digest": "latest"});
    api.post("/obj/read", &body).await.err(404);
}

/// (name, val, kind, base_object_class, leaf_object_class)
type ClassCase = (&'static str, Value, &'static str, Option<&'static str>, Option<&'static str>);

#[tokio::test]
async fn kinds_and_classes() {
    let server = Server::start();
    let api = server.admin();
    let op = json!({"_type": "CustomWeaveType", "weave_type": {"type": "Op"},
                    "files": {"obj.py": "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"}});
    let cases: Vec<ClassCase> = vec![
        ("op", op.clone(), "op", None, None),
        (
            "op with load_op",
            json!({"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {},
                   "load_op": "weave:///ent/o/op/loader:abc"}),
            "op",
            None,
            None,
        ),
        (
            "other custom type",
            json!({"_type": "CustomWeaveType", "weave_type": {"type": "PIL.Image.Image"}, "files": {}}),
            "object",
            None,
            None,
        ),
        (
            "weave_type not a dict",
            json!({"_type": "CustomWeaveType", "weave_type": "Op"}),
            "object",
            None,
            None,
        ),
        ("plain dict", json!({"a": 1}), "object", None, None),
        ("list", json!([1, 2]), "object", None, None),
        ("scalar", json!("Op"), "object", None, None),
        (
            "dataset",
            json!({"_type": "Dataset", "name": "ds", "rows": "weave:///ent/o/table/abc",
                   "_class_name": "Dataset", "_bases": ["Object", "BaseModel"]}),
            "object",
            Some("Dataset"),
            Some("Dataset"),
        ),
        (
            "model subclass",
            json!({"_class_name": "M", "_bases": ["Model", "Object", "BaseModel"]}),
            "object",
            Some("Model"),
            Some("M"),
        ),
        (
            "deeper subclass",
            json!({"_class_name": "Sub", "_bases": ["M", "Model", "Object", "BaseModel"]}),
            "object",
            Some("Model"),
            Some("Sub"),
        ),
        (
            "evaluation",
            json!({"_class_name": "Evaluation", "_bases": ["Object", "BaseModel"]}),
            "object",
            Some("Evaluation"),
            Some("Evaluation"),
        ),
        (
            "base object",
            json!({"_class_name": "Leaderboard", "_bases": ["BaseObject", "BaseModel"]}),
            "object",
            Some("Leaderboard"),
            Some("Leaderboard"),
        ),
        (
            "not pydantic",
            json!({"_class_name": "X", "_bases": ["Foo", "BaseModel"]}),
            "object",
            None,
            None,
        ),
        ("no bases", json!({"_class_name": "X"}), "object", None, None),
        ("bases not a list", json!({"_class_name": "X", "_bases": "Object"}), "object", None, None),
        ("one base", json!({"_class_name": "X", "_bases": ["BaseModel"]}), "object", None, None),
    ];
    let mut failures = Vec::new();
    for (i, (name, val, kind, base, leaf)) in cases.into_iter().enumerate() {
        let object_id = format!("k{i}");
        let digest = create(&api, &object_id, val).await;
        let obj = read(&api, &object_id, &digest).await;
        let got = (
            obj["kind"].as_str(),
            obj["base_object_class"].as_str(),
            obj["leaf_object_class"].as_str(),
        );
        if got != (Some(kind), base, leaf) {
            failures.push(format!("{name}: got {got:?}, want {:?}", (kind, base, leaf)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn obj_create_rejects_bad_input() {
    let server = Server::start();
    let api = server.admin();
    // expected_digest mismatch → 409, nothing stored.
    let body = json!({"obj": {"project_id": P, "object_id": "mm", "val": {"a": 1},
                              "expected_digest": VECTOR_DIGEST}});
    api.post("/obj/create", &body).await.err(409);
    let read_body = json!({"project_id": P, "object_id": "mm", "digest": "latest"});
    api.post("/obj/read", &read_body).await.err(404);

    let long = "x".repeat(129);
    let cases = [
        ("empty object_id", json!({"obj": {"project_id": P, "object_id": "", "val": 1}})),
        ("slash in object_id", json!({"obj": {"project_id": P, "object_id": "a/b", "val": 1}})),
        ("colon in object_id", json!({"obj": {"project_id": P, "object_id": "a:b", "val": 1}})),
        ("object_id too long", json!({"obj": {"project_id": P, "object_id": long, "val": 1}})),
        ("object_id not a string", json!({"obj": {"project_id": P, "object_id": 5, "val": 1}})),
        ("bad project", json!({"obj": {"project_id": "nope", "object_id": "a", "val": 1}})),
        ("missing obj", json!({"project_id": P, "object_id": "a", "val": 1})),
    ];
    for (name, body) in cases {
        let r = api.post("/obj/create", &body).await;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        r.err(400);
    }
    for (name, object_id) in [("slash", "a/b"), ("empty", ""), ("colon", "a:b")] {
        let body = json!({"project_id": P, "object_id": object_id, "digest": "latest"});
        let r = api.post("/obj/read", &body).await;
        assert_eq!(r.status, 400, "read {name}: {}", r.text());
        r.err(400);
    }
    api.post_raw("/obj/create", "{\"obj\": ").await.err(400);
    api.post_raw("/obj/read", "not json").await.err(400);
    // 128 characters is fine.
    create(&api, &"y".repeat(128), json!(1)).await;
}

// ---------------------------------------------------------------------------------------------
// Files

const HELLO: &str = "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ";
const EMPTY: &str = "47DEQpj8HBSaXYTImWX5JCeuQeRkm5NMpJWZG3hSuFU";
const ALL_BYTES: &str = "QKYy6dLYki5Hr9RkjmlnSXFYeFX9Hahw5xECZrXUSIA";
const MIB: &str = "FywV3C4StQ5SPY5lfL5YuxHBBTJSuYHhQxB31X2BKP0";

fn mib_pattern() -> Vec<u8> {
    (0..1usize << 20).map(|i| ((i * 7 + 3) % 256) as u8).collect()
}

async fn content(api: &Api, project: &str, digest: &str) -> common::Resp {
    api.post("/file/content", &json!({"project_id": project, "digest": digest})).await
}

#[tokio::test]
async fn file_create_and_content_round_trip() {
    let server = Server::start();
    let api = server.admin();
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let mib = mib_pattern();
    // (name, file name, bytes, expected_digest sent, digest)
    let cases: Vec<(&str, &str, &[u8], bool, &str)> = vec![
        ("hello", "obj.py", b"hello", true, HELLO),
        ("hello without expected_digest", "other.txt", b"hello", false, HELLO),
        ("empty", "empty.bin", b"", true, EMPTY),
        ("every byte value", "bytes.bin", &all_bytes, true, ALL_BYTES),
        ("one MiB", "big.bin", &mib, false, MIB),
    ];
    for (name, file_name, bytes, send_expected, digest) in &cases {
        let expected = send_expected.then_some(*digest);
        let r = api.file_create(P, file_name, bytes, expected).await.ok();
        assert_eq!(r["digest"], *digest, "{name}");
    }
    for (name, _, bytes, _, digest) in &cases {
        let r = content(&api, P, digest).await;
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert!(
            r.content_type.starts_with("application/octet-stream"),
            "{name}: {}",
            r.content_type
        );
        assert_eq!(r.body.len(), bytes.len(), "{name}");
        assert!(r.body == *bytes, "{name}: bytes differ");
    }
    // Idempotent: uploading again gives the same digest and content.
    let r = api.file_create(P, "again.py", b"hello", Some(HELLO)).await.ok();
    assert_eq!(r["digest"], HELLO);
    assert_eq!(content(&api, P, HELLO).await.body, b"hello");

    // Files belong to their project; unknown digests are 404 with a reason.
    content(&api, "ent/elsewhere", HELLO).await.err(404);
    content(&api, P, "nosuchdigest").await.err(404);
    content(&api, P, VECTOR_DIGEST).await.err(404);
}

#[tokio::test]
async fn default_body_limit_takes_the_sdks_largest_request() {
    // The SDK keeps one request at most 31 MiB; the default limit must let that through.
    let server = Server::start();
    let api = server.admin();
    let big: Vec<u8> = (0..31usize << 20).map(|i| (i % 251) as u8).collect();
    let r = api.file_create(P, "big.bin", &big, None).await.ok();
    let digest = r["digest"].as_str().unwrap();
    let back = content(&api, P, digest).await;
    assert_eq!(back.status, 200);
    assert!(back.body == big, "31 MiB round trip");
}

#[tokio::test]
async fn file_create_rejects_bad_input() {
    let server = Server::start();
    let api = server.admin();
    // expected_digest mismatch → 409 and nothing stored.
    api.file_create(P, "obj.py", b"hello!", Some(HELLO)).await.err(409);
    api.file_create(P, "obj.py", b"hello", Some(EMPTY)).await.err(409);
    content(&api, P, HELLO).await.err(404);
    content(&api, P, EMPTY).await.err(404);

    let boundary = "XyZbOuNdArY";
    let ct = format!("multipart/form-data; boundary={boundary}");
    let only_project = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"project_id\"\r\n\r\n{P}\r\n--{boundary}--\r\n"
    );
    let only_file = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nhi\r\n--{boundary}--\r\n"
    );
    let cases: Vec<(&str, String, Vec<u8>)> = vec![
        ("missing file part", ct.clone(), only_project.into_bytes()),
        ("missing project_id", ct.clone(), only_file.into_bytes()),
        ("truncated multipart", ct.clone(), format!("--{boundary}\r\nContent-Disp").into_bytes()),
        ("not multipart", "application/json".into(), br#"{"project_id": "ent/o"}"#.to_vec()),
    ];
    let (bad_ct, bad_body) = common::multipart("nope", "a", b"x", None);
    let mut cases = cases;
    cases.push(("bad project", bad_ct, bad_body));
    for (name, content_type, body) in cases {
        let r = api.post_with("/file/create", &content_type, body).await;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        r.err(400);
    }
    content(&api, P, "").await.err(404);
    api.post("/file/content", &json!({"project_id": P})).await.err(400);
    api.post_raw("/file/content", "{").await.err(400);

    // The server still works.
    assert_eq!(api.file_create(P, "obj.py", b"hello", Some(HELLO)).await.ok()["digest"], HELLO);
}

/// Bytes whose every chunk differs, so a chunk out of place or twice shows.
fn numbered(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i / 7 + i / 1_048_576 * 31) % 256) as u8).collect()
}

#[tokio::test]
async fn files_in_chunks_and_query_stats() {
    let server = Server::start();
    let api = server.admin();
    let stats = |project: &'static str| {
        let api = &api;
        async move {
            let r = api.post("/files/query_stats", &json!({"project_id": project})).await.ok();
            r["total_size_bytes"].as_u64().unwrap_or_else(|| panic!("no total_size_bytes: {r}"))
        }
    };
    assert_eq!(stats(P).await, 0, "no files yet");

    const MIB: usize = 1 << 20;
    // Sizes around the 1 MiB chunk boundaries.
    let sizes = [MIB - 1, MIB + 1, 2 * MIB, 3 * MIB + 5];
    let mut total = 0;
    let mut stored = Vec::new();
    for (i, size) in sizes.into_iter().enumerate() {
        let bytes = numbered(size);
        let digest = bytes_digest(&bytes);
        let name = format!("f{i}.bin");
        let r = api.file_create(P, &name, &bytes, Some(&digest)).await.ok();
        assert_eq!(r["digest"], digest.as_str(), "{size}");
        total += size as u64;
        stored.push((digest, bytes));
    }
    api.file_create(P, "hello.txt", b"hello", Some(HELLO)).await.ok();
    api.file_create(P, "empty", b"", Some(EMPTY)).await.ok();
    total += 5;
    // Uploading the same content again (under any name) stores nothing new.
    api.file_create(P, "again.bin", &stored[1].1, None).await.ok();
    api.file_create(P, "hello-again.txt", b"hello", None).await.ok();
    assert_eq!(stats(P).await, total);
    for (digest, bytes) in &stored {
        let r = content(&api, P, digest).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.body.len(), bytes.len());
        assert!(r.body == *bytes, "{} bytes: content differs", bytes.len());
    }
    assert_eq!(content(&api, P, EMPTY).await.body, b"");

    // Stats are per project; other projects' files are not counted or served.
    assert_eq!(stats("ent/elsewhere").await, 0);
    api.file_create("ent/elsewhere", "x", b"hello", None).await.ok();
    assert_eq!(stats("ent/elsewhere").await, 5);
    assert_eq!(stats(P).await, total);
    content(&api, "ent/elsewhere", &stored[0].0).await.err(404);

    for (name, body) in [
        ("no project", json!({})),
        ("bad project", json!({"project_id": "nope"})),
        ("project not a string", json!({"project_id": 3})),
    ] {
        let r = api.post("/files/query_stats", &body).await;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        r.err(400);
    }
}
