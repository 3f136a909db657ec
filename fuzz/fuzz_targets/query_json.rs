//! The query language from arbitrary JSON bytes: `Query::parse` and typing on any value, and
//! `/calls/stream_query` and `/feedback/query` bodies through validation, planning and both SQL
//! renderers (the SQLite statements also run on a small database).
//!
//! Properties (docs/fuzzing.md): nothing panics or overflows the stack; every rendered
//! statement has one placeholder per parameter and runs on SQLite without an error.
#![no_main]

use heddle_fuzz::{calls_request, feedback_request};
use heddle_proto::calls::{CallCatalog, CallsQueryReq};
use heddle_proto::feedback::FeedbackQueryReq;
use heddle_ql::Query;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<Value>(data) else { return };
    if let Ok(q) = Query::parse(&v) {
        let _ = q.fields();
        let _ = q.typed(&CallCatalog);
    }
    if let Ok(req) = serde_json::from_value::<CallsQueryReq>(v.clone()) {
        calls_request(req, None);
    }
    if let Ok(req) = serde_json::from_value::<FeedbackQueryReq>(v) {
        feedback_request(req, None);
    }
});
