//! OTLP logs: the wire counter, prost's decoder, the JSON decoder, the record conversion and the
//! Kafka encoding of log records on arbitrary bytes.
//!
//! Properties (docs/fuzzing.md):
//! - nothing panics, and a protobuf body is decoded only after `wire::count_logs` bounded it;
//! - when `wire::count_logs` and prost both accept a body, they count the same log records, and
//!   `wire::count_logs` refuses what prost decodes only for a bound (or groups);
//! - every record becomes one stored record or one rejection, and every stored record passes
//!   the checks the Kafka consumer makes and survives the Kafka encoding unchanged;
//! - the same bytes read as OTLP/JSON: a decoded request converts the same way from its JSON and
//!   its protobuf form.
#![no_main]

use heddle_proto::ProjectId;
use heddle_proto::otlp::{logs, wire};
use heddle_proto::record::{LogRecordRecord, decode_record, encode_logs};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;

fn records(req: &ExportLogsServiceRequest) -> usize {
    req.resource_logs.iter().flat_map(|rl| &rl.scope_logs).map(|sl| sl.log_records.len()).sum()
}

fn refused_by_policy(err: &str) -> bool {
    err.contains("the request has more than")
        || err.contains("of the request holds more than")
        || err.contains("groups are not part of OTLP")
}

fn check_conversion(req: &ExportLogsServiceRequest) -> logs::ConvertedLogs {
    let project = ProjectId::parse("fuzz/logs").unwrap();
    let converted = logs::convert(req, Some(&project), Some("u")).expect("a header project");
    assert_eq!(converted.logs.len() + converted.rejected as usize, records(req));
    for log in &converted.logs {
        log.check().expect("a converted record passes the consumer's checks");
    }
    let bytes = encode_logs(converted.logs.iter().cloned().map(LogRecordRecord::from).collect());
    assert_eq!(
        decode_record(&bytes).expect("a record of log records decodes").logs,
        converted.logs
    );
    let _ = converted.response();
    converted
}

fuzz_target!(|data: &[u8]| {
    let counted = wire::count_logs(data);
    let decoded = ExportLogsServiceRequest::decode(data);
    match (&counted, &decoded) {
        (Ok(c), Ok(req)) => assert_eq!(c.log_records, records(req), "count and prost disagree"),
        (Err(e), Ok(_)) => {
            let e = e.to_string();
            assert!(refused_by_policy(&e), "wire::count_logs refused what prost decodes: {e}");
        }
        _ => {}
    }
    let via_api = logs::decode_protobuf(data);
    assert_eq!(via_api.is_ok(), counted.is_ok() && decoded.is_ok());
    if let Ok(req) = via_api {
        check_conversion(&req);
    }

    if let Ok(req) = logs::decode_json(data) {
        let from_json = check_conversion(&req);
        let back =
            logs::decode_protobuf(&req.encode_to_vec()).expect("a re-encoded request decodes");
        let from_proto = check_conversion(&back);
        assert_eq!(from_json.logs, from_proto.logs, "JSON and protobuf convert differently");
    }
});
