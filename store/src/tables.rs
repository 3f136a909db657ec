//! Tables: content-addressed rows, and tables that list them by digest.

use std::collections::HashMap;

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::tables::Row;
use serde_json::value::RawValue;

use crate::Result;

/// A table to store: its digest over `row_digests`, and the rows it brings (content-addressed,
/// so rows already stored are skipped). Every digest in `row_digests` is either in `rows` or
/// already stored in the project.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub project: ProjectId,
    pub digest: String,
    pub row_digests: Vec<String>,
    pub rows: Vec<Row>,
}

/// A page of a table's row list: the table's row count and the digests at
/// `[offset, offset + limit)`, in table order.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSlice {
    pub count: u64,
    pub row_digests: Vec<String>,
}

/// A stored row: its size, and its value when asked for.
#[derive(Debug)]
pub struct StoredRow {
    pub size_bytes: u64,
    pub val: Option<Box<RawValue>>,
}

#[async_trait]
pub trait TableStore: Send + Sync {
    /// Stores a table and the rows it brings; a no-op for a table already stored. Rows are
    /// stored before the table, so a visible table always has its rows.
    async fn create_table(&self, table: NewTable) -> Result<()>;

    /// The row digests of table `digest` at `[offset, offset + limit)` (all from `offset` when
    /// `limit` is None) and its row count; `None` when the project has no such table.
    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>>;

    /// The stored rows among `digests` (missing ones are absent from the map), with their
    /// values when `with_val`.
    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>>;
}
