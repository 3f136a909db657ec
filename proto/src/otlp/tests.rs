//! Table-driven mapping tests: an OTLP/JSON span in, the call out — and the same request as
//! protobuf must convert identically.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::{Value, json};

use super::*;

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const SPAN: &str = "b7ad6b7169203331";
const PARENT: &str = "00f067aa0ba902b7";

fn attr(key: &str, value: Value) -> Value {
    let v = match value {
        Value::String(s) => json!({"stringValue": s}),
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) if n.is_i64() => json!({"intValue": n}),
        Value::Number(n) => json!({"doubleValue": n}),
        other => panic!("no attribute form for {other}"),
    };
    json!({"key": key, "value": v})
}

fn attrs(pairs: &[(&str, Value)]) -> Value {
    Value::Array(pairs.iter().map(|(k, v)| attr(k, v.clone())).collect())
}

/// A request with one span carrying `attributes` (and `extra` span fields merged in).
fn request(attributes: Value, extra: Value) -> Value {
    let mut span = json!({
        "traceId": TRACE, "spanId": SPAN, "parentSpanId": PARENT,
        "name": "chat gpt-4o", "kind": 3,
        "startTimeUnixNano": "1763700000000000000", "endTimeUnixNano": "1763700001500000000",
        "attributes": attributes,
    });
    span.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    json!({"resourceSpans": [{
        "resource": {"attributes": attrs(&[("service.name", json!("svc"))])},
        "scopeSpans": [{"scope": {"name": "test-scope", "version": "1.0"}, "spans": [span]}],
    }]})
}

fn project() -> ProjectId {
    ProjectId::parse("acme/otel").unwrap()
}

/// Converts the request both as JSON and as protobuf; asserts both agree; returns the call.
fn convert_both(req: &Value) -> (Converted, Value) {
    let body = serde_json::to_vec(req).unwrap();
    let decoded = decode_json(&body).unwrap();
    let from_json = convert(&Request::from(&decoded), Some(&project()), Some("u")).unwrap();
    let from_proto =
        convert(&decode_protobuf(&decoded.encode_to_vec()).unwrap(), Some(&project()), Some("u"))
            .unwrap();
    assert_eq!(from_json.parts, from_proto.parts, "protobuf and JSON disagree");
    from_json.parts.iter().for_each(assert_resource_place);
    let (in_place, in_place_converted) = written_in_place(&Request::from(&decoded));
    assert_eq!(in_place, crate::record::encode_parts(&from_json.parts), "record bytes disagree");
    assert_eq!(in_place_converted.errors, from_json.errors);
    let call = from_json.parts.first().map(part_json).unwrap_or(Value::Null);
    (from_json, call)
}

/// The place the converter kept for a dump's resource is where reading the dump finds it.
fn assert_resource_place(p: &CallPart) {
    #[derive(serde::Deserialize)]
    struct Member<'a> {
        #[serde(borrow)]
        resource: &'a serde_json::value::RawValue,
    }
    let Some(dump) = p.start.as_ref().and_then(|s| s.otel_dump.as_ref()) else { return };
    let found = serde_json::from_str::<Member>(dump).unwrap().resource.get();
    let start = found.as_ptr() as usize - dump.as_ptr() as usize;
    assert_eq!(dump.resource(), Some(start..start + found.len()), "{}", &**dump);
}

/// The record value of the request's calls, each member written straight into it
/// ([`crate::record::append_lazy`]). A member it refuses is refused for the reason writing it
/// into a string gives, and leaves the record as it was.
fn written_in_place(req: &Request) -> (Vec<u8>, Converted) {
    let mut value = Vec::new();
    let mut each = |part: LazyPart| {
        let before = value.len();
        match (crate::record::append_lazy(&mut value, &part), part.into_part()) {
            (Ok(len), Ok(p)) => {
                assert_eq!(len, crate::record::CallPartRecord::from(p).encoded_len());
                Ok(())
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b);
                assert_eq!(value.len(), before, "a refused part left bytes behind");
                Err(a)
            }
            (a, b) => panic!("in place: {a:?}; into strings: {:?}", b.map(|_| ())),
        }
    };
    let converted = convert_each(req, Some(&project()), Some("u"), &mut each).unwrap();
    (value, converted)
}

/// The part as the call fields it stores (JSON members parsed).
fn part_json(p: &CallPart) -> Value {
    let s = p.start.as_ref().unwrap();
    let e = p.end.as_ref().unwrap();
    let parse = |t: &str| serde_json::from_str::<Value>(t).unwrap();
    json!({
        "id": p.id, "trace_id": p.trace_id, "parent_id": s.parent_id, "op_name": s.op_name,
        "display_name": s.display_name, "thread_id": s.thread_id, "turn_id": s.turn_id,
        "started_at": s.started_at.0, "ended_at": e.ended_at.0,
        "attributes": parse(&s.attributes), "inputs": parse(&s.inputs),
        "output": e.output.as_deref().map(parse), "summary": parse(&e.summary),
        "exception": e.exception, "otel_dump": s.otel_dump.as_deref().map(parse),
        "wb_user_id": s.wb_user_id,
    })
}

/// Asserts every `(JSON pointer, expected)` pair on the call.
fn check(call: &Value, expected: &[(&str, Value)]) {
    for (pointer, want) in expected {
        let got = call.pointer(pointer).unwrap_or(&Value::Null);
        assert_eq!(got, want, "{pointer} in {call:#}");
    }
}

/// The resource's place is the top-level member's, with `resource` keys nested in the span's
/// attributes, the scope's and the resource's own, and without a resource.
#[test]
fn the_resource_place_is_the_top_level_members() {
    let mut req = request(
        attrs(&[("resource.name", json!("a")), ("x.resource", json!(1))]),
        json!({"events": [{"name": "resource", "timeUnixNano": "1763700000000000001",
            "attributes": attrs(&[("resource", json!("e"))])}]}),
    );
    req["resourceSpans"][0]["resource"]["attributes"] =
        attrs(&[("service.name", json!("svc")), ("resource", json!("r"))]);
    req["resourceSpans"][0]["scopeSpans"][0]["scope"]["attributes"] =
        attrs(&[("resource", json!("s"))]);
    let (converted, call) = convert_both(&req);
    assert_eq!(call["otel_dump"]["resource"]["attributes"]["resource"], json!("r"));
    let dump = converted.parts[0].start.as_ref().unwrap().otel_dump.as_ref().unwrap();
    assert!(dump[dump.resource().unwrap()].starts_with(r#"{"attributes":{"service""#));

    req["resourceSpans"][0].as_object_mut().unwrap().remove("resource");
    let (converted, _) = convert_both(&req);
    let dump = converted.parts[0].start.as_ref().unwrap().otel_dump.as_ref().unwrap();
    assert_eq!(&dump[dump.resource().unwrap()], "null");
}

#[test]
fn span_identity_times_and_op() {
    let (_, call) = convert_both(&request(json!([]), json!({})));
    let op = format!("weave:///acme/otel/op/chat_gpt-4o:{}", op::placeholder_digest());
    check(
        &call,
        &[
            ("/id", json!(SPAN)),
            ("/trace_id", json!(TRACE)),
            ("/parent_id", json!(PARENT)),
            ("/op_name", json!(op)),
            ("/started_at", json!(1_763_700_000_000_000i64)),
            ("/ended_at", json!(1_763_700_001_500_000i64)),
            ("/wb_user_id", json!("u")),
            ("/otel_dump/kind", json!("CLIENT")),
            ("/otel_dump/context/span_id", json!(SPAN)),
            ("/otel_dump/resource/attributes/service/name", json!("svc")),
            ("/otel_dump/scope/name", json!("test-scope")),
            ("/summary", json!({})),
            ("/exception", Value::Null),
        ],
    );
}

#[test]
fn conventions_map_to_inputs_outputs_usage_and_attributes() {
    let messages = r#"[{"role":"user","parts":[{"type":"text","content":"hi"}]}]"#;
    // (convention, span attributes, expected (pointer, value) pairs on the call)
    type Case = (&'static str, Value, Vec<(&'static str, Value)>);
    let cases: Vec<Case> = vec![
        (
            "OpenTelemetry GenAI",
            attrs(&[
                ("gen_ai.system", json!("openai")),
                ("gen_ai.operation.name", json!("chat")),
                ("gen_ai.request.model", json!("gpt-4o")),
                ("gen_ai.request.temperature", json!(0.5)),
                ("gen_ai.response.model", json!("gpt-4o-2024-08-06")),
                ("gen_ai.usage.input_tokens", json!(10)),
                ("gen_ai.usage.output_tokens", json!(5)),
                ("gen_ai.usage.cache_read.input_tokens", json!(3)),
                ("gen_ai.input.messages", json!(messages)),
                ("gen_ai.output.messages", json!(r#"[{"role":"assistant","parts":[]}]"#)),
                ("server.address", json!("api.openai.com")),
            ]),
            vec![
                ("/inputs/gen_ai.input.messages/0/parts/0/content", json!("hi")),
                ("/output/gen_ai.output.messages/0/role", json!("assistant")),
                (
                    "/summary/usage/gpt-4o-2024-08-06",
                    json!({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3,
                           "total_tokens": 15, "requests": 1}),
                ),
                ("/attributes/model", json!("gpt-4o-2024-08-06")),
                ("/attributes/system", json!("openai")),
                ("/attributes/operation_name", json!("chat")),
                ("/attributes/model_parameters", json!({"model": "gpt-4o", "temperature": 0.5})),
                ("/attributes/server/address", json!("api.openai.com")),
                ("/attributes/gen_ai", Value::Null),
                // The dump keeps every attribute but the moved messages, stored once in
                // inputs and output.
                ("/otel_dump/attributes/gen_ai/usage/input_tokens", json!(10)),
                ("/otel_dump/attributes/gen_ai/request/model", json!("gpt-4o")),
                ("/otel_dump/attributes/gen_ai/input", Value::Null),
                ("/otel_dump/attributes/gen_ai/output", Value::Null),
                (
                    "/otel_dump/attributes_moved",
                    json!({"inputs": "gen_ai.input.messages", "output": "gen_ai.output.messages"}),
                ),
            ],
        ),
        (
            "OpenInference",
            attrs(&[
                ("openinference.span.kind", json!("LLM")),
                ("llm.model_name", json!("claude-3-5-sonnet")),
                ("input.value", json!(r#"{"question": "why?"}"#)),
                ("input.mime_type", json!("application/json")),
                ("output.value", json!("because")),
                ("llm.token_count.prompt", json!(12)),
                ("llm.token_count.completion", json!(7)),
                ("llm.token_count.total", json!(19)),
            ]),
            vec![
                ("/inputs", json!({"input.value": {"question": "why?"}})),
                ("/output", json!({"output.value": "because"})),
                (
                    "/summary/usage/claude-3-5-sonnet",
                    json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19,
                           "requests": 1}),
                ),
                ("/attributes/kind", json!("LLM")),
                ("/attributes/input/mime_type", json!("application/json")),
            ],
        ),
        (
            "OpenLLMetry / Traceloop",
            attrs(&[
                ("traceloop.span.kind", json!("workflow")),
                ("gen_ai.prompt.0.role", json!("user")),
                ("gen_ai.prompt.0.content", json!("tell a joke")),
                ("gen_ai.completion.0.role", json!("assistant")),
                ("gen_ai.completion.0.content", json!("no")),
                ("gen_ai.usage.prompt_tokens", json!("4")),
                ("gen_ai.usage.completion_tokens", json!(1)),
                ("llm.request.type", json!("chat")),
            ]),
            vec![
                ("/inputs", json!({"gen_ai.prompt": [{"role": "user", "content": "tell a joke"}]})),
                ("/output/gen_ai.completion/0/content", json!("no")),
                (
                    "/summary/usage/usage",
                    json!({"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5,
                           "requests": 1}),
                ),
                ("/attributes/kind", json!("workflow")),
                ("/attributes/llm/request/type", json!("chat")),
            ],
        ),
        (
            "Vercel AI SDK",
            attrs(&[
                ("ai.model.id", json!("gpt-4o-mini")),
                ("ai.model.provider", json!("openai.chat")),
                ("ai.prompt", json!(r#"{"prompt": "hello"}"#)),
                ("ai.response.text", json!("hi there")),
                ("ai.response.finishReason", json!("stop")),
                ("ai.usage.promptTokens", json!(3)),
                ("ai.usage.completionTokens", json!(2)),
            ]),
            vec![
                ("/inputs", json!({"ai.prompt": {"prompt": "hello"}})),
                ("/output/ai.response/text", json!("hi there")),
                ("/summary/usage/gpt-4o-mini/total_tokens", json!(5)),
                ("/attributes/provider", json!("openai.chat")),
            ],
        ),
        (
            "generic input/output",
            attrs(&[("input", json!(r#"{"x": 1}"#)), ("output", json!(r#"[1, 2]"#))]),
            vec![("/inputs", json!({"x": 1})), ("/output", json!([1, 2]))],
        ),
        (
            "wandb threads, turns and names",
            attrs(&[
                ("wandb.thread_id", json!("conv-1")),
                ("wandb.is_turn", json!(true)),
                ("wandb.display_name", json!("Turn one")),
                ("wandb.attributes", json!(r#"{"team": "search"}"#)),
            ]),
            vec![
                ("/thread_id", json!("conv-1")),
                ("/turn_id", json!(SPAN)),
                ("/display_name", json!("Turn one")),
                ("/attributes/team", json!("search")),
                ("/attributes/wandb", Value::Null),
            ],
        ),
        (
            "a thread without a turn",
            attrs(&[("wandb.thread_id", json!("conv-1")), ("wandb.is_turn", json!(false))]),
            vec![("/thread_id", json!("conv-1")), ("/turn_id", Value::Null)],
        ),
    ];
    for (name, attributes, expected) in cases {
        let (converted, call) = convert_both(&request(attributes, json!({})));
        assert_eq!(converted.rejected, 0, "{name}");
        let expected: Vec<(&str, Value)> = expected;
        std::panic::catch_unwind(|| check(&call, &expected))
            .unwrap_or_else(|_| panic!("convention {name:?}"));
    }
}

#[test]
fn message_events_become_inputs_and_outputs() {
    let events = json!({"events": [
        {"name": "gen_ai.user.message", "timeUnixNano": "1763700000100000000",
         "attributes": attrs(&[("content", json!("hi")), ("role", json!("user"))])},
        {"name": "gen_ai.user.message", "timeUnixNano": "1763700000200000000",
         "attributes": attrs(&[("content", json!("again"))])},
        {"name": "gen_ai.choice", "timeUnixNano": "1763700001000000000",
         "attributes": attrs(&[("message.content", json!("hello")), ("index", json!(0))])},
    ]});
    let (_, call) = convert_both(&request(json!([]), events));
    check(
        &call,
        &[
            ("/inputs/events.gen_ai.user.message/1/content", json!("again")),
            ("/output/events.gen_ai.choice/0/message/content", json!("hello")),
            ("/otel_dump/events/0/timestamp", json!(1_763_700_000_100_000_000u64)),
            // The events' content is stored once, in inputs and output; the dump says so.
            ("/otel_dump/events/0/attributes", Value::Null),
            ("/otel_dump/events/2/name", json!("gen_ai.choice")),
            ("/otel_dump/events/2/attributes", Value::Null),
            (
                "/otel_dump/attributes_moved",
                json!({"inputs": "events.gen_ai.user.message", "output": "events.gen_ai.choice"}),
            ),
        ],
    );
}

#[test]
fn errors_carry_the_recorded_exception() {
    let failed = json!({
        "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
        "events": [{"name": "exception", "timeUnixNano": "1763700001000000000",
                    "attributes": attrs(&[
                        ("exception.type", json!("ValueError")),
                        ("exception.message", json!("boom")),
                        ("exception.stacktrace", json!("Traceback ...")),
                    ])}],
    });
    let (_, call) = convert_both(&request(json!([]), failed));
    check(
        &call,
        &[
            ("/exception", json!("ValueError: boom\nTraceback ...")),
            ("/otel_dump/status", json!({"code": "ERROR", "message": "boom"})),
        ],
    );
    let bare = json!({"status": {"code": 2}});
    let (_, call) = convert_both(&request(json!([]), bare));
    check(&call, &[("/exception", json!("error"))]);
    let ok = json!({"status": {"code": 1, "message": "fine"}});
    let (_, call) = convert_both(&request(json!([]), ok));
    check(&call, &[("/exception", Value::Null)]);
}

#[test]
fn bad_spans_are_rejected_alone() {
    let mut req = request(json!([]), json!({}));
    let spans = req.pointer_mut("/resourceSpans/0/scopeSpans/0/spans").unwrap();
    let good = spans[0].clone();
    let mut short_id = good.clone();
    short_id["spanId"] = json!("abcd");
    let mut no_trace = good.clone();
    no_trace["traceId"] = json!("");
    let mut no_start = good.clone();
    no_start["spanId"] = json!("1111111111111111");
    no_start["startTimeUnixNano"] = json!(0);
    *spans = json!([short_id, good, no_trace, no_start]);
    let (converted, call) = convert_both(&req);
    assert_eq!(converted.parts.len(), 1);
    assert_eq!(call["id"], SPAN);
    assert_eq!(converted.rejected, 3);
    let res = converted.response().partial_success.unwrap();
    assert_eq!(res.rejected_spans, 3);
    assert!(res.error_message.contains("span_id must be 8 bytes, got 2"), "{}", res.error_message);
    assert!(res.error_message.contains("trace_id must be 16 bytes"), "{}", res.error_message);
    assert!(res.error_message.contains("start_time_unix_nano is missing"));
}

#[test]
fn projects_come_from_the_header_or_the_resource() {
    let mut req = request(json!([]), json!({}));
    req["resourceSpans"][0]["resource"]["attributes"] =
        attrs(&[("wandb.entity", json!("team")), ("wandb.project", json!("proj"))]);
    let decoded = decode_json(&serde_json::to_vec(&req).unwrap()).unwrap();
    let from_resource = convert(&Request::from(&decoded), None, None).unwrap();
    assert_eq!(from_resource.parts[0].project.as_str(), "team/proj");
    let header_wins = convert(&Request::from(&decoded), Some(&project()), None).unwrap();
    assert_eq!(header_wins.parts[0].project.as_str(), "acme/otel");
    let anonymous = decode_json(&serde_json::to_vec(&request(json!([]), json!({}))).unwrap());
    let err = convert(&Request::from(&anonymous.unwrap()), None, None).unwrap_err();
    assert!(err.to_string().contains("no project"), "{err}");
}

#[test]
fn json_accepts_the_forms_exporters_send() {
    // snake_case names, enum names, numeric 64-bit integers.
    let req = json!({"resource_spans": [{"scope_spans": [{"spans": [{
        "trace_id": TRACE, "span_id": SPAN, "name": "n", "kind": "SPAN_KIND_SERVER",
        "start_time_unix_nano": 1_763_700_000_000_000_000u64,
        "end_time_unix_nano": 1_763_700_000_000_001_000u64,
        "attributes": [{"key": "n", "value": {"int_value": 9_007_199_254_740_993i64}}],
    }]}]}]});
    let (_, call) = convert_both(&req);
    check(
        &call,
        &[
            ("/otel_dump/kind", json!("SERVER")),
            ("/ended_at", json!(1_763_700_000_000_001i64)),
            ("/attributes/n", json!(9_007_199_254_740_993i64)),
            ("/parent_id", Value::Null),
        ],
    );
    for bad in [
        &b"not json"[..],
        b"[]",
        br#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}"#,
    ] {
        assert!(decode_json(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
    assert!(decode_protobuf(b"\xff\xff\xff").is_err());
}

#[test]
fn protobuf_round_trip_of_an_empty_request() {
    let req = ExportTraceServiceRequest::default();
    let converted = convert(&Request::from(&req), None, None).unwrap();
    assert!(converted.parts.is_empty());
    assert!(converted.response().partial_success.is_none());
}

/// Two spans, the second with a different id, each with the given attributes.
fn two_spans(bad: Value, good: Value) -> Value {
    let mut req = request(bad, json!({}));
    let spans = req["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array_mut().unwrap();
    let mut second = spans[0].clone();
    second["spanId"] = json!("c7ad6b7169203332");
    second["attributes"] = good;
    spans.push(second);
    req
}

#[test]
fn a_key_of_thousands_of_segments_rejects_only_its_span() {
    // 20 KB of dots: nested without a bound, this overflowed the stack when the value was
    // serialised or dropped; at ~3,000 segments it was stored and broke every JSON filter.
    for (segments, why) in
        [(3_000, "longer than the limit"), (10_000, "longer than"), (33, "segments")]
    {
        let key = vec!["a"; segments].join(".");
        let req = two_spans(attrs(&[(&key, json!("x"))]), attrs(&[("ok", json!(1))]));
        let (converted, call) = convert_both(&req);
        assert_eq!(converted.rejected, 1, "{segments}");
        assert_eq!(converted.parts.len(), 1);
        assert_eq!(call["id"], "c7ad6b7169203332");
        assert!(converted.errors[0].contains(why), "{:?}", converted.errors);
    }
    // 32 segments are fine.
    let key = vec!["a"; 32].join(".");
    let (converted, _) = convert_both(&two_spans(attrs(&[(&key, json!(1))]), attrs(&[])));
    assert_eq!((converted.rejected, converted.parts.len()), (0, 2));
    let long = "k".repeat(crate::limits::MAX_ATTRIBUTE_KEY_BYTES + 1);
    let req = two_spans(attrs(&[(&long, json!("x"))]), attrs(&[]));
    let (converted, _) = convert_both(&req);
    assert_eq!((converted.rejected, converted.parts.len()), (1, 1));
    assert!(converted.errors[0].contains("longer than the limit"), "{:?}", converted.errors);
}

#[test]
fn a_message_of_too_many_items_refuses_the_request_in_both_encodings() {
    use crate::limits::MAX_ITEMS_PER_MESSAGE;
    let many = |n: usize| -> Value {
        (0..n).map(|i| attr(&format!("k{}", i % 7), json!(i))).collect::<Vec<_>>().into()
    };
    let (converted, _) = convert_both(&request(many(MAX_ITEMS_PER_MESSAGE), json!({})));
    assert_eq!((converted.rejected, converted.parts.len()), (0, 1));
    let req = request(many(MAX_ITEMS_PER_MESSAGE + 1), json!({}));
    let body = serde_json::to_vec(&req).unwrap();
    let err = decode_json(&body).unwrap_err().to_string();
    assert!(err.contains("one object of the request holds more than 10000"), "{err}");
    let mut half = request(many(MAX_ITEMS_PER_MESSAGE / 2), json!({}));
    let mut pb = decode_json(&serde_json::to_vec(&half).unwrap()).unwrap();
    let span = &mut pb.resource_spans[0].scope_spans[0].spans[0];
    span.attributes.extend(span.attributes.clone());
    span.attributes.push(span.attributes[0].clone());
    let err = decode_protobuf(&pb.encode_to_vec()).unwrap_err().to_string();
    assert!(err.contains("one Span of the request holds more than 10000"), "{err}");
    // A span's lists count together, in both encodings.
    half["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["events"] = vec![
        json!({"name": "e", "timeUnixNano": "1763700000000000000"});
        MAX_ITEMS_PER_MESSAGE / 2
    ]
    .into();
    let (converted, _) = convert_both(&half);
    assert_eq!(converted.parts.len(), 1);
    half["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["links"] = vec![json!({
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"})]
    .into();
    let err = decode_json(&serde_json::to_vec(&half).unwrap()).unwrap_err().to_string();
    assert!(err.contains("more than 10000"), "{err}");
    let mut pb =
        decode_json(&serde_json::to_vec(&request(attrs(&[]), json!({}))).unwrap()).unwrap();
    let span = &mut pb.resource_spans[0].scope_spans[0].spans[0];
    span.events = vec![Default::default(); MAX_ITEMS_PER_MESSAGE / 2];
    span.links = vec![Default::default(); MAX_ITEMS_PER_MESSAGE / 2 + 1];
    let err = decode_protobuf(&pb.encode_to_vec()).unwrap_err().to_string();
    assert!(err.contains("one Span of the request holds more than 10000"), "{err}");
}

#[test]
fn a_json_list_longer_than_any_otlp_list_is_refused_before_parsing() {
    // 12 bytes of text per item, ~32 once parsed, in one vector grown by doubling.
    let zeros = |n: usize| format!(r#"{{"resourceSpans":[],"x":[{}0]}}"#, "0,".repeat(n - 1));
    let err = decode_json(zeros(50_001).as_bytes()).unwrap_err().to_string();
    assert!(err.contains("more than 50000 items"), "{err}");
    let err = logs::decode_json(zeros(50_001).as_bytes()).unwrap_err().to_string();
    assert!(err.contains("more than 50000 items"), "{err}");
    // Within it, the list is parsed and then held to one message's bound; an unknown field
    // within that is ignored.
    let err = decode_json(zeros(50_000).as_bytes()).unwrap_err().to_string();
    assert!(err.contains("more than 10000"), "{err}");
    assert!(decode_json(zeros(10_000).as_bytes()).unwrap().resource_spans.is_empty());
}

#[test]
fn event_and_resource_keys_are_bounded_too() {
    let key = vec!["e"; 100].join(".");
    let event = json!({"events": [{"name": "x", "timeUnixNano": "1763700000000000000",
                                   "attributes": attrs(&[(&key, json!(1))])}]});
    let (converted, _) = convert_both(&request(attrs(&[]), event));
    assert_eq!((converted.rejected, converted.parts.len()), (1, 0));
    let mut req = request(attrs(&[]), json!({}));
    req["resourceSpans"][0]["resource"]["attributes"] = attrs(&[(&key, json!(1))]);
    let (converted, _) = convert_both(&req);
    assert_eq!((converted.rejected, converted.parts.len()), (1, 0));
}

#[test]
fn values_nested_past_the_json_depth_reject_their_span() {
    // A JSON-valued attribute the parser accepts (127 levels) under a 32-segment key nests
    // deeper than any stored value may: the span is rejected instead of stored unreadable.
    let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    let key = vec!["k"; 32].join(".");
    let req = two_spans(attrs(&[(&key, json!(deep))]), attrs(&[("k", json!(deep))]));
    let (converted, call) = convert_both(&req);
    assert_eq!((converted.rejected, converted.parts.len()), (1, 1));
    assert!(converted.errors[0].contains("deeper than"), "{:?}", converted.errors);
    // The accepted span's value reads back as JSON.
    assert!(serde_json::from_str::<Value>(&call["attributes"].to_string()).is_ok());
}

#[test]
fn members_of_values_at_the_unscanned_depth_are_within_the_member_depth() {
    // The deepest values whose members are not scanned (see `span::fits`), under the longest
    // keys, in every place an attribute can go: the members must still read back, and the
    // deepest must reach the limit exactly (one level more and the bound would be wrong).
    use crate::limits::{MAX_ATTRIBUTE_KEY_SEGMENTS, MAX_MEMBER_DEPTH};
    let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    let under = |head: &str| {
        let rest = MAX_ATTRIBUTE_KEY_SEGMENTS - head.split('.').count();
        format!("{head}{}", ".k".repeat(rest))
    };
    // Each value as deep as its place allows: attribute values, event and link attributes
    // (nested with their keys) and the resource (`{"attributes": ..}`, nested with its keys).
    let value = nested(MAX_MEMBER_DEPTH - span::ABOVE_ATTRIBUTE);
    let event_value =
        nested(MAX_MEMBER_DEPTH - span::ABOVE_EVENT_ATTRIBUTES - MAX_ATTRIBUTE_KEY_SEGMENTS);
    let resource_value =
        nested(MAX_MEMBER_DEPTH - span::ABOVE_RESOURCE - 1 - MAX_ATTRIBUTE_KEY_SEGMENTS);
    let object = format!("{{\"a\": {}}}", nested(MAX_MEMBER_DEPTH - span::ABOVE_ATTRIBUTE - 1));
    let (input, request_key, plain) = (under("input"), under("gen_ai.request"), under("k"));
    let event = attrs(&[(&plain, json!(event_value))]);
    let mut req = request(
        attrs(&[
            (&input, json!(value)),
            (&request_key, json!(value)),
            (&plain, json!(value)),
            ("wandb.attributes", json!(object)),
        ]),
        json!({
            "events": [{"name": "e", "timeUnixNano": "1763700000000000000", "attributes": event}],
            "links": [{"traceId": TRACE, "spanId": PARENT, "attributes": event}],
        }),
    );
    req["resourceSpans"][0]["resource"]["attributes"] = attrs(&[(&plain, json!(resource_value))]);
    let (converted, call) = convert_both(&req);
    assert_eq!((converted.rejected, converted.parts.len()), (0, 1), "{:?}", converted.errors);
    let depth = |v: &Value| crate::limits::json_depth(v, usize::MAX);
    let dump = &call["otel_dump"];
    for (what, v) in [
        ("inputs", &call["inputs"]),
        ("attributes", &call["attributes"]),
        ("otel_dump", dump),
        ("its attributes", &dump["attributes"]),
        ("its events", &dump["events"]),
        ("its links", &dump["links"]),
        ("its resource", &dump["resource"]),
    ] {
        // Parts of otel_dump are one level down in it, and each is as deep as a member can be.
        let (above, tight) = if what.starts_with("its") { (1, true) } else { (0, false) };
        assert!(above + depth(v) <= MAX_MEMBER_DEPTH, "{what} is {} deep", depth(v));
        assert!(!tight || above + depth(v) == MAX_MEMBER_DEPTH, "{what} is not at the limit");
    }
}

#[test]
fn a_convention_key_reads_only_its_own_and_dotted_children() {
    // `input-x` and `inputs` sort between `input` and `input.y` but are not under `input`; an
    // untruthy `input` itself yields to its children; `output` alone is a namespace of its own.
    let (_, call) = convert_both(&request(
        attrs(&[
            ("input", json!("")),
            ("input-x", json!(1)),
            ("input.y", json!(2)),
            ("input.z.0", json!("a")),
            ("inputz", json!(3)),
            ("output", json!("done")),
        ]),
        json!({}),
    ));
    assert_eq!(call["inputs"], json!({"y": 2, "z": ["a"]}));
    assert_eq!(call["output"], json!("done"));
    assert_eq!(call["attributes"]["input-x"], json!(1));
    assert_eq!(call["attributes"]["inputz"], json!(3));
    assert!(call["attributes"].get("output").is_none());
}

#[test]
fn message_texts_are_stored_as_sent_unless_a_rule_reads_into_them() {
    let messages = "[ {\"role\": \"user\", \"content\": \"caf\\u00e9 \\/ 1.50\"} ]";
    let req = request(
        attrs(&[
            ("gen_ai.input.messages", json!(messages)),
            // A repeated key is rewritten through values: the last one wins, as parsed.
            ("gen_ai.output.messages", json!("{\"text\": \"a\", \"text\": \"b\"}")),
            // An empty text is no value: the next input key is not shadowed by it.
            ("ai.prompt", json!("{ }")),
            // A text an attribute's dotted key merges into is read and merged.
            ("a", json!("{\"x\": {\"y\": 1}}")),
            ("a.x.z", json!(2)),
            ("b", json!("[1, 2]")),
        ]),
        json!({}),
    );
    let (converted, call) = convert_both(&req);
    let start = converted.parts[0].start.as_ref().unwrap();
    assert_eq!(start.inputs, format!("{{\"gen_ai.input.messages\":{messages}}}"));
    assert_eq!(call["inputs"]["gen_ai.input.messages"][0]["content"], json!("café / 1.50"));
    let output = converted.parts[0].end.as_ref().unwrap().output.as_deref();
    assert_eq!(output, Some("{\"gen_ai.output.messages\":{\"text\":\"b\"}}"));
    assert_eq!(call["attributes"]["a"], json!({"x": {"y": 1, "z": 2}}));
    assert!(start.attributes.contains("\"b\":[1, 2]"), "{}", start.attributes);
    assert_eq!(call["otel_dump"]["attributes"]["ai"]["prompt"], json!({}));
    assert_eq!(call["otel_dump"]["attributes_moved"]["inputs"], json!("gen_ai.input.messages"));
}

#[test]
fn spans_converted_together_are_converted_as_each_alone() {
    // Spans that share key sequences share what those keys matched and the shape of their
    // dump, but which attributes move depends on the values: an empty `input.value` moves
    // nothing, and then the next input key does. Past 64 sequences, spans are matched on their
    // own.
    let mut spans = Vec::new();
    for i in 0..90 {
        let value = match i % 3 {
            0 => json!(format!("v{i}")),
            1 => json!(""),
            _ => json!(r#"{"q": 1}"#),
        };
        let mut pairs = vec![
            ("input.value", value),
            ("gen_ai.input.messages", json!(r#"[{"role": "user", "content": "hi"}]"#)),
            ("gen_ai.usage.input_tokens", json!(i)),
            ("gen_ai.request.model", json!("m")),
        ];
        if i % 2 == 0 {
            pairs.push(("gen_ai.request.temperature", json!(0.5)));
        }
        if i >= 20 {
            // A sequence of its own for each span from here on: 70 more than the first 20's.
            pairs.push((Box::leak(format!("extra.k{i}").into_boxed_str()), json!(i)));
        }
        let mut span =
            request(attrs(&pairs), json!({}))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
                .clone();
        span["spanId"] = json!(format!("{:016x}", i + 1));
        spans.push(span);
    }
    let mut together = request(json!([]), json!({}));
    together["resourceSpans"][0]["scopeSpans"][0]["spans"] = Value::Array(spans.clone());
    let (converted, _) = convert_both(&together);
    assert_eq!(converted.parts.len(), spans.len());
    for (span, part) in spans.iter().zip(&converted.parts) {
        let mut alone = request(json!([]), json!({}));
        alone["resourceSpans"][0]["scopeSpans"][0]["spans"] = json!([span]);
        let (_, call) = convert_both(&alone);
        assert_eq!(part_json(part), call, "{span}");
    }
    // The empty `input.value` stayed in the dump, and the messages moved in its place.
    let second = part_json(&converted.parts[1]);
    assert_eq!(second["inputs"]["gen_ai.input.messages"][0]["content"], "hi");
    assert_eq!(second["otel_dump"]["attributes"]["input"]["value"], "");
    let first = part_json(&converted.parts[0]);
    assert_eq!(first["inputs"], json!({"input.value": "v0"}));
    assert_eq!(first["otel_dump"]["attributes"]["gen_ai"]["input"]["messages"][0]["content"], "hi");
}

#[test]
fn attributes_written_into_their_shape_are_the_attributes_nested() {
    // Converted with a fresh set of key sequences, a span's attributes are written into the
    // shape of its keys; with every sequence taken, they are nested. Both must write the same
    // text, whether a field meets an attribute of its name or not.
    let kvlist =
        json!({"key": "tool", "value": {"kvlistValue": {"values": [attr("x", json!(1))]}}});
    let cases: Vec<Value> = vec![
        attrs(&[
            ("gen_ai.request.model", json!("m")),
            ("gen_ai.request.temperature", json!(0.5)),
            ("gen_ai.system", json!("openai")),
            ("server.address", json!("h\"ost")),
            ("server.port", json!(443)),
        ]),
        // A field's name as an attribute, and under one: the field wins, nested.
        attrs(&[("gen_ai.system", json!("openai")), ("system", json!("s"))]),
        attrs(&[("gen_ai.system", json!("openai")), ("system.x", json!("s"))]),
        attrs(&[("gen_ai.request.model", json!("m")), ("model.a", json!(1)), ("model", json!(2))]),
        attrs(&[("a", json!(1)), ("a.b", json!(2)), ("wandb.attributes", json!(r#"{"k": 1}"#))]),
        {
            let mut list = attrs(&[("gen_ai.response.model", json!("r"))]);
            list.as_array_mut().unwrap().push(kvlist);
            list
        },
    ];
    let project = project();
    for attributes in cases {
        let body = serde_json::to_vec(&request(attributes.clone(), json!({}))).unwrap();
        let decoded = decode_json(&body).unwrap();
        let req = Request::from(&decoded);
        let rs = &req.resource_spans[0];
        let shared = span::Shared {
            resource: serde_json::value::to_raw_value(&json!({"attributes": {}})).unwrap(),
            resource_depth: 1,
            scope: rs.scope_spans[0].scope.clone().unwrap_or_default(),
        };
        let span = &rs.scope_spans[0].spans[0];
        let shaped = call(&project, span, &shared, &mut sequences::Sequences::default());
        let mut taken = sequences::Sequences::default();
        let keys: Vec<String> = (0..64).map(|i| format!("taken.{i}")).collect();
        for key in &keys {
            taken.matched(&[key.as_str()]).unwrap();
        }
        let nested = call(&project, span, &shared, &mut taken);
        let text = |part: &crate::calls::CallPart| part.start.as_ref().unwrap().attributes.clone();
        assert_eq!(text(&shaped), text(&nested), "{attributes}");
        assert_eq!(shaped, nested, "{attributes}");
    }
}

#[test]
fn members_whose_length_takes_another_varint_width_than_guessed_are_moved() {
    // Lengths on both sides of one and two varint bytes (128 and 16,384), guessed right and
    // wrong: an array's size is guessed at 16 bytes, so a long one outgrows its guess.
    let list = |n: usize| json!({"arrayValue": {"values": vec![json!({"intValue": "7"}); n]}});
    let output = |v: Value| json!([{"key": "output", "value": v}]);
    for n in [1usize, 40, 41, 42, 43, 5_000, 5_461, 5_462, 5_463, 6_000] {
        convert_both(&request(output(list(n)), json!({})));
    }
    for len in [100usize, 120, 121, 122, 123, 124, 125, 16_360, 16_370, 16_380, 16_390, 70_000] {
        convert_both(&request(attrs(&[("input.value", json!("x".repeat(len)))]), json!({})));
        convert_both(&request(attrs(&[("some.key", json!("y".repeat(len)))]), json!({})));
    }
}

/// The call one span becomes, written into strings.
fn call<'a>(
    project: &ProjectId,
    span: &'a request::Span<'a>,
    shared: &span::Shared,
    sequences: &mut sequences::Sequences<'a>,
) -> CallPart {
    let mut part = None;
    let mut out = |p: LazyPart| {
        part = Some(p.into_part()?);
        Ok(())
    };
    span::to_call(project, span, "op", shared, None, sequences, &mut out).unwrap();
    part.unwrap()
}
