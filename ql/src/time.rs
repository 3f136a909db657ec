//! Timestamp literals: microseconds since the Unix epoch, UTC.

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use serde_json::Value;

use crate::QlError;

/// RFC 3339 with `Z` or an offset, with or without a fraction; a missing offset means UTC.
pub fn parse_micros(s: &str) -> Result<i64, QlError> {
    let s = s.trim();
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Ok(dt.timestamp_micros());
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f%:z"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(dt.and_utc().timestamp_micros());
        }
        if let Ok(dt) = DateTime::parse_from_str(s, fmt) {
            return Ok(dt.timestamp_micros());
        }
    }
    Err(QlError::invalid(format!("invalid timestamp {s:?}: expected RFC 3339")))
}

/// Also a bare date (`YYYY-MM-DD`) and unix seconds: the forms a query literal for a
/// timestamp field may take (docs/query-language.md).
pub fn parse_micros_loose(v: &Value) -> Result<i64, QlError> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.is_finite() && f.abs() < 1e13)
            .map(|secs| (secs * 1e6).round() as i64)
            .ok_or_else(|| QlError::invalid(format!("invalid unix timestamp {n}"))),
        Value::String(s) => {
            if let Ok(d) = NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d") {
                return Ok(d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_micros());
            }
            parse_micros(s)
        }
        other => Err(QlError::invalid(format!("invalid timestamp {other}"))),
    }
}
