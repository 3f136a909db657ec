//! OTLP/protobuf: the wire counter, prost's decoder and the span mapping on arbitrary bytes.
//!
//! Properties (docs/fuzzing.md):
//! - nothing panics, and a body is decoded only after `wire::count` has bounded it;
//! - when `wire::count` and prost both accept a body, they agree on the number of spans;
//! - `wire::count` refuses a body for its shape only when prost refuses it too (it may refuse
//!   more for the bounds, or for groups, which OTLP never uses);
//! - `decode_protobuf` (which reads the body in place) succeeds whenever both succeed, and then
//!   reads the request prost decoded; it never succeeds where `wire::count` refuses (it may
//!   succeed where prost refuses a field heddle does not read);
//! - every span becomes one call part or one rejection, whichever project source is used;
//! - its calls written straight into a Kafka record (`record::append_lazy`) are the record of
//!   its call parts, byte for byte, and the same spans are rejected.
#![no_main]

use heddle_proto::ProjectId;
use heddle_proto::otlp::{self, wire};
use heddle_proto::record;
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fn spans(req: &ExportTraceServiceRequest) -> usize {
    req.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum()
}

fn read_spans(req: &otlp::Request) -> usize {
    req.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum()
}

/// Whether `wire::count` refused for a bound (or for groups) rather than for a broken body.
fn refused_by_policy(err: &str) -> bool {
    err.contains("the request has more than")
        || err.contains("of the request holds more than")
        || err.contains("groups are not part of OTLP")
}

fuzz_target!(|data: &[u8]| {
    let counted = wire::count(data);
    let decoded = ExportTraceServiceRequest::decode(data);
    match (&counted, &decoded) {
        (Ok(c), Ok(req)) => assert_eq!(c.spans, spans(req), "wire::count and prost disagree"),
        (Err(e), Ok(_)) => {
            let e = e.to_string();
            assert!(refused_by_policy(&e), "wire::count refused what prost decodes: {e}");
        }
        _ => {}
    }
    let via_api = otlp::decode_protobuf(data);
    if via_api.is_ok() {
        assert!(counted.is_ok(), "decoded what wire::count refused");
    }
    if let (Ok(_), Ok(by_prost)) = (&counted, &decoded) {
        let Ok(read) = &via_api else { panic!("refused what prost decodes: {via_api:?}") };
        // Debug text, so that NaN doubles compare equal.
        let by_prost = otlp::Request::from(by_prost);
        assert_eq!(format!("{read:?}"), format!("{by_prost:?}"), "read differently from prost");
    }
    let Ok(req) = via_api else { return };

    let project = ProjectId::parse("fuzz/otlp").unwrap();
    let n = read_spans(&req);
    let converted = otlp::convert(&req, Some(&project), Some("u")).expect("a header project");
    assert_eq!(converted.parts.len() + converted.rejected as usize, n);
    let mut in_place = Vec::new();
    let mut each = |part: heddle_proto::lazy_part::LazyPart| {
        record::append_lazy(&mut in_place, &part).map(|_| ())
    };
    let lazily = otlp::convert_each(&req, Some(&project), Some("u"), &mut each).unwrap();
    assert_eq!(in_place, record::encode_parts(&converted.parts), "records written in place differ");
    assert_eq!(lazily.errors, converted.errors);
    // Projects from the resource attributes instead: a request may fail as a whole here.
    if let Ok(c) = otlp::convert(&req, None, None) {
        assert_eq!(c.parts.len() + c.rejected as usize, n);
    }
    let _ = converted.response();
});
