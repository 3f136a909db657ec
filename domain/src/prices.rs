//! Call costs: the prices that apply to a project's calls (its own, then the built-in table
//! `data/prices.json`) and the `summary.weave.costs` they give a call's token usage
//! (docs/api/costs.md). Prices are loaded once per request ([`PriceBook`]) after a page of
//! calls is fetched, identically for every backend.

use std::collections::HashMap;
use std::sync::LazyLock;

use heddle_proto::ProjectId;
use heddle_proto::costs::CostRecord;
use heddle_proto::time::Micros;
use serde::Deserialize;
use serde_json::{Map, Value, json};
// Call costs

/// Where a price comes from: the project, or the built-in table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Project,
    Default,
}

#[derive(Debug, Clone)]
struct Price {
    level: Level,
    record: CostRecord,
}

/// The built-in price table, `data/prices.json` (per million tokens, USD).
#[derive(Deserialize)]
struct PriceFile {
    prices: Vec<PriceEntry>,
}

#[derive(Deserialize)]
struct PriceEntry {
    llm_id: String,
    provider_id: String,
    effective_date: String,
    input: f64,
    output: f64,
    #[serde(default)]
    cache_read: f64,
    #[serde(default)]
    cache_write: f64,
}

static BUILTIN: LazyLock<Vec<CostRecord>> = LazyLock::new(|| {
    let file: PriceFile = serde_json::from_str(include_str!("../data/prices.json"))
        .expect("data/prices.json is valid (checked by a test)");
    let project = ProjectId::parse("default/default").expect("valid");
    file.prices
        .into_iter()
        .map(|p| {
            let effective_date = Micros::parse_loose(&Value::String(p.effective_date.clone()))
                .expect("data/prices.json dates are valid (checked by a test)");
            CostRecord {
                id: format!("default:{}:{}", p.llm_id, p.effective_date),
                project: project.clone(),
                llm_id: p.llm_id,
                provider_id: p.provider_id,
                prompt_token_cost: p.input / 1e6,
                completion_token_cost: p.output / 1e6,
                prompt_token_cost_unit: "USD".into(),
                completion_token_cost_unit: "USD".into(),
                cache_read_input_token_cost: p.cache_read / 1e6,
                cache_creation_input_token_cost: p.cache_write / 1e6,
                effective_date,
                created_at: effective_date,
                created_by: Some("system".into()),
            }
        })
        .collect()
});

/// The prices that apply to one project's calls: its own, then the built-in defaults.
#[derive(Debug, Clone, Default)]
pub struct PriceBook {
    by_llm: HashMap<String, Vec<Price>>,
}

impl PriceBook {
    pub fn new(project_prices: Vec<CostRecord>) -> PriceBook {
        let mut by_llm: HashMap<String, Vec<Price>> = HashMap::new();
        let all = project_prices
            .into_iter()
            .map(|record| Price { level: Level::Project, record })
            .chain(BUILTIN.iter().map(|r| Price { level: Level::Default, record: r.clone() }));
        for p in all {
            by_llm.entry(p.record.llm_id.clone()).or_default().push(p);
        }
        // Best first: project before default, then the newest effective date.
        for prices in by_llm.values_mut() {
            prices.sort_by(|a, b| {
                a.level
                    .cmp(&b.level)
                    .then(b.record.effective_date.cmp(&a.record.effective_date))
                    .then(b.record.created_at.cmp(&a.record.created_at))
            });
        }
        PriceBook { by_llm }
    }

    /// The price of `llm_id` for a call started at `at`: the best level that has a price
    /// effective at `at`, and within it the newest such price.
    fn price(&self, llm_id: &str, at: Micros) -> Option<&Price> {
        self.by_llm.get(llm_id)?.iter().find(|p| p.record.effective_date <= at)
    }

    /// `summary.weave.costs` for a call's `summary.usage`, or `None` when no model in it has a
    /// price. Token keys: `prompt_tokens`/`input_tokens`, `completion_tokens`/`output_tokens`,
    /// `cache_read_input_tokens`, `cache_creation_input_tokens` (Anthropic: counted apart from
    /// the input tokens) and OpenAI's `prompt_tokens_details.cached_tokens` (a part of the prompt
    /// tokens, billed at the cache-read price when there is one).
    pub fn costs(&self, usage: &Value, started_at: Micros) -> Option<Value> {
        let usage = usage.as_object()?;
        let mut out = Map::new();
        for (llm_id, u) in usage {
            let Some(price) = self.price(llm_id, started_at) else { continue };
            let int = |k: &str| u.get(k).and_then(Value::as_f64).unwrap_or(0.0).max(0.0);
            let prompt = int("prompt_tokens") + int("input_tokens");
            let completion = int("completion_tokens") + int("output_tokens");
            let cache_read = int("cache_read_input_tokens");
            let cache_creation = int("cache_creation_input_tokens");
            let cached_part = ["prompt_tokens_details", "input_tokens_details"]
                .iter()
                .filter_map(|k| u.get(*k)?.get("cached_tokens")?.as_f64())
                .sum::<f64>()
                .clamp(0.0, prompt);
            let r = &price.record;
            let (uncached, cached_at) = if r.cache_read_input_token_cost > 0.0 {
                (prompt - cached_part, cached_part)
            } else {
                (prompt, 0.0)
            };
            let prompt_total = uncached * r.prompt_token_cost
                + (cached_at + cache_read) * r.cache_read_input_token_cost
                + cache_creation * r.cache_creation_input_token_cost;
            let mut row = Map::new();
            row.insert("prompt_tokens".into(), json!(prompt as i64));
            row.insert("completion_tokens".into(), json!(completion as i64));
            row.insert("requests".into(), json!(int("requests") as i64));
            row.insert("total_tokens".into(), json!(int("total_tokens") as i64));
            for k in ["input_tokens", "output_tokens"] {
                if let Some(v) = u.get(k) {
                    row.insert(k.into(), v.clone());
                }
            }
            row.insert("cache_read_input_tokens".into(), json!(cache_read as i64));
            row.insert("cache_creation_input_tokens".into(), json!(cache_creation as i64));
            row.insert("prompt_tokens_total_cost".into(), json!(prompt_total));
            row.insert(
                "completion_tokens_total_cost".into(),
                json!(completion * r.completion_token_cost),
            );
            row.insert("prompt_token_cost".into(), json!(r.prompt_token_cost));
            row.insert("completion_token_cost".into(), json!(r.completion_token_cost));
            row.insert("cache_read_input_token_cost".into(), json!(r.cache_read_input_token_cost));
            row.insert(
                "cache_creation_input_token_cost".into(),
                json!(r.cache_creation_input_token_cost),
            );
            row.insert("prompt_token_cost_unit".into(), json!(r.prompt_token_cost_unit));
            row.insert("completion_token_cost_unit".into(), json!(r.completion_token_cost_unit));
            row.insert("effective_date".into(), json!(r.effective_date));
            row.insert("provider_id".into(), json!(r.provider_id));
            let (level, level_id) = match price.level {
                Level::Project => ("project", r.project.as_str()),
                Level::Default => ("default", "default"),
            };
            row.insert("pricing_level".into(), json!(level));
            row.insert("pricing_level_id".into(), json!(level_id));
            row.insert("created_at".into(), json!(r.created_at));
            row.insert("created_by".into(), json!(r.created_by));
            out.insert(llm_id.clone(), Value::Object(row));
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    /// Adds `summary.weave.costs` to a derived summary (see [`heddle_proto::calls::derive_summary`]).
    pub fn add_costs(&self, summary: &mut Value, started_at: Micros) {
        let Some(costs) = summary.get("usage").and_then(|u| self.costs(u, started_at)) else {
            return;
        };
        if let Some(weave) = summary.get_mut("weave").and_then(Value::as_object_mut) {
            weave.insert("costs".into(), costs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> ProjectId {
        ProjectId::parse("e/p").unwrap()
    }

    fn record(id: &str, llm: &str, date: &str, prompt: f64) -> CostRecord {
        CostRecord {
            id: id.into(),
            project: project(),
            llm_id: llm.into(),
            provider_id: "default".into(),
            prompt_token_cost: prompt,
            completion_token_cost: 2.0 * prompt,
            prompt_token_cost_unit: "USD".into(),
            completion_token_cost_unit: "USD".into(),
            cache_read_input_token_cost: 0.0,
            cache_creation_input_token_cost: 0.0,
            effective_date: Micros::parse_loose(&json!(date)).unwrap(),
            created_at: Micros(0),
            created_by: None,
        }
    }

    #[test]
    fn builtin_table_loads_with_cache_prices() {
        assert!(BUILTIN.len() > 20);
        let sonnet = BUILTIN.iter().find(|r| r.llm_id == "claude-3-5-sonnet-20241022").unwrap();
        assert!(sonnet.cache_read_input_token_cost > 0.0);
        assert!(sonnet.cache_creation_input_token_cost > sonnet.prompt_token_cost);
    }

    #[test]
    fn newest_effective_price_at_call_start_wins_and_project_beats_default() {
        let book = PriceBook::new(vec![
            record("old", "m", "2024-01-01", 1.0),
            record("new", "m", "2025-01-01", 10.0),
            record("gpt", "gpt-4o", "2020-01-01", 100.0),
        ]);
        let usage = json!({"m": {"prompt_tokens": 2, "completion_tokens": 3, "requests": 1},
                           "gpt-4o": {"input_tokens": 1, "output_tokens": 1},
                           "unknown-model": {"prompt_tokens": 5}});
        let at = |d: &str| Micros::parse_loose(&json!(d)).unwrap();
        let c = book.costs(&usage, at("2024-06-01")).unwrap();
        assert_eq!(c["m"]["prompt_tokens_total_cost"], json!(2.0));
        assert_eq!(c["m"]["completion_tokens_total_cost"], json!(6.0));
        assert_eq!(c["m"]["pricing_level"], json!("project"));
        assert_eq!(c["gpt-4o"]["prompt_token_cost"], json!(100.0), "project overrides default");
        assert!(c.get("unknown-model").is_none());
        let c = book.costs(&usage, at("2025-06-01")).unwrap();
        assert_eq!(c["m"]["prompt_tokens_total_cost"], json!(20.0));
        // Before any project price of m: no cost for m (no default price for it either).
        let c = book.costs(&usage, at("2023-01-01"));
        assert!(c.is_none_or(|c| c.get("m").is_none()));
    }

    #[test]
    fn cache_tokens_are_billed_at_cache_prices() {
        let mut r = record("c", "m", "2024-01-01", 1.0);
        r.cache_read_input_token_cost = 0.1;
        r.cache_creation_input_token_cost = 1.25;
        let book = PriceBook::new(vec![r]);
        let at = Micros::parse_loose(&json!("2025-01-01")).unwrap();
        let anthropic = json!({"m": {"input_tokens": 10, "output_tokens": 1,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 4}});
        let c = book.costs(&anthropic, at).unwrap();
        let total = c["m"]["prompt_tokens_total_cost"].as_f64().unwrap();
        assert!((total - (10.0 + 10.0 + 5.0)).abs() < 1e-9, "{total}");
        let openai = json!({"m": {"prompt_tokens": 10, "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 4}}});
        let total =
            book.costs(&openai, at).unwrap()["m"]["prompt_tokens_total_cost"].as_f64().unwrap();
        assert!((total - (6.0 + 0.4)).abs() < 1e-9, "{total}");
    }
}
