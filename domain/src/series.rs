//! Time series of aggregated values, shared by `/calls/stats` and `/feedback/stats`
//! (docs/api/usage.md#time-buckets): the time window and its buckets, and the aggregations of
//! the values that fall in one bucket.

use heddle_proto::ProtoError;
use heddle_proto::time::Micros;
use serde_json::{Map, Value, json};

/// Most buckets one answer holds; a finer granularity is coarsened to fit.
pub const MAX_BUCKETS: i64 = 10_000;

const SECOND: i64 = 1_000_000;

/// The resolved window `[start, end)` and its buckets of `granularity` seconds, aligned to
/// multiples of the granularity since the epoch in the requested timezone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: Micros,
    pub end: Micros,
    pub granularity: i64,
    /// The timezone's offset from UTC, in seconds.
    offset: i64,
}

/// The bucket size when the request names none, by the window's length (as the hosted
/// service picks it).
fn auto_granularity(span_s: i64) -> i64 {
    match span_s {
        s if s <= 2 * 3600 => 300,
        s if s <= 12 * 3600 => 3600,
        s if s <= 3 * 86_400 => 6 * 3600,
        s if s <= 14 * 86_400 => 12 * 3600,
        _ => 86_400,
    }
}

/// The offset of a timezone heddle can align to: UTC and its aliases, or a fixed offset
/// `+HH:MM` / `-HH:MM`. Named zones with daylight saving would need a zone database.
pub fn timezone_offset(tz: &str) -> Result<i64, ProtoError> {
    if ["UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "utc"].contains(&tz) {
        return Ok(0);
    }
    let bad = || {
        ProtoError::invalid(format!(
            "timezone {tz:?} is not supported: use \"UTC\" or a fixed offset such as \"+05:30\""
        ))
    };
    let (sign, rest) = match tz.as_bytes().first() {
        Some(b'+') => (1, &tz[1..]),
        Some(b'-') => (-1, &tz[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let (h, m): (i64, i64) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 14 || m > 59 {
        return Err(bad());
    }
    Ok(sign * (h * 3600 + m * 60))
}

impl Window {
    /// `end` defaults to now; `granularity` (seconds, > 0) to one chosen by the window's length,
    /// coarsened to at most [`MAX_BUCKETS`] buckets.
    pub fn new(
        start: Micros,
        end: Option<Micros>,
        granularity: Option<i64>,
        timezone: &str,
    ) -> Result<Window, ProtoError> {
        let end = end.unwrap_or_else(Micros::now);
        if end.0 <= start.0 {
            return Err(ProtoError::invalid("end must be after start"));
        }
        let span_s = (end.0 - start.0 + SECOND - 1) / SECOND;
        let mut granularity = match granularity {
            Some(g) if g <= 0 => {
                return Err(ProtoError::invalid(format!("granularity must be > 0, got {g}")));
            }
            Some(g) => g,
            None => auto_granularity(span_s),
        };
        if span_s / granularity > MAX_BUCKETS {
            granularity = span_s / MAX_BUCKETS + 1;
        }
        Ok(Window { start, end, granularity, offset: timezone_offset(timezone)? })
    }

    pub fn contains(&self, t: Micros) -> bool {
        self.start.0 <= t.0 && t.0 < self.end.0
    }

    /// The start of the bucket holding `t`.
    pub fn bucket(&self, t: Micros) -> Micros {
        let g = self.granularity * SECOND;
        let local = t.0 + self.offset * SECOND;
        Micros(local.div_euclid(g) * g - self.offset * SECOND)
    }
}

/// An aggregation of a metric's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    Sum,
    Avg,
    Min,
    Max,
    Count,
    CountTrue,
    CountFalse,
}

impl Agg {
    pub fn parse(s: &str) -> Result<Agg, ProtoError> {
        Ok(match s {
            "sum" => Agg::Sum,
            "avg" => Agg::Avg,
            "min" => Agg::Min,
            "max" => Agg::Max,
            "count" => Agg::Count,
            "count_true" => Agg::CountTrue,
            "count_false" => Agg::CountFalse,
            _ => {
                return Err(ProtoError::invalid(format!(
                    "unknown aggregation {s:?}: expected sum, avg, min, max, count, count_true \
                     or count_false"
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Agg::Sum => "sum",
            Agg::Avg => "avg",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Count => "count",
            Agg::CountTrue => "count_true",
            Agg::CountFalse => "count_false",
        }
    }
}

/// Which aggregations and percentiles of one metric to compute.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    pub aggs: Vec<Agg>,
    /// In `[0, 100]`.
    pub percentiles: Vec<f64>,
}

impl MetricSpec {
    pub fn new(aggs: &[String], percentiles: &[f64]) -> Result<MetricSpec, ProtoError> {
        if let Some(p) = percentiles.iter().find(|p| !(0.0..=100.0).contains(*p)) {
            return Err(ProtoError::invalid(format!("percentile {p} is not within 0..100")));
        }
        if aggs.len() + percentiles.len() > 32 {
            return Err(ProtoError::invalid("at most 32 aggregations and percentiles per metric"));
        }
        Ok(MetricSpec {
            aggs: aggs.iter().map(|a| Agg::parse(a)).collect::<Result<_, _>>()?,
            percentiles: percentiles.to_vec(),
        })
    }

    /// Adds `{agg}_{slug}` and `p{p}_{slug}` for `values` to `out`. `integral`: the values are
    /// whole numbers (sums, minima and maxima are written as integers). No values: `count` is 0,
    /// the rest null.
    pub fn write(
        &self,
        slug: &str,
        values: &mut [f64],
        integral: bool,
        out: &mut Map<String, Value>,
    ) {
        let num = |x: f64| if integral { json!(x as i64) } else { json!(x) };
        let empty = values.is_empty();
        for &agg in &self.aggs {
            let v = match agg {
                Agg::Count => json!(values.len()),
                Agg::CountTrue => json!(values.iter().filter(|v| **v != 0.0).count()),
                Agg::CountFalse => json!(values.iter().filter(|v| **v == 0.0).count()),
                _ if empty => Value::Null,
                Agg::Sum => num(values.iter().sum()),
                Agg::Avg => json!(values.iter().sum::<f64>() / values.len() as f64),
                Agg::Min => num(values.iter().copied().fold(f64::INFINITY, f64::min)),
                Agg::Max => num(values.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            };
            out.insert(format!("{}_{slug}", agg.name()), v);
        }
        if !self.percentiles.is_empty() {
            values.sort_by(f64::total_cmp);
        }
        for &p in &self.percentiles {
            out.insert(
                format!("p{}_{slug}", percentile_name(p)),
                crate::quantile::quantile(values, p / 100.0).map_or(Value::Null, |v| json!(v)),
            );
        }
    }
}

/// `50` for 50.0, `99.5` for 99.5.
fn percentile_name(p: f64) -> String {
    if p.fract() == 0.0 { format!("{}", p as i64) } else { format!("{p}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Micros {
        Micros::parse(s).unwrap()
    }

    #[test]
    fn buckets_align_to_the_granularity_in_the_timezone() {
        let w = Window::new(
            t("2026-01-01T00:00:00Z"),
            Some(t("2026-01-02T00:00:00Z")),
            Some(3600),
            "UTC",
        )
        .unwrap();
        assert_eq!(w.bucket(t("2026-01-01T05:59:59Z")), t("2026-01-01T05:00:00Z"));
        let w = Window::new(w.start, Some(w.end), Some(86_400), "+05:30").unwrap();
        assert_eq!(w.bucket(t("2026-01-01T20:00:00Z")), t("2026-01-01T18:30:00Z"));
        assert!(Window::new(w.start, Some(w.end), None, "America/New_York").is_err());
        assert!(Window::new(w.end, Some(w.start), None, "UTC").is_err());
        assert!(Window::new(w.start, Some(w.end), Some(0), "UTC").is_err());
        // A day of 1-second buckets would be 86,400 buckets: coarsened.
        let w = Window::new(w.start, Some(w.end), Some(1), "UTC").unwrap();
        assert_eq!(w.granularity, 9);
        assert_eq!(Window::new(w.start, Some(w.end), None, "UTC").unwrap().granularity, 6 * 3600);
    }

    #[test]
    fn aggregations_and_percentiles() {
        let spec = MetricSpec::new(
            &["sum".into(), "avg".into(), "min".into(), "max".into(), "count".into()],
            &[50.0, 87.5],
        )
        .unwrap();
        let mut out = Map::new();
        spec.write("latency_ms", &mut [30.0, 10.0, 20.0, 40.0], true, &mut out);
        assert_eq!(
            Value::Object(out),
            json!({"sum_latency_ms": 100, "avg_latency_ms": 25.0, "min_latency_ms": 10,
                   "max_latency_ms": 40, "count_latency_ms": 4, "p50_latency_ms": 25.0,
                   "p87.5_latency_ms": 36.25})
        );
        let mut out = Map::new();
        spec.write("x", &mut [], false, &mut out);
        assert_eq!(out["sum_x"], Value::Null);
        assert_eq!(out["count_x"], json!(0));
        assert!(MetricSpec::new(&["median".into()], &[]).is_err());
        assert!(MetricSpec::new(&[], &[101.0]).is_err());
    }
}
