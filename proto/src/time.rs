//! Timestamps. Stored and compared as microseconds since the Unix epoch (what the SDK sends is
//! microsecond precision); written back as RFC 3339 UTC with a `Z` offset.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ProtoError;

/// Microseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(pub i64);

impl Micros {
    pub fn now() -> Self {
        Micros(Utc::now().timestamp_micros())
    }

    /// Accepts RFC 3339 with `Z` or an offset, with or without a fraction; a missing offset means
    /// UTC (docs/api/README.md#timestamps).
    pub fn parse(s: &str) -> Result<Self, ProtoError> {
        Ok(Micros(heddle_ql::time::parse_micros(s)?))
    }

    /// Also accepts a bare date (`YYYY-MM-DD`) and unix seconds: the forms a query literal for
    /// `started_at`/`ended_at` may take (docs/query-language.md).
    pub fn parse_loose(v: &serde_json::Value) -> Result<Self, ProtoError> {
        Ok(Micros(heddle_ql::time::parse_micros_loose(v)?))
    }

    pub fn to_rfc3339(self) -> String {
        match DateTime::<Utc>::from_timestamp_micros(self.0) {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::Micros, true),
            None => "1970-01-01T00:00:00.000000Z".to_owned(),
        }
    }
}

impl Serialize for Micros {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Micros::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_clients_send() {
        let z = Micros::parse("2026-11-21T19:40:18.749002Z").unwrap();
        assert_eq!(Micros::parse("2026-11-21T19:40:18.749002+00:00").unwrap(), z);
        assert_eq!(Micros::parse("2026-11-21T19:40:18.749002").unwrap(), z);
        assert_eq!(Micros::parse("2026-11-21T20:40:18.749002+01:00").unwrap(), z);
        assert_eq!(z.to_rfc3339(), "2026-11-21T19:40:18.749002Z");
        assert_eq!(Micros::parse("2026-11-21T19:40:18Z").unwrap().0 % 1_000_000, 0);
        assert!(Micros::parse("yesterday").is_err());
    }

    #[test]
    fn loose_forms_for_query_literals() {
        let d = Micros::parse_loose(&serde_json::json!("2026-11-21")).unwrap();
        assert_eq!(d.to_rfc3339(), "2026-11-21T00:00:00.000000Z");
        let s = Micros::parse_loose(&serde_json::json!(1_700_000_000)).unwrap();
        assert_eq!(s.0, 1_700_000_000_000_000);
    }
}
