//! Costs on ClickHouse: rows in `llm_token_prices`, the newest row per id standing for the
//! price; a delete writes a tombstone row.

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::costs::CostRecord;
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};

use super::sql::Sql;
use super::{ClickHouseStore, backend, next_version};
use crate::{CostStore, Result};

/// A row of `llm_token_prices` (see migrations/0006_costs.sql), written and read alike
/// (timestamps as microseconds: [`select_costs`] converts them).
#[derive(Debug, Default, Row, Serialize, Deserialize)]
struct CostRow {
    pub project_id: String,
    pub id: String,
    pub row_version: u64,
    pub deleted: u8,
    pub llm_id: String,
    pub provider_id: String,
    pub prompt_token_cost: f64,
    pub completion_token_cost: f64,
    pub prompt_token_cost_unit: String,
    pub completion_token_cost_unit: String,
    pub cache_read_input_token_cost: f64,
    pub cache_creation_input_token_cost: f64,
    pub effective_date: i64,
    pub created_at: i64,
    pub created_by: Option<String>,
}

impl CostRow {
    fn from_record(c: CostRecord, row_version: u64) -> CostRow {
        CostRow {
            project_id: c.project.as_str().to_owned(),
            id: c.id,
            row_version,
            deleted: 0,
            llm_id: c.llm_id,
            provider_id: c.provider_id,
            prompt_token_cost: c.prompt_token_cost,
            completion_token_cost: c.completion_token_cost,
            prompt_token_cost_unit: c.prompt_token_cost_unit,
            completion_token_cost_unit: c.completion_token_cost_unit,
            cache_read_input_token_cost: c.cache_read_input_token_cost,
            cache_creation_input_token_cost: c.cache_creation_input_token_cost,
            effective_date: c.effective_date.0,
            created_at: c.created_at.0,
            created_by: c.created_by,
        }
    }

    fn into_record(self, project: &ProjectId) -> CostRecord {
        CostRecord {
            id: self.id,
            project: project.clone(),
            llm_id: self.llm_id,
            provider_id: self.provider_id,
            prompt_token_cost: self.prompt_token_cost,
            completion_token_cost: self.completion_token_cost,
            prompt_token_cost_unit: self.prompt_token_cost_unit,
            completion_token_cost_unit: self.completion_token_cost_unit,
            cache_read_input_token_cost: self.cache_read_input_token_cost,
            cache_creation_input_token_cost: self.cache_creation_input_token_cost,
            effective_date: Micros(self.effective_date),
            created_at: Micros(self.created_at),
            created_by: self.created_by,
        }
    }
}

const COSTS: &str = "llm_token_prices";

/// The newest row of each of the project's prices, tombstones included (the caller drops them).
fn select_costs(project: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT project_id, id, row_version, deleted, llm_id, provider_id, prompt_token_cost, \
         completion_token_cost, prompt_token_cost_unit, completion_token_cost_unit, \
         cache_read_input_token_cost, cache_creation_input_token_cost, \
         toUnixTimestamp64Micro(effective_date) AS effective_date, \
         toUnixTimestamp64Micro(created_at) AS created_at, created_by \
         FROM llm_token_prices WHERE project_id = ",
    );
    sql.bind_str(project).push(" ORDER BY id, row_version DESC LIMIT 1 BY id");
    sql
}

#[async_trait]
impl CostStore for ClickHouseStore {
    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()> {
        let rows: Vec<CostRow> =
            costs.into_iter().map(|c| CostRow::from_record(c, next_version())).collect();
        self.insert::<CostRow>(COSTS, &rows).await
    }

    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>> {
        let rows: Vec<CostRow> = select_costs(project.as_str())
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        Ok(rows.into_iter().filter(|r| r.deleted == 0).map(|r| r.into_record(project)).collect())
    }

    /// Writes a tombstone for each of the project's live prices among `ids`.
    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        let live = self.project_costs(project).await?;
        let rows: Vec<CostRow> = live
            .into_iter()
            .filter(|c| ids.contains(&c.id))
            .map(|c| CostRow { deleted: 1, ..CostRow::from_record(c, next_version()) })
            .collect();
        self.insert::<CostRow>(COSTS, &rows).await
    }
}
