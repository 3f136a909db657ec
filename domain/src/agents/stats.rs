//! `/agents/spans/stats` (docs/api/agents.md#stats): metrics of the spans started in
//! `[start, end)`, per time bucket and per group, as chart-ready rows.

use std::collections::BTreeMap;

use heddle_ql::eval::Val;
use serde_json::{Map, Value, json};

use super::catalog::SpanField;
use super::requests::{
    DEFAULT_STATS_GROUP_LIMIT, MAX_SPEC_TERMS, MAX_STATS_BUCKETS, MAX_STATS_GROUP_LIMIT,
    MAX_STATS_RANGE_DAYS, SpanStatsReq, check_alias, check_insight_filters, check_signal_filters,
};
use super::span::AgentSpan;
use super::views::{aggregate, percentile, val_json};
use heddle_proto::ProtoError;
use heddle_proto::time::Micros;

const DAY_MICROS: i64 = 86_400_000_000;

/// A checked stats request.
pub struct StatsPlan {
    pub start: Micros,
    pub end: Micros,
    pub granularity_s: i64,
    pub group_by: Vec<(SpanField, String)>,
    pub group_limit: usize,
    pub metrics: Vec<Metric>,
}

pub struct Metric {
    alias: String,
    field: SpanField,
    value_type: String,
    aggregations: Vec<String>,
    percentiles: Vec<f64>,
}

impl StatsPlan {
    pub fn new(req: &SpanStatsReq, now: Micros) -> Result<StatsPlan, ProtoError> {
        check_signal_filters(&req.signal_filters)?;
        check_insight_filters(&req.insight_filters)?;
        if req
            .bucket_by
            .as_ref()
            .is_some_and(|b| b.get("type").and_then(Value::as_str) == Some("number"))
        {
            return Err(ProtoError::invalid("numeric bucket_by is not supported"));
        }
        if req.group_filters.as_ref().is_some_and(|g| !g.is_empty()) {
            return Err(ProtoError::invalid("group_filters are not supported in stats"));
        }
        match req.timezone.as_deref() {
            None | Some("UTC" | "Etc/UTC" | "utc") => {}
            Some(tz) => {
                return Err(ProtoError::invalid(format!(
                    "timezone {tz:?} is not supported: buckets are aligned in UTC"
                )));
            }
        }
        let end = req.end.unwrap_or(now);
        if end < req.start {
            return Err(ProtoError::invalid("end must be after start"));
        }
        if end.0 - req.start.0 > MAX_STATS_RANGE_DAYS * DAY_MICROS {
            return Err(ProtoError::invalid(format!(
                "the date range cannot exceed {MAX_STATS_RANGE_DAYS} days"
            )));
        }
        let range_s = (end.0 - req.start.0) / 1_000_000;
        let granularity_s = match req.granularity {
            Some(g) if g <= 0 => return Err(ProtoError::invalid("granularity must be > 0")),
            Some(g) => g,
            // About a hundred buckets, rounded to a minute, an hour or a day.
            None => [60, 300, 900, 3600, 21_600, 86_400]
                .into_iter()
                .find(|g| range_s / g <= 100)
                .unwrap_or(86_400),
        };
        if range_s / granularity_s >= MAX_STATS_BUCKETS {
            return Err(ProtoError::invalid(format!(
                "at most {MAX_STATS_BUCKETS} buckets: raise granularity"
            )));
        }
        let group_by = req.group_by.as_deref().unwrap_or_default();
        let metrics = req.metrics.as_deref().unwrap_or_default();
        if group_by.len() > MAX_SPEC_TERMS || metrics.len() > MAX_SPEC_TERMS {
            return Err(ProtoError::invalid(format!(
                "at most {MAX_SPEC_TERMS} group_by refs and metrics"
            )));
        }
        if metrics.is_empty() {
            return Err(ProtoError::invalid("at least one metric is required"));
        }
        let group_limit = match req.group_limit {
            None => DEFAULT_STATS_GROUP_LIMIT,
            Some(n) if n < 1 || n as u64 > MAX_STATS_GROUP_LIMIT => {
                return Err(ProtoError::invalid(format!(
                    "group_limit must be between 1 and {MAX_STATS_GROUP_LIMIT}"
                )));
            }
            Some(n) => n as u64,
        } as usize;
        let mut plan_metrics = Vec::new();
        for m in metrics {
            check_alias(&m.alias)?;
            if plan_metrics.iter().any(|p: &Metric| p.alias == m.alias) {
                return Err(ProtoError::invalid(format!("duplicate metric alias {:?}", m.alias)));
            }
            let field = m.value.resolve()?;
            let allowed: &[&str] = match m.value_type.as_str() {
                "number" => &["sum", "avg", "min", "max", "count", "count_distinct"],
                "boolean" => &["count", "count_distinct", "count_true", "count_false"],
                "string" => &["count", "count_distinct"],
                "datetime" => &["min", "max", "count", "count_distinct"],
                t => return Err(ProtoError::invalid(format!("unknown value_type {t:?}"))),
            };
            if let Some(bad) = m.aggregations.iter().find(|a| !allowed.contains(&a.as_str())) {
                return Err(ProtoError::invalid(format!(
                    "aggregation {bad:?} is not valid for value_type {:?}",
                    m.value_type
                )));
            }
            if m.percentiles.len() > MAX_SPEC_TERMS
                || m.percentiles.iter().any(|p| !(0.0..=100.0).contains(p))
            {
                return Err(ProtoError::invalid("percentiles must be between 0 and 100"));
            }
            if !m.percentiles.is_empty() && m.value_type != "number" {
                return Err(ProtoError::invalid("percentiles are only valid for number metrics"));
            }
            let mut aggregations = m.aggregations.clone();
            if aggregations.is_empty() && m.percentiles.is_empty() {
                let default = if m.value_type == "number" { "sum" } else { "count" };
                aggregations.push(default.to_owned());
            }
            plan_metrics.push(Metric {
                alias: m.alias.clone(),
                field,
                value_type: m.value_type.clone(),
                aggregations,
                percentiles: m.percentiles.clone(),
            });
        }
        Ok(StatsPlan {
            start: req.start,
            end,
            granularity_s,
            group_by: group_by.iter().map(|g| g.resolve()).collect::<Result<_, _>>()?,
            group_limit,
            metrics: plan_metrics,
        })
    }

    /// `p95` for 95, `p99_9` for 99.9.
    fn percentile_name(alias: &str, p: f64) -> String {
        let p = if p.fract() == 0.0 {
            format!("{}", p as i64)
        } else {
            p.to_string().replace('.', "_")
        };
        format!("{alias}_p{p}")
    }

    /// The `columns` of the answer.
    pub fn columns(&self) -> Vec<Value> {
        let mut cols = vec![json!({"name": "timestamp", "role": "time", "value_type": "datetime",
                                   "metric": null, "aggregation": null})];
        for (f, alias) in &self.group_by {
            let t = match f.value_type() {
                heddle_ql::ValueType::Int | heddle_ql::ValueType::Float => "number",
                heddle_ql::ValueType::Bool => "boolean",
                heddle_ql::ValueType::Timestamp => "datetime",
                _ => "string",
            };
            cols.push(json!({"name": alias, "role": "group", "value_type": t,
                             "metric": null, "aggregation": null}));
        }
        for m in &self.metrics {
            for a in &m.aggregations {
                let t = match a.as_str() {
                    "count" | "count_distinct" | "count_true" | "count_false" | "sum" | "avg" => {
                        "number"
                    }
                    _ => m.value_type.as_str(),
                };
                cols.push(json!({"name": format!("{}_{a}", m.alias), "role": "metric",
                                 "value_type": t, "metric": m.alias, "aggregation": a}));
            }
            for p in &m.percentiles {
                cols.push(json!({"name": Self::percentile_name(&m.alias, *p), "role": "metric",
                                 "value_type": "number", "metric": m.alias,
                                 "aggregation": format!("p{p}")}));
            }
        }
        cols
    }

    /// Rows for the buckets and groups that have spans, by bucket then group. With `group_by`,
    /// only the `group_limit` groups with the most spans are kept.
    pub fn rows(&self, spans: &[AgentSpan]) -> Vec<Value> {
        let g = self.granularity_s * 1_000_000;
        let in_range: Vec<&AgentSpan> = spans
            .iter()
            .filter(|s| s.started_at.is_some_and(|t| t >= self.start && t < self.end))
            .collect();
        let key = |s: &AgentSpan| -> Vec<Value> {
            self.group_by.iter().map(|(f, _)| val_json(s.value(f))).collect()
        };
        let mut sizes: BTreeMap<String, (Vec<Value>, usize)> = BTreeMap::new();
        for s in &in_range {
            let k = key(s);
            sizes.entry(Value::Array(k.clone()).to_string()).or_insert((k, 0)).1 += 1;
        }
        let mut kept: Vec<(String, usize)> =
            sizes.iter().map(|(k, (_, n))| (k.clone(), *n)).collect();
        kept.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        kept.truncate(self.group_limit);
        let kept: std::collections::BTreeSet<String> = kept.into_iter().map(|(k, _)| k).collect();
        let mut cells: BTreeMap<(i64, String), Vec<&AgentSpan>> = BTreeMap::new();
        for s in in_range {
            let k = Value::Array(key(s)).to_string();
            if !kept.contains(&k) {
                continue;
            }
            let t = s.started_at.expect("filtered on started_at").0;
            cells.entry((t.div_euclid(g) * g, k)).or_default().push(s);
        }
        cells
            .into_iter()
            .map(|((bucket, k), members)| {
                let mut row = Map::new();
                row.insert("timestamp".into(), Micros(bucket).to_rfc3339().into());
                let keys = &sizes[&k].0;
                for ((_, alias), v) in self.group_by.iter().zip(keys) {
                    row.insert(alias.clone(), v.clone());
                }
                for m in &self.metrics {
                    let values: Vec<Val> = members.iter().map(|s| s.value(&m.field)).collect();
                    for a in &m.aggregations {
                        let v = aggregate(a, &values, m.value_type == "datetime");
                        row.insert(format!("{}_{a}", m.alias), v);
                    }
                    for p in &m.percentiles {
                        row.insert(Self::percentile_name(&m.alias, *p), percentile(&values, *p));
                    }
                }
                Value::Object(row)
            })
            .collect()
    }
}
