//! Table tests of the pure parts of the agents views.

use heddle_ql::eval::Val;
use serde_json::json;

use super::span::AgentSpan;
use super::views::{aggregate, percentile};

#[test]
fn aggregations_skip_nulls_like_sql() {
    let v = [Val::Int(1), Val::Null, Val::Int(4), Val::Int(4)];
    for (agg, want) in [
        ("count", json!(3)),
        ("count_distinct", json!(2)),
        ("sum", json!(9)),
        ("avg", json!(3.0)),
        ("min", json!(1)),
        ("max", json!(4)),
    ] {
        assert_eq!(aggregate(agg, &v, false), want, "{agg}");
    }
    assert_eq!(aggregate("avg", &[Val::Null], false), json!(null));
    let b = [Val::Bool(true), Val::Bool(false), Val::Bool(true)];
    assert_eq!(aggregate("count_true", &b, false), json!(2));
    assert_eq!(aggregate("count_false", &b, false), json!(1));
    assert_eq!(percentile(&[Val::Int(1), Val::Int(2), Val::Int(3), Val::Int(4)], 50.0), json!(2.5));
    assert_eq!(percentile(&[Val::Null], 50.0), json!(null));
}

#[test]
fn chat_counts_tokens_once_per_subtree() {
    // The agent span repeats its model call's usage: counted once.
    let span = |id: &str, parent: Option<&str>, op: &str, tokens: i64| AgentSpan {
        span_id: id.into(),
        trace_id: "t".into(),
        parent_span_id: parent.map(Into::into),
        operation_name: Some(op.into()),
        input_tokens: Some(tokens),
        ..AgentSpan::default()
    };
    let spans = [span("a", None, "invoke_agent", 30), span("c", Some("a"), "chat", 30)];
    let chat = super::chat::trace_chat("t", &spans);
    assert_eq!(chat["total_input_tokens"], 30);
    let alone = [span("a", None, "invoke_agent", 30)];
    assert_eq!(super::chat::trace_chat("t", &alone)["total_input_tokens"], 30);
}
