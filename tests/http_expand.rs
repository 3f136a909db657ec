//! `expand_columns` of `/calls/stream_query` and `/calls/query_stats`
//! (docs/api/calls.md#count-calls, docs/api/calls.md#stream-calls): calls whose inputs and outputs
//! hold object refs and dataset row refs are read back with the refs resolved (dicts gain `_ref`),
//! nested columns resolve inside their parents, refs that do not resolve or point into another
//! project stay strings, and filters and orders through an expanded column compare the resolved
//! values, with counts that agree with the rows.

mod common;

use common::{Api, Server, complete, ids, t};
use serde_json::{Value, json};

const P: &str = "ent/expand";
const OTHER: &str = "ent/other";

async fn create_obj(api: &Api, project: &str, object_id: &str, val: Value) -> String {
    let body = json!({"obj": {"project_id": project, "object_id": object_id, "val": val}});
    let digest = api.post("/obj/create", &body).await.ok()["digest"].as_str().unwrap().to_owned();
    format!("weave:///{project}/object/{object_id}:{digest}")
}

struct Fixture {
    rows: Vec<Value>,
    row_refs: Vec<String>,
    model_ref: String,
    model_val: Value,
    prompt_ref: String,
    missing_ref: String,
    foreign_ref: String,
}

/// A dataset of three rows, a model holding a prompt ref, and six calls (`c0`..`c5`, started in
/// that order): `c0`..`c2` take dataset row `i` and the model, `c3` a ref to nothing, `c4` a ref
/// into another project, `c5` a plain dict; `c0`'s output is the model ref.
async fn fixture(api: &Api) -> Fixture {
    let rows = vec![
        json!({"q": "q0", "label": "b", "score": 2, "meta": {"tag": "x"}}),
        json!({"q": "q1", "label": "a", "score": 10, "meta": {"tag": "y"}}),
        json!({"q": "q2", "label": "c", "score": 1.5, "meta": {"tag": "x"}}),
    ];
    let body = json!({"table": {"project_id": P, "rows": rows}});
    let r = api.post("/table/create", &body).await.ok();
    let table = r["digest"].as_str().unwrap().to_owned();
    let row_digests: Vec<String> = serde_json::from_value(r["row_digests"].clone()).unwrap();
    let ds_ref = create_obj(
        api,
        P,
        "ds",
        json!({"_type": "Dataset", "_class_name": "Dataset", "_bases": ["Object", "BaseModel"],
               "name": "ds", "rows": format!("weave:///{P}/table/{table}")}),
    )
    .await;
    let row_refs: Vec<String> =
        row_digests.iter().map(|d| format!("{ds_ref}/attr/rows/id/{d}")).collect();
    let prompt_ref = create_obj(api, P, "prompt", json!({"text": "hello"})).await;
    let model_val = json!({"_type": "Model", "name": "m1", "prompt": prompt_ref});
    let model_ref = create_obj(api, P, "model", model_val.clone()).await;
    // The same value in another project of the same entity: never resolved from P's calls.
    let foreign_ref = create_obj(api, OTHER, "ds_row", rows[0].clone()).await;
    let missing_ref = format!("weave:///{P}/object/nothing:{}", "0".repeat(43));

    let examples = [
        json!(row_refs[0]),
        json!(row_refs[1]),
        json!(row_refs[2]),
        json!(missing_ref),
        json!(foreign_ref),
        json!({"label": "z", "score": 0}),
    ];
    let calls = examples
        .iter()
        .enumerate()
        .map(|(i, ex)| {
            let mut inputs = json!({"example": ex, "k": i});
            if i < 3 {
                inputs["model"] = json!(model_ref);
            }
            let output = if i == 0 { json!(model_ref) } else { json!({"n": i}) };
            complete(
                P,
                &format!("c{i}"),
                json!({"started_at": t(i as f64), "ended_at": t(i as f64 + 0.5),
                       "op_name": "weave:///ent/expand/op/predict:abc",
                       "inputs": inputs, "output": output}),
            )
        })
        .collect();
    api.complete_calls(P, calls).await;
    Fixture { rows, row_refs, model_ref, model_val, prompt_ref, missing_ref, foreign_ref }
}

fn with_ref(mut v: Value, r: &str) -> Value {
    v["_ref"] = json!(r);
    v
}

async fn stream(api: &Api, body: Value) -> Vec<Value> {
    let mut body = body;
    body["project_id"] = json!(P);
    api.stream(&body).await
}

async fn count(api: &Api, body: Value) -> u64 {
    let mut body = body;
    body["project_id"] = json!(P);
    api.count(&body).await
}

fn eq(field: &str, lit: &str) -> Value {
    json!({"$eq": [{"$getField": field}, {"$literal": lit}]})
}

#[tokio::test]
async fn expanded_values() {
    let server = Server::start();
    let api = server.admin();
    let f = fixture(&api).await;

    // Without expand_columns the refs come back as stored.
    let plain = stream(&api, json!({})).await;
    assert_eq!(ids(&plain), ["c0", "c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(plain[0]["inputs"]["example"], json!(f.row_refs[0]));
    assert_eq!(plain[0]["output"], json!(f.model_ref));

    let cols = json!(["inputs.example", "inputs.model", "inputs.model.prompt", "output"]);
    let rows = stream(&api, json!({"expand_columns": cols})).await;
    assert_eq!(ids(&rows), ["c0", "c1", "c2", "c3", "c4", "c5"]);
    let prompt = with_ref(json!({"text": "hello"}), &f.prompt_ref);
    let mut model = with_ref(f.model_val.clone(), &f.model_ref);
    model["prompt"] = prompt.clone();
    for (i, row) in rows.iter().take(3).enumerate() {
        assert_eq!(
            row["inputs"],
            json!({"example": with_ref(f.rows[i].clone(), &f.row_refs[i]), "k": i,
                   "model": model}),
            "c{i}"
        );
    }
    // `output` as a whole column; the nested prompt is not listed under output, so it stays.
    assert_eq!(rows[0]["output"], with_ref(f.model_val.clone(), &f.model_ref));
    assert_eq!(rows[1]["output"], json!({"n": 1}));
    // A ref to nothing and a ref into another project stay strings; plain values are untouched.
    assert_eq!(rows[3]["inputs"]["example"], json!(f.missing_ref));
    assert_eq!(rows[4]["inputs"]["example"], json!(f.foreign_ref));
    assert_eq!(rows[5]["inputs"]["example"], json!({"label": "z", "score": 0}));
    // The rest of the call is as without expansion.
    for (a, b) in rows.iter().zip(&plain) {
        for k in ["id", "trace_id", "op_name", "started_at", "ended_at", "summary", "attributes"] {
            assert_eq!(a[k], b[k], "{k} of {}", a["id"]);
        }
    }

    // Only the listed depth: the model's prompt stays a ref when only the model is expanded.
    let rows = stream(&api, json!({"expand_columns": ["inputs.model"], "limit": 1})).await;
    assert_eq!(rows[0]["inputs"]["model"], with_ref(f.model_val.clone(), &f.model_ref));
    assert_eq!(rows[0]["inputs"]["example"], json!(f.row_refs[0]));

    // A ref to a scalar inside a row: replaced, without `_ref`.
    let label_ref = format!("{}/key/label", f.row_refs[1]);
    api.complete_calls(
        P,
        vec![complete(P, "c6", json!({"started_at": t(10.0), "inputs": {"example": label_ref}}))],
    )
    .await;
    let rows =
        stream(&api, json!({"expand_columns": ["inputs.example"], "filter": {"call_ids": ["c6"]}}))
            .await;
    assert_eq!(rows[0]["inputs"]["example"], json!("a"));

    // return_expanded_column_values=false: refs come back as stored.
    let rows = stream(
        &api,
        json!({"expand_columns": cols, "return_expanded_column_values": false,
               "filter": {"call_ids": ["c0"]}}),
    )
    .await;
    assert_eq!(rows[0]["inputs"], plain[0]["inputs"]);
    assert_eq!(rows[0]["output"], plain[0]["output"]);

    // Projection and paging still apply.
    let rows = stream(
        &api,
        json!({"expand_columns": ["inputs.example"], "columns": ["inputs"], "offset": 1,
               "limit": 2}),
    )
    .await;
    assert_eq!(ids(&rows), ["c1", "c2"]);
    assert_eq!(rows[0]["inputs"]["example"], with_ref(f.rows[1].clone(), &f.row_refs[1]));

    // Another entity's key cannot reach P at all, expand or not.
    let bob = server.client(Some(&server.create_entity_key("bob")));
    let body = json!({"project_id": P, "expand_columns": ["inputs.example"]});
    bob.post("/calls/stream_query", &body).await.err(403);
}

#[tokio::test]
async fn filters_and_orders_through_expanded_columns() {
    let server = Server::start();
    let api = server.admin();
    let f = fixture(&api).await;
    let ex = json!(["inputs.example"]);

    // Equality through the expanded row; the unexpanded path reads "" (a ref is a string).
    let q = json!({"$expr": eq("inputs.example.label", "a")});
    let rows = stream(&api, json!({"expand_columns": ex, "query": q})).await;
    assert_eq!(ids(&rows), ["c1"]);
    assert_eq!(rows[0]["inputs"]["example"]["label"], "a");
    assert_eq!(count(&api, json!({"expand_columns": ex, "query": q})).await, 1);
    assert!(stream(&api, json!({"query": q})).await.is_empty());
    assert_eq!(count(&api, json!({"query": q})).await, 0);

    // Filtering through refs without returning them expanded.
    let rows = stream(
        &api,
        json!({"expand_columns": ex, "query": q, "return_expanded_column_values": false}),
    )
    .await;
    assert_eq!(ids(&rows), ["c1"]);
    assert_eq!(rows[0]["inputs"]["example"], json!(f.row_refs[1]));

    // Mixed with plain conditions, numeric $convert, $not, $in, $contains and a plain dict.
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"$and": [eq("inputs.example.meta.tag", "x"), eq("op_name", "weave:///ent/expand/op/predict:abc")]}),
            vec!["c0", "c2"],
        ),
        (
            json!({"$gt": [{"$convert": {"input": {"$getField": "inputs.example.score"}, "to": "double"}}, {"$literal": 1.7}]}),
            vec!["c0", "c1"],
        ),
        (
            json!({"$not": [{"$eq": [{"$getField": "inputs.example.label"}, {"$literal": "a"}]}]}),
            vec!["c0", "c2", "c3", "c4", "c5"],
        ),
        (
            json!({"$in": [{"$getField": "inputs.example.label"}, [{"$literal": "c"}, {"$literal": "z"}]]}),
            vec!["c2", "c5"],
        ),
        (
            json!({"$contains": {"input": {"$getField": "inputs.example.q"}, "substr": {"$literal": "Q"}, "case_insensitive": true}}),
            vec!["c0", "c1", "c2"],
        ),
        (json!({"$or": [eq("inputs.example.label", "b"), eq("id", "c4")]}), vec!["c0", "c4"]),
        // The exists idiom: only resolved rows (and the plain dict) have a label.
        (
            json!({"$not": [{"$eq": [{"$getField": "inputs.example.label"}, {"$literal": ""}]}]}),
            vec!["c0", "c1", "c2", "c5"],
        ),
    ];
    for (cond, want) in &cases {
        let body = json!({"expand_columns": ex, "query": {"$expr": cond}});
        let got = stream(&api, body.clone()).await;
        assert_eq!(ids(&got), *want, "{cond}");
        assert_eq!(count(&api, body.clone()).await, want.len() as u64, "count of {cond}");
        // query_stats' limit caps the count.
        let mut capped = body;
        capped["limit"] = json!(1);
        assert_eq!(count(&api, capped).await, 1, "capped count of {cond}");
    }

    // Paging applies after the filter.
    let not_a = json!({"$expr": cases[2].0});
    let page =
        stream(&api, json!({"expand_columns": ex, "query": not_a, "offset": 1, "limit": 2})).await;
    assert_eq!(ids(&page), ["c2", "c3"]);

    // Nested columns: the prompt inside the model.
    let nested = json!(["inputs.model", "inputs.model.prompt"]);
    let q = json!({"$expr": eq("inputs.model.prompt.text", "hello")});
    assert_eq!(
        ids(&stream(&api, json!({"expand_columns": nested, "query": q})).await),
        ["c0", "c1", "c2"]
    );
    assert_eq!(count(&api, json!({"expand_columns": nested, "query": q})).await, 3);
    let only_model = json!(["inputs.model"]);
    assert!(stream(&api, json!({"expand_columns": only_model, "query": q})).await.is_empty());

    // Orders: present values first, numbers before text, `id` as the tiebreaker.
    let order = |field: &str, dir: &str| json!([{"field": field, "direction": dir}]);
    let cases = [
        (order("inputs.example.label", "asc"), vec!["c1", "c0", "c2", "c5", "c3", "c4"]),
        (order("inputs.example.label", "desc"), vec!["c5", "c2", "c0", "c1", "c3", "c4"]),
        (order("inputs.example.score", "desc"), vec!["c1", "c0", "c2", "c5", "c3", "c4"]),
        (order("inputs.example.score", "asc"), vec!["c5", "c2", "c0", "c1", "c3", "c4"]),
    ];
    for (sort_by, want) in &cases {
        let rows = stream(&api, json!({"expand_columns": ex, "sort_by": sort_by})).await;
        assert_eq!(ids(&rows), *want, "{sort_by}");
        assert_eq!(rows[0]["inputs"]["example"]["_ref"].is_string(), want[0] != "c5");
        // Pages of the same order, as the SDK fetches them.
        let mut paged = Vec::new();
        for offset in [0, 2, 4] {
            let page = stream(
                &api,
                json!({"expand_columns": ex, "sort_by": sort_by, "offset": offset, "limit": 2}),
            )
            .await;
            paged.extend(ids(&page));
        }
        assert_eq!(paged, *want, "paged {sort_by}");
    }
    // Sorting and filtering together, unexpanded values returned.
    let rows = stream(
        &api,
        json!({"expand_columns": ex, "sort_by": order("inputs.example.score", "desc"),
               "query": {"$expr": eq("inputs.example.meta.tag", "x")},
               "return_expanded_column_values": false}),
    )
    .await;
    assert_eq!(ids(&rows), ["c0", "c2"]);
    assert_eq!(rows[0]["inputs"]["example"], json!(f.row_refs[0]));
    // A sort key before the expanded one still leads.
    let sort_by = json!([{"field": "inputs.k", "direction": "desc"},
                         {"field": "inputs.example.label", "direction": "asc"}]);
    let rows = stream(&api, json!({"expand_columns": ex, "sort_by": sort_by, "limit": 3})).await;
    assert_eq!(ids(&rows), ["c5", "c4", "c3"]);

    // Bad expand-path queries are still 400s.
    let body = json!({"project_id": P, "expand_columns": ex,
                      "query": {"$expr": {"$eq": [{"$getField": "inputs.example.score"}, {"$literal": 2}]}}});
    api.post("/calls/stream_query", &body).await.err(400);
    api.post("/calls/query_stats", &body).await.err(400);
}
