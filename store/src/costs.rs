//! Costs: the per-project LLM token prices that call summaries are priced with.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::costs::CostRecord;

use crate::Result;

#[async_trait]
pub trait CostStore: Send + Sync {
    /// Stores new prices (fresh ids).
    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()>;

    /// Every live price of the project. Prices are few per project, so filtering, sorting and
    /// paging happen in [`heddle_proto::costs`], the same for every backend.
    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>>;

    /// Deletes the project's prices with these ids (ids of other projects are untouched).
    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()>;
}
