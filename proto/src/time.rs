//! Timestamps. Stored and compared as microseconds since the Unix epoch (what the SDK sends is
//! microsecond precision); written back as RFC 3339 UTC with a `Z` offset.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ProtoError;

/// The form of [`Micros::to_rfc3339`], its digits to be filled in.
const RFC3339: &[u8; 27] = b"0000-00-00T00:00:00.000000Z";

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

    /// RFC 3339 UTC with microseconds and `Z`: `2026-11-21T19:40:18.749002Z`.
    pub fn to_rfc3339(self) -> String {
        self.with_rfc3339(str::to_owned)
    }

    /// `f` of [`Micros::to_rfc3339`]'s text, as chrono writes it. Years 0 to 9999 are
    /// written here digit by digit, their date computed without chrono and without a string of
    /// their own: an OTLP span's dump holds two timestamps (docs/benchmarks.md, "Calls staged
    /// where they are made").
    pub fn with_rfc3339<R>(self, f: impl FnOnce(&str) -> R) -> R {
        let (days, micros_of_day) =
            (self.0.div_euclid(MICROS_PER_DAY), self.0.rem_euclid(MICROS_PER_DAY));
        let (year, month, day) = civil_from_days(days);
        let Ok(year @ 0..=9999) = u32::try_from(year) else {
            return match DateTime::<Utc>::from_timestamp_micros(self.0) {
                Some(dt) => f(&dt.to_rfc3339_opts(SecondsFormat::Micros, true)),
                None => f("1970-01-01T00:00:00.000000Z"),
            };
        };
        let seconds = (micros_of_day / 1_000_000) as u32;
        let mut text = *RFC3339;
        let fields = [
            (0..4, year),
            (5..7, month),
            (8..10, day),
            (11..13, seconds / 3600),
            (14..16, seconds / 60 % 60),
            (17..19, seconds % 60),
            (20..26, (micros_of_day % 1_000_000) as u32),
        ];
        for (at, mut n) in fields {
            for digit in text[at].iter_mut().rev() {
                *digit = b'0' + (n % 10) as u8;
                n /= 10;
            }
        }
        f(std::str::from_utf8(&text).expect("digits and ASCII punctuation"))
    }
}

const MICROS_PER_DAY: i64 = 86_400 * 1_000_000;

/// The proleptic Gregorian date of a day counted from 1970-01-01, by Howard Hinnant's
/// `civil_from_days` (eras of 400 years, years starting in March so that the leap day is
/// last). Exact for every `i64` day count a timestamp in microseconds can hold.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month =
        if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
    fn timestamps_are_written_as_chrono_writes_them() {
        let chrono = |m: i64| match DateTime::<Utc>::from_timestamp_micros(m) {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::Micros, true),
            None => "1970-01-01T00:00:00.000000Z".to_owned(),
        };
        let year_one = -62_135_596_800_000_000;
        let after_9999 = 253_402_300_800_000_000;
        let mut rng = fastrand::Rng::with_seed(3339);
        let edges =
            [0, -1, 1, year_one, year_one - 1, after_9999, after_9999 - 1, i64::MIN, i64::MAX];
        let random = (0..100_000).map(|_| match rng.u8(0..3) {
            0 => rng.i64(year_one - 10_000_000..after_9999 + 10_000_000),
            1 => rng.i64(0..4_102_444_800_000_000),
            _ => rng.i64(..),
        });
        for m in edges.into_iter().chain(random) {
            assert_eq!(Micros(m).to_rfc3339(), chrono(m), "{m}");
        }
    }

    #[test]
    fn loose_forms_for_query_literals() {
        let d = Micros::parse_loose(&serde_json::json!("2026-11-21")).unwrap();
        assert_eq!(d.to_rfc3339(), "2026-11-21T00:00:00.000000Z");
        let s = Micros::parse_loose(&serde_json::json!(1_700_000_000)).unwrap();
        assert_eq!(s.0, 1_700_000_000_000_000);
    }
}
