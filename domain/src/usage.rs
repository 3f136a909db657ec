//! Token usage and cost rolled up over call trees (docs/api/usage.md): what `/trace/usage` and
//! `/calls/usage` answer, and which usage `/calls/stats` counts.
//!
//! **No double counting.** The same tokens are often recorded at more than one level of a
//! tree: the Python SDK sums each call's children's `summary.usage` into its own, and the
//! Vercel AI SDK's `ai.generateText` wrapper span carries the usage of its
//! `ai.generateText.doGenerate` child. So a call's own usage of a model counts only when no
//! descendant of it (among the calls considered) carries usage of the same model; a call's
//! rolled-up usage is the counted usage of itself and all its descendants. A leaf's usage
//! always counts, and a tree whose levels repeat the usage counts it once, at the lowest level.

use std::collections::{BTreeMap, HashMap, HashSet};

use heddle_proto::time::Micros;
use serde::Serialize;
use serde_json::Value;

use crate::prices::PriceBook;

/// One model's usage, summed (the SDK's `LLMAggregatedUsage`). Costs are present only when
/// asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
    pub cache_read_input_tokens: i64,
    pub cache_creation_input_tokens: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_total_cost: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_total_cost: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens_total_cost: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens_total_cost: Option<f64>,
}

/// Usage per model.
pub type ModelUsage = BTreeMap<String, Usage>;

fn int(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_f64).filter(|f| f.is_finite() && *f > 0.0).map_or(0, |f| f as i64)
}

fn add_cost(a: &mut Option<f64>, b: Option<f64>) {
    if let Some(b) = b {
        *a = Some(a.unwrap_or(0.0) + b);
    }
}

impl Usage {
    /// One model's entry of `summary.usage`, tokens normalised across providers (`input_tokens`
    /// counts as prompt, `output_tokens` as completion; a missing total is their sum).
    pub fn of_entry(u: &Value) -> Usage {
        let prompt_tokens = int(u, "prompt_tokens") + int(u, "input_tokens");
        let completion_tokens = int(u, "completion_tokens") + int(u, "output_tokens");
        let total = int(u, "total_tokens");
        Usage {
            requests: int(u, "requests"),
            prompt_tokens,
            completion_tokens,
            total_tokens: if total == 0 { prompt_tokens + completion_tokens } else { total },
            cache_read_input_tokens: int(u, "cache_read_input_tokens"),
            cache_creation_input_tokens: int(u, "cache_creation_input_tokens"),
            ..Usage::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.requests == 0
            && self.prompt_tokens == 0
            && self.completion_tokens == 0
            && self.total_tokens == 0
            && self.cache_read_input_tokens == 0
            && self.cache_creation_input_tokens == 0
    }

    /// Sets the costs of this usage from the price of `model` at `at` (all zero without a price).
    /// The cache parts are billed at the cache prices; `prompt_tokens_total_cost` is the rest of
    /// the input, so the four costs add up to the call's `summary.weave.costs` total.
    fn price(&mut self, book: &PriceBook, model: &str, entry: &Value, at: Micros) {
        let one = serde_json::json!({ model: entry });
        let priced = book.costs(&one, at);
        let c = priced.as_ref().and_then(|c| c.get(model));
        let f = |k: &str| c.and_then(|c| c.get(k)).and_then(Value::as_f64).unwrap_or(0.0);
        let cache_read = self.cache_read_input_tokens as f64 * f("cache_read_input_token_cost");
        let cache_creation =
            self.cache_creation_input_tokens as f64 * f("cache_creation_input_token_cost");
        self.prompt_tokens_total_cost =
            Some(f("prompt_tokens_total_cost") - cache_read - cache_creation);
        self.completion_tokens_total_cost = Some(f("completion_tokens_total_cost"));
        self.cache_read_input_tokens_total_cost = Some(cache_read);
        self.cache_creation_input_tokens_total_cost = Some(cache_creation);
    }

    pub fn add(&mut self, o: &Usage) {
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.total_tokens += o.total_tokens;
        self.cache_read_input_tokens += o.cache_read_input_tokens;
        self.cache_creation_input_tokens += o.cache_creation_input_tokens;
        add_cost(&mut self.prompt_tokens_total_cost, o.prompt_tokens_total_cost);
        add_cost(&mut self.completion_tokens_total_cost, o.completion_tokens_total_cost);
        add_cost(
            &mut self.cache_read_input_tokens_total_cost,
            o.cache_read_input_tokens_total_cost,
        );
        add_cost(
            &mut self.cache_creation_input_tokens_total_cost,
            o.cache_creation_input_tokens_total_cost,
        );
    }
}

/// What the rollup needs of a call.
#[derive(Debug, Clone)]
pub struct UsageCall {
    pub id: String,
    pub parent_id: Option<String>,
    pub started_at: Micros,
    pub ended: bool,
    /// `summary.usage` as stored (`Value::Null` when absent).
    pub usage: Value,
}

/// The calls of some trees, indexed for the rollup.
pub struct Forest {
    calls: Vec<UsageCall>,
    children: Vec<Vec<usize>>,
    /// Indexes in an order where every call comes after all of its descendants.
    bottom_up: Vec<usize>,
}

impl Forest {
    pub fn new(calls: Vec<UsageCall>) -> Forest {
        let index: HashMap<&str, usize> =
            calls.iter().enumerate().map(|(i, c)| (c.id.as_str(), i)).collect();
        let mut children = vec![Vec::new(); calls.len()];
        let mut has_parent = vec![false; calls.len()];
        for (i, c) in calls.iter().enumerate() {
            if let Some(&p) = c.parent_id.as_deref().and_then(|p| index.get(p))
                && p != i
            {
                children[p].push(i);
                has_parent[i] = true;
            }
        }
        // Depth-first from the roots, without recursion; calls on a parent cycle (only bad input
        // makes one) are reached from no root and left out of every rollup but their own.
        let mut order = Vec::with_capacity(calls.len());
        let mut seen = vec![false; calls.len()];
        let mut stack: Vec<usize> = (0..calls.len()).filter(|&i| !has_parent[i]).collect();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            order.push(i);
            stack.extend(children[i].iter().copied());
        }
        order.reverse();
        for (i, s) in seen.iter().enumerate() {
            if !s {
                order.push(i);
            }
        }
        Forest { calls, children, bottom_up: order }
    }

    pub fn calls(&self) -> &[UsageCall] {
        &self.calls
    }

    /// Each call's own usage that counts (see the module documentation), priced with `prices`
    /// when given.
    pub fn counted(&self, prices: Option<&PriceBook>) -> Vec<ModelUsage> {
        // Models carried by each call's descendants.
        let mut below: Vec<HashSet<&str>> = vec![HashSet::new(); self.calls.len()];
        let mut own: Vec<ModelUsage> = vec![ModelUsage::new(); self.calls.len()];
        for &i in &self.bottom_up {
            let call = &self.calls[i];
            let mut models = HashSet::new();
            for &c in &self.children[i] {
                models.extend(below[c].iter().copied());
                models.extend(own_models(&self.calls[c]));
            }
            if let Some(usage) = call.usage.as_object() {
                for (model, entry) in usage {
                    if models.contains(model.as_str()) || !entry.is_object() {
                        continue;
                    }
                    let mut u = Usage::of_entry(entry);
                    if u.is_empty() {
                        continue;
                    }
                    if let Some(book) = prices {
                        u.price(book, model, entry, call.started_at);
                    }
                    own[i].insert(model.clone(), u);
                }
            }
            below[i] = models;
        }
        own
    }

    /// Each call's rolled-up usage: its counted usage and that of all its descendants.
    pub fn rolled_up(&self, prices: Option<&PriceBook>) -> Vec<ModelUsage> {
        let mut total = self.counted(prices);
        for &i in &self.bottom_up {
            let mut sum = std::mem::take(&mut total[i]);
            for &c in &self.children[i] {
                for (model, u) in &total[c] {
                    sum.entry(model.clone()).or_default().add(u);
                }
            }
            total[i] = sum;
        }
        total
    }

    /// The calls in the subtree of `i` (itself included).
    pub fn subtree(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![i];
        let mut seen = HashSet::new();
        while let Some(n) = stack.pop() {
            if seen.insert(n) {
                out.push(n);
                stack.extend(self.children[n].iter().copied());
            }
        }
        out
    }
}

/// The models with non-empty usage in a call's own `summary.usage`.
fn own_models(call: &UsageCall) -> impl Iterator<Item = &str> {
    call.usage
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, e)| e.is_object() && !Usage::of_entry(e).is_empty())
        .map(|(m, _)| m.as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str, parent: Option<&str>, usage: Value) -> UsageCall {
        UsageCall {
            id: id.into(),
            parent_id: parent.map(str::to_owned),
            started_at: Micros(1_800_000_000_000_000),
            ended: true,
            usage,
        }
    }

    fn tokens(p: i64, c: i64) -> Value {
        json!({"prompt_tokens": p, "completion_tokens": c, "requests": 1})
    }

    #[test]
    fn wrapper_and_provider_spans_count_once() {
        // ai.generateText (wrapper) and ai.generateText.doGenerate (provider), same usage.
        let f = Forest::new(vec![
            call("root", None, Value::Null),
            call("wrap", Some("root"), json!({"gpt-4o": tokens(10, 5)})),
            call("gen", Some("wrap"), json!({"gpt-4o": tokens(10, 5)})),
        ]);
        let up = f.rolled_up(None);
        assert_eq!(up.len(), 3);
        for (i, u) in up.iter().enumerate() {
            assert_eq!(u["gpt-4o"].prompt_tokens, 10, "call {i}");
            assert_eq!(u["gpt-4o"].total_tokens, 15);
            assert_eq!(u["gpt-4o"].requests, 1);
        }
    }

    #[test]
    fn python_sdk_rollups_count_the_leaves_and_other_models_still_count() {
        // The SDK sums children into the parent; the parent also used another model itself.
        let f = Forest::new(vec![
            call("p", None, json!({"m": tokens(3, 3), "other": tokens(1, 0)})),
            call("a", Some("p"), json!({"m": tokens(1, 1)})),
            call("b", Some("p"), json!({"m": {"input_tokens": 2, "output_tokens": 2}})),
        ]);
        let up = f.rolled_up(None);
        assert_eq!(up[0]["m"].prompt_tokens, 3);
        assert_eq!(up[0]["m"].completion_tokens, 3);
        assert_eq!(up[0]["other"].prompt_tokens, 1);
        assert_eq!(up[2]["m"].prompt_tokens, 2);
        assert!(!up[1].contains_key("other"));
    }

    #[test]
    fn parent_cycles_and_self_parents_do_not_loop() {
        let f = Forest::new(vec![
            call("a", Some("b"), json!({"m": tokens(1, 0)})),
            call("b", Some("a"), json!({"m": tokens(1, 0)})),
            call("c", Some("c"), json!({"m": tokens(4, 0)})),
        ]);
        let up = f.rolled_up(None);
        assert_eq!(up[2]["m"].prompt_tokens, 4);
        assert_eq!(up.len(), 3);
    }

    #[test]
    fn costs_split_into_cache_and_the_rest() {
        use heddle_proto::ProjectId;
        use heddle_proto::costs::CostRecord;
        let book = PriceBook::new(vec![CostRecord {
            id: "x".into(),
            project: ProjectId::parse("e/p").unwrap(),
            llm_id: "m".into(),
            provider_id: "default".into(),
            prompt_token_cost: 1.0,
            completion_token_cost: 2.0,
            prompt_token_cost_unit: "USD".into(),
            completion_token_cost_unit: "USD".into(),
            cache_read_input_token_cost: 0.5,
            cache_creation_input_token_cost: 4.0,
            effective_date: Micros(0),
            created_at: Micros(0),
            created_by: None,
        }]);
        let f = Forest::new(vec![call(
            "a",
            None,
            json!({"m": {"input_tokens": 10, "output_tokens": 1,
                         "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2}}),
        )]);
        let u = &f.rolled_up(Some(&book))[0]["m"];
        assert_eq!(u.prompt_tokens_total_cost, Some(10.0));
        assert_eq!(u.cache_read_input_tokens_total_cost, Some(2.0));
        assert_eq!(u.cache_creation_input_tokens_total_cost, Some(8.0));
        assert_eq!(u.completion_tokens_total_cost, Some(2.0));
    }
}
