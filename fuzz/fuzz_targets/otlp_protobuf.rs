//! OTLP/protobuf: heddle's reader, prost's decoder and the span mapping on arbitrary bytes.
//!
//! Properties (docs/fuzzing.md):
//! - nothing panics;
//! - `decode_protobuf` (which reads the body in place, counting each nested message against the
//!   bounds before it builds it) refuses a body that prost decodes only for a bound (or for
//!   groups, which OTLP never uses);
//! - when both succeed, it reads the request prost decoded, and no more spans than the bound (it
//!   may succeed where prost refuses a field heddle does not read);
//! - every span becomes one call part or one rejection, whichever project source is used.
#![no_main]

use heddle_proto::ProjectId;
use heddle_proto::limits::MAX_SPANS_PER_REQUEST;
use heddle_proto::otlp;
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fn read_spans(req: &otlp::Request) -> usize {
    req.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum()
}

/// Whether the reader refused for a bound (or for groups) rather than for a broken body.
fn refused_by_policy(err: &str) -> bool {
    err.contains("the request has more than") || err.contains("groups are not part of OTLP")
}

fuzz_target!(|data: &[u8]| {
    let decoded = ExportTraceServiceRequest::decode(data);
    let via_api = otlp::decode_protobuf(data);
    match (&via_api, &decoded) {
        (Err(e), Ok(_)) => {
            let e = e.to_string();
            assert!(refused_by_policy(&e), "refused what prost decodes: {e}");
        }
        (Ok(read), Ok(by_prost)) => {
            // Debug text, so that NaN doubles compare equal.
            let by_prost = otlp::Request::from(by_prost);
            assert_eq!(format!("{read:?}"), format!("{by_prost:?}"), "read differently from prost");
        }
        _ => {}
    }
    let Ok(req) = via_api else { return };

    let project = ProjectId::parse("fuzz/otlp").unwrap();
    let n = read_spans(&req);
    assert!(n <= MAX_SPANS_PER_REQUEST, "read {n} spans");
    let converted = otlp::convert(&req, Some(&project), Some("u")).expect("a header project");
    assert_eq!(converted.parts.len() + converted.rejected as usize, n);
    // Projects from the resource attributes instead: a request may fail as a whole here.
    if let Ok(c) = otlp::convert(&req, None, None) {
        assert_eq!(c.parts.len() + c.rejected as usize, n);
    }
    let _ = converted.response();
});
