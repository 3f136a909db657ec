//! The statements of the SQLite backend that the query language renders ([`super::compile`]):
//! a validated [`CallsQuery`](heddle_proto::calls::CallsQuery) or feedback query as one
//! parameterised statement. The fixed statements of each resource live in its module. User
//! values only ever travel as bound parameters.

pub use super::compile::*;

#[cfg(test)]
mod tests {
    use heddle_proto::calls::CallsQueryReq;
    use serde_json::json;

    use super::*;

    fn compile(body: serde_json::Value) -> Sql {
        let req: CallsQueryReq = serde_json::from_value(body).unwrap();
        select_calls(&req.validate().unwrap())
    }

    #[test]
    fn user_values_are_always_bound() {
        let evil = "x'); DROP TABLE calls; --";
        let sql = compile(json!({
            "project_id": "e/p",
            "filter": {"op_names": [evil, format!("{evil}:*")], "call_ids": [evil],
                       "input_refs": [evil]},
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": "inputs.a"}, {"$literal": evil}]},
                {"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": evil}}},
                {"$in": [{"$getField": "display_name"}, [{"$literal": evil}]]}
            ]}},
            "sort_by": [{"field": "inputs.a", "direction": "desc"}]
        }));
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        assert_eq!(sql.text.matches('?').count(), sql.params.len());
    }

    #[test]
    fn feedback_values_are_always_bound() {
        let evil = "x'); DROP TABLE feedback; --";
        let calls = compile(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": format!("feedback.[{evil}].payload.{evil}.0")},
                         {"$literal": evil}]},
                {"$eq": [{"$getField": "feedback.[*].runnable_ref"}, {"$literal": evil}]},
            ]}},
            "sort_by": [{"field": format!("feedback.[{evil}].trigger_ref"), "direction": "desc"}]
        }));
        let fq: heddle_proto::feedback::FeedbackQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$or": [
                {"$eq": [{"$getField": format!("payload.{evil}")}, {"$literal": evil}]},
                {"$in": [{"$getField": "weave_ref"}, [{"$literal": evil}]]},
                {"$contains": {"input": {"$getField": "creator"}, "substr": {"$literal": evil}}}
            ]}},
            "sort_by": [{"field": format!("payload.{evil}"), "direction": "asc"}],
            "limit": 3, "offset": 1
        }))
        .unwrap();
        let (fq, _) = fq.validate().unwrap();
        for sql in [calls, select_feedback(&fq), count_feedback(&fq)] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            assert_eq!(sql.text.matches('?').count(), sql.params.len(), "{}", sql.text);
        }
    }

    #[test]
    fn default_order_and_paging() {
        let sql = compile(json!({"project_id": "e/p", "limit": 10, "offset": 5}));
        assert!(
            sql.text.contains("ORDER BY started_at ASC, id ASC LIMIT ? OFFSET ?"),
            "{}",
            sql.text
        );
    }

    #[test]
    fn json_paths() {
        assert_eq!(json_path(&["a".into(), "0".into(), "b.c".into()]), "$.\"a\"[0].\"b.c\"");
    }
}
