//! OTLP/JSON: the decoder (with its bounds and canonicalisation) and the span mapping on
//! arbitrary bytes.
//!
//! Properties (docs/fuzzing.md):
//! - nothing panics;
//! - a decoded request re-encoded as protobuf passes `wire::count`, which counts the same
//!   spans, and decodes back to the same request (JSON accepts nothing protobuf cannot carry);
//! - the request converts to the same call parts from JSON and from its protobuf form, and
//!   every span becomes one part or one rejection.
//!
//! With `HEDDLE_FUZZ_WRITE_PROTOBUF=<dir>` set, every decoded request is also written to `dir`
//! as protobuf: how the `otlp_protobuf` corpus is seeded from the JSON seeds.
#![no_main]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::OnceLock;

use heddle_proto::ProjectId;
use heddle_proto::otlp::{self, wire};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fn spans(req: &ExportTraceServiceRequest) -> usize {
    req.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum()
}

fn write_protobuf(bytes: &[u8]) {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    if let Some(dir) =
        DIR.get_or_init(|| std::env::var_os("HEDDLE_FUZZ_WRITE_PROTOBUF").map(Into::into))
    {
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        std::fs::write(dir.join(format!("{:016x}.pb", h.finish())), bytes).expect("writable dir");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(req) = otlp::decode_json(data) else { return };
    let n = spans(&req);

    let bytes = req.encode_to_vec();
    write_protobuf(&bytes);
    let counted = wire::count(&bytes).expect("a decoded JSON request passes the wire count");
    assert_eq!(counted.spans, n, "wire::count and the JSON decoder disagree");
    let by_prost =
        ExportTraceServiceRequest::decode(&bytes[..]).expect("a re-encoded request decodes");
    assert_eq!(by_prost.encode_to_vec(), bytes, "protobuf round trip changed the request");
    let back = otlp::decode_protobuf(&bytes).expect("a re-encoded request decodes");
    let read = otlp::Request::from(&req);
    assert_eq!(format!("{back:?}"), format!("{read:?}"), "read in place differently");

    let project = ProjectId::parse("fuzz/otlp").unwrap();
    let from_json = otlp::convert(&read, Some(&project), Some("u")).expect("a header project");
    assert_eq!(from_json.parts.len() + from_json.rejected as usize, n);
    let from_proto = otlp::convert(&back, Some(&project), Some("u")).expect("a header project");
    assert_eq!(from_json.parts, from_proto.parts, "JSON and protobuf convert differently");
    assert_eq!(from_json.rejected, from_proto.rejected);
    if let Ok(c) = otlp::convert(&read, None, None) {
        assert_eq!(c.parts.len() + c.rejected as usize, n);
    }
});
