//! Costs (docs/api/costs.md, docs/api/calls.md#call-object): the `/cost/*` request bodies, the
//! stored price row, the query language over prices, and the derived `summary.weave.costs` of a
//! call.
//!
//! Prices are few per project (one row per model and effective date), so `/cost/query` and
//! `/cost/purge` load a project's prices and evaluate the query here, in Rust, identically for
//! every backend; storage only stores, lists and deletes rows by id. Call costs are likewise
//! computed after a page of calls is fetched, with the prices loaded once per request
//! ([`PriceBook`]): project prices override the built-in table `data/prices.json`.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::time::Micros;
use heddle_ql::eval::{Cell, Row, Val, eval, sort_rows};
use heddle_ql::{Catalog, CmpOp, Direction, Query, SortBy, TExpr, ValueType};

// ---------------------------------------------------------------------------------------------
// Requests

#[derive(Debug, Clone, Deserialize)]
pub struct CostInput {
    pub prompt_token_cost: f64,
    pub completion_token_cost: f64,
    pub prompt_token_cost_unit: Option<String>,
    pub completion_token_cost_unit: Option<String>,
    pub effective_date: Option<Micros>,
    pub provider_id: Option<String>,
    pub cache_read_input_token_cost: Option<f64>,
    pub cache_creation_input_token_cost: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CostCreateReq {
    pub project_id: ProjectId,
    pub costs: serde_json::Map<String, Value>,
    pub wb_user_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CostQueryReq {
    pub project_id: ProjectId,
    pub fields: Option<Vec<String>>,
    pub query: Option<Query>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CostPurgeReq {
    pub project_id: ProjectId,
    pub query: Query,
}

// ---------------------------------------------------------------------------------------------
// The stored price

/// One price of a model: per-token costs effective from `effective_date`.
#[derive(Debug, Clone, PartialEq)]
pub struct CostRecord {
    pub id: String,
    pub project: ProjectId,
    pub llm_id: String,
    pub provider_id: String,
    pub prompt_token_cost: f64,
    pub completion_token_cost: f64,
    pub prompt_token_cost_unit: String,
    pub completion_token_cost_unit: String,
    pub cache_read_input_token_cost: f64,
    pub cache_creation_input_token_cost: f64,
    pub effective_date: Micros,
    pub created_at: Micros,
    pub created_by: Option<String>,
}

const MAX_LLM_ID: usize = 512;

impl CostCreateReq {
    /// The rows to store, one per model, with fresh ids; `created_by` is the caller.
    pub fn into_records(self, created_by: &str) -> Result<Vec<CostRecord>, ProtoError> {
        let now = Micros::now();
        let mut out = Vec::with_capacity(self.costs.len());
        for (llm_id, v) in self.costs {
            if llm_id.is_empty()
                || llm_id.len() > MAX_LLM_ID
                || llm_id.chars().any(char::is_control)
            {
                return Err(ProtoError::invalid(format!("invalid llm_id {llm_id:?}")));
            }
            let c: CostInput = serde_json::from_value(v)
                .map_err(|e| ProtoError::invalid(format!("costs[{llm_id:?}]: {e}")))?;
            let costs = [
                ("prompt_token_cost", Some(c.prompt_token_cost)),
                ("completion_token_cost", Some(c.completion_token_cost)),
                ("cache_read_input_token_cost", c.cache_read_input_token_cost),
                ("cache_creation_input_token_cost", c.cache_creation_input_token_cost),
            ];
            for (name, value) in costs {
                if let Some(x) = value
                    && !(x.is_finite() && x >= 0.0)
                {
                    return Err(ProtoError::invalid(format!(
                        "costs[{llm_id:?}].{name} must be a finite number >= 0, got {x}"
                    )));
                }
            }
            let unit =
                |u: Option<String>| u.filter(|u| !u.is_empty()).unwrap_or_else(|| "USD".into());
            out.push(CostRecord {
                id: uuid::Uuid::new_v4().to_string(),
                project: self.project_id.clone(),
                llm_id,
                provider_id: c
                    .provider_id
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "default".into()),
                prompt_token_cost: c.prompt_token_cost,
                completion_token_cost: c.completion_token_cost,
                prompt_token_cost_unit: unit(c.prompt_token_cost_unit),
                completion_token_cost_unit: unit(c.completion_token_cost_unit),
                cache_read_input_token_cost: c.cache_read_input_token_cost.unwrap_or(0.0),
                cache_creation_input_token_cost: c.cache_creation_input_token_cost.unwrap_or(0.0),
                effective_date: c.effective_date.unwrap_or(now),
                created_at: now,
                created_by: Some(created_by.to_owned()),
            });
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Query language over prices

/// The fields of a price (`$getField`, `sort_by`, `fields`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostField {
    Id,
    LlmId,
    ProviderId,
    PromptTokenCost,
    CompletionTokenCost,
    PromptTokenCostUnit,
    CompletionTokenCostUnit,
    CacheReadInputTokenCost,
    CacheCreationInputTokenCost,
    EffectiveDate,
    CreatedAt,
    CreatedBy,
    PricingLevel,
    PricingLevelId,
}

const COST_FIELDS: &[(&str, CostField, ValueType)] = &[
    ("id", CostField::Id, ValueType::String),
    ("llm_id", CostField::LlmId, ValueType::String),
    ("provider_id", CostField::ProviderId, ValueType::String),
    ("prompt_token_cost", CostField::PromptTokenCost, ValueType::Float),
    ("completion_token_cost", CostField::CompletionTokenCost, ValueType::Float),
    ("prompt_token_cost_unit", CostField::PromptTokenCostUnit, ValueType::String),
    ("completion_token_cost_unit", CostField::CompletionTokenCostUnit, ValueType::String),
    ("cache_read_input_token_cost", CostField::CacheReadInputTokenCost, ValueType::Float),
    ("cache_creation_input_token_cost", CostField::CacheCreationInputTokenCost, ValueType::Float),
    ("effective_date", CostField::EffectiveDate, ValueType::Timestamp),
    ("created_at", CostField::CreatedAt, ValueType::Timestamp),
    ("created_by", CostField::CreatedBy, ValueType::String),
    ("pricing_level", CostField::PricingLevel, ValueType::String),
    ("pricing_level_id", CostField::PricingLevelId, ValueType::String),
];

pub struct CostCatalog;

impl Catalog for CostCatalog {
    type Field = CostField;
    type Error = ProtoError;
    fn resolve(&self, name: &str) -> Result<(CostField, ValueType), ProtoError> {
        COST_FIELDS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, f, t)| (*f, *t))
            .ok_or_else(|| ProtoError::invalid(format!("unknown cost field {name:?}")))
    }
}

impl Row<CostField> for CostRecord {
    fn cell(&self, f: &CostField) -> Cell<'_> {
        use CostField::*;
        Cell::Val(match f {
            Id => Val::Str(self.id.clone()),
            LlmId => Val::Str(self.llm_id.clone()),
            ProviderId => Val::Str(self.provider_id.clone()),
            PromptTokenCost => Val::Float(self.prompt_token_cost),
            CompletionTokenCost => Val::Float(self.completion_token_cost),
            PromptTokenCostUnit => Val::Str(self.prompt_token_cost_unit.clone()),
            CompletionTokenCostUnit => Val::Str(self.completion_token_cost_unit.clone()),
            CacheReadInputTokenCost => Val::Float(self.cache_read_input_token_cost),
            CacheCreationInputTokenCost => Val::Float(self.cache_creation_input_token_cost),
            EffectiveDate => Val::Int(self.effective_date.0),
            CreatedAt => Val::Int(self.created_at.0),
            CreatedBy => self.created_by.clone().map_or(Val::Null, Val::Str),
            PricingLevel => Val::Str("project".into()),
            PricingLevelId => Val::Str(self.project.as_str().to_owned()),
        })
    }
}

impl CostRecord {
    /// The row as `/cost/query` returns it (all fields, or those named in `fields`).
    pub fn to_json(&self, fields: Option<&[CostField]>) -> Value {
        let mut m = Map::new();
        for (name, f, _) in COST_FIELDS {
            if fields.is_some_and(|fs| !fs.contains(f)) {
                continue;
            }
            let v = match f {
                CostField::EffectiveDate => json!(self.effective_date),
                CostField::CreatedAt => json!(self.created_at),
                other => match self.cell(other) {
                    Cell::Val(Val::Str(s)) => Value::String(s),
                    Cell::Val(Val::Float(x)) => json!(x),
                    Cell::Val(Val::Int(x)) => json!(x),
                    Cell::Val(Val::Bool(b)) => Value::Bool(b),
                    Cell::Val(Val::Null) | Cell::Json(_) => Value::Null,
                },
            };
            m.insert((*name).to_owned(), v);
        }
        Value::Object(m)
    }
}

/// A validated `/cost/query`.
#[derive(Debug, Clone)]
pub struct CostsQuery {
    pub project: ProjectId,
    pub fields: Option<Vec<CostField>>,
    pub expr: Option<TExpr<CostField>>,
    /// Ends with `id` so paging is deterministic.
    pub sort: Vec<(CostField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
}

fn non_negative(what: &str, v: Option<i64>) -> Result<Option<u64>, ProtoError> {
    match v {
        Some(n) if n < 0 => Err(ProtoError::invalid(format!("{what} must be >= 0, got {n}"))),
        v => Ok(v.map(|n| n as u64)),
    }
}

impl CostQueryReq {
    pub fn validate(self) -> Result<CostsQuery, ProtoError> {
        let fields = self
            .fields
            .map(|fs| fs.iter().map(|f| CostCatalog.resolve(f).map(|(f, _)| f)).collect())
            .transpose()?;
        let expr = self.query.as_ref().map(|q| q.typed(&CostCatalog)).transpose()?;
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            sort.push((CostCatalog.resolve(&s.field)?.0, s.direction));
        }
        if sort.is_empty() {
            sort.push((CostField::CreatedAt, Direction::Asc));
        }
        if !sort.iter().any(|(f, _)| *f == CostField::Id) {
            sort.push((CostField::Id, Direction::Asc));
        }
        Ok(CostsQuery {
            project: self.project_id,
            fields,
            expr,
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
        })
    }
}

impl CostsQuery {
    /// Filters, sorts and pages a project's prices.
    pub fn apply(&self, mut rows: Vec<CostRecord>) -> Vec<Value> {
        rows.retain(|r| {
            r.project == self.project && self.expr.as_ref().is_none_or(|e| eval(e, r) == Some(true))
        });
        sort_rows(&mut rows, &self.sort);
        let limit = self.limit.unwrap_or(u64::MAX) as usize;
        rows.iter()
            .skip(self.offset as usize)
            .take(limit)
            .map(|r| r.to_json(self.fields.as_deref()))
            .collect()
    }
}

/// The ids a `/cost/purge` query names. Like the real server, only `$eq`/`$in` on `id` and
/// `$or`s of those are accepted (docs/api/query.md#purge-queries); anything else is a 400.
pub fn purge_ids(q: &Query) -> Result<Vec<String>, ProtoError> {
    use heddle_ql::{Expr, Operand};
    fn lit_str(o: &Operand) -> Option<String> {
        match o {
            Operand::Literal(Value::String(s)) => Some(s.clone()),
            _ => None,
        }
    }
    fn is_id(o: &Operand) -> bool {
        matches!(o, Operand::Field(f) if f == "id")
    }
    fn walk(e: &Expr, out: &mut Vec<String>) -> Result<(), ProtoError> {
        match e {
            Expr::Cmp(CmpOp::Eq, a, b) if is_id(a) && lit_str(b).is_some() => {
                out.push(lit_str(b).expect("checked"));
            }
            Expr::Cmp(CmpOp::Eq, a, b) if is_id(b) && lit_str(a).is_some() => {
                out.push(lit_str(a).expect("checked"));
            }
            Expr::In(a, bs) if is_id(a) => {
                for b in bs {
                    out.push(lit_str(b).ok_or_else(|| {
                        ProtoError::invalid("cost purge: $in on id takes string literals")
                    })?);
                }
            }
            Expr::Or(xs) => xs.iter().try_for_each(|x| walk(x, out))?,
            _ => {
                return Err(ProtoError::invalid(
                    "cost purge accepts only {$eq: [id, literal]}, {$in: [id, [literals]]} or \
                     an $or of those",
                ));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&q.expr, &mut out)?;
    Ok(out)
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
    fn queries_filter_sort_and_page() {
        let rows = vec![
            record("a", "x", "2024-01-01", 1.0),
            record("b", "y", "2024-01-02", 2.0),
            record("c", "x", "2024-01-03", 3.0),
        ];
        let q = |v: Value| {
            let req: CostQueryReq = serde_json::from_value(v).unwrap();
            req.validate().unwrap().apply(rows.clone())
        };
        let ids = |out: Vec<Value>| -> Vec<String> {
            out.iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
        };
        let all = json!({"$eq": [{"$literal": "1"}, {"$literal": "1"}]});
        assert_eq!(ids(q(json!({"project_id": "e/p", "query": {"$expr": all}}))), ["a", "b", "c"]);
        let by_llm = json!({"$in": [{"$getField": "llm_id"}, [{"$literal": "x"}]]});
        let out = q(json!({"project_id": "e/p", "query": {"$expr": by_llm},
            "sort_by": [{"field": "effective_date", "direction": "desc"}], "limit": 1}));
        assert_eq!(ids(out), ["c"]);
        let cheap = json!({"$lt": [{"$getField": "prompt_token_cost"}, {"$literal": 2.5}]});
        let out = q(json!({"project_id": "e/p", "query": {"$expr": cheap}, "offset": 1,
                           "fields": ["id", "llm_id"]}));
        assert_eq!(out, [json!({"id": "b", "llm_id": "y"})]);
        let dated = json!({"$gte": [{"$getField": "effective_date"}, {"$literal": "2024-01-02"}]});
        assert_eq!(ids(q(json!({"project_id": "e/p", "query": {"$expr": dated}}))), ["b", "c"]);
        for bad in [
            json!({"project_id": "e/p", "fields": ["nope"]}),
            json!({"project_id": "e/p", "sort_by": [{"field": "nope"}]}),
            json!({"project_id": "e/p", "limit": -1}),
        ] {
            let req: CostQueryReq = serde_json::from_value(bad.clone()).unwrap();
            assert!(req.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn purge_accepts_only_id_selections() {
        let parse = |v: Value| Query::parse(&json!({ "$expr": v })).unwrap();
        let ids = purge_ids(&parse(json!({"$in": [{"$getField": "id"},
            [{"$literal": "a"}, {"$literal": "b"}]]})))
        .unwrap();
        assert_eq!(ids, ["a", "b"]);
        let ids = purge_ids(&parse(json!({"$or": [
            {"$eq": [{"$getField": "id"}, {"$literal": "a"}]},
            {"$eq": [{"$getField": "id"}, {"$literal": "c"}]}]})))
        .unwrap();
        assert_eq!(ids, ["a", "c"]);
        for bad in [
            json!({"$eq": [{"$getField": "llm_id"}, {"$literal": "a"}]}),
            json!({"$eq": [{"$literal": "1"}, {"$literal": "1"}]}),
            json!({"$not": [{"$eq": [{"$getField": "id"}, {"$literal": "a"}]}]}),
        ] {
            assert!(purge_ids(&parse(bad.clone())).is_err(), "{bad}");
        }
    }
}
