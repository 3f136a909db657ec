//! Costs on SQLite: the prices in `llm_token_prices`, hard-deleted.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::costs::CostRecord;
use heddle_proto::time::Micros;
use rusqlite::params;

use super::SqliteStore;
use super::writer::backend;
use crate::{CostStore, Result};

const INSERT_COST: &str = "
INSERT INTO llm_token_prices (project_id, id, llm_id, provider_id, prompt_token_cost,
    completion_token_cost, prompt_token_cost_unit, completion_token_cost_unit,
    cache_read_input_token_cost, cache_creation_input_token_cost, effective_date, created_at,
    created_by)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (project_id, id) DO NOTHING
";

/// Columns in the order `project_costs` reads them.
const SELECT_COSTS: &str = "
SELECT id, llm_id, provider_id, prompt_token_cost, completion_token_cost, prompt_token_cost_unit,
       completion_token_cost_unit, cache_read_input_token_cost, cache_creation_input_token_cost,
       effective_date, created_at, created_by
FROM llm_token_prices WHERE project_id = ?1
";

/// ?2: the ids as a JSON array.
const DELETE_COSTS: &str = "
DELETE FROM llm_token_prices WHERE project_id = ?1 AND id IN (SELECT value FROM json_each(?2))
";

#[async_trait]
impl CostStore for SqliteStore {
    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()> {
        self.writer
            .exec(move |conn| {
                let mut st = conn.prepare_cached(INSERT_COST).map_err(backend)?;
                for c in &costs {
                    st.execute(params![
                        c.project.as_str(),
                        c.id,
                        c.llm_id,
                        c.provider_id,
                        c.prompt_token_cost,
                        c.completion_token_cost,
                        c.prompt_token_cost_unit,
                        c.completion_token_cost_unit,
                        c.cache_read_input_token_cost,
                        c.cache_creation_input_token_cost,
                        c.effective_date.0,
                        c.created_at.0,
                        c.created_by,
                    ])
                    .map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>> {
        let project = project.clone();
        self.read(move |conn| {
            let mut st = conn.prepare_cached(SELECT_COSTS).map_err(backend)?;
            st.query_map(params![project.as_str()], |r| {
                Ok(CostRecord {
                    id: r.get(0)?,
                    project: project.clone(),
                    llm_id: r.get(1)?,
                    provider_id: r.get(2)?,
                    prompt_token_cost: r.get(3)?,
                    completion_token_cost: r.get(4)?,
                    prompt_token_cost_unit: r.get(5)?,
                    completion_token_cost_unit: r.get(6)?,
                    cache_read_input_token_cost: r.get(7)?,
                    cache_creation_input_token_cost: r.get(8)?,
                    effective_date: Micros(r.get(9)?),
                    created_at: Micros(r.get(10)?),
                    created_by: r.get(11)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(backend)
        })
        .await
    }

    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        let project = project.clone();
        let ids = serde_json::to_string(ids).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                conn.execute(DELETE_COSTS, params![project.as_str(), ids]).map_err(backend)?;
                Ok(())
            })
            .await
    }
}
