//! Blobs ([`crate::blobs`]) on ClickHouse, in `call_blob_chunks` (chunk rows like files'); and
//! the write probe, a row inserted into `heddle_health`.

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;

use super::files::{ChunkDataRow, FileChunkRow};
use super::sql::Sql;
use super::{ClickHouseStore, backend};
use crate::{BlobStore, Health, Result, blobs, files};

const CHUNKS: &str = "call_blob_chunks";

#[async_trait]
impl BlobStore for ClickHouseStore {
    /// One insert of all chunks (one block, so it lands whole). Content-addressed: a blob
    /// already stored is not written again; a racing duplicate writes identical rows.
    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        let mut stored = Sql::new("SELECT count() FROM (SELECT DISTINCT chunk_index FROM ");
        stored.push(CHUNKS).push(" WHERE project_id = ").bind_str(project.as_str());
        stored.push(" AND digest = ").bind_str(digest).push(")");
        let n: u64 = stored.query(self.client()).fetch_one().await.map_err(backend)?;
        if n > 0 && n == u64::from(files::chunk_count(content.len())) {
            return Ok(());
        }
        let rows = FileChunkRow::split(project.as_str(), digest, &content);
        self.insert::<FileChunkRow>(CHUNKS, &rows).await
    }

    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes> {
        let mut select = Sql::new("SELECT data FROM ");
        select.push(CHUNKS).push(" WHERE project_id = ").bind_str(project.as_str());
        select.push(" AND digest = ").bind_str(digest);
        select.push(" ORDER BY chunk_index LIMIT 1 BY chunk_index");
        let parts: Vec<ChunkDataRow> =
            select.query(self.client()).fetch_all().await.map_err(backend)?;
        blobs::assemble(digest, size, parts.into_iter().map(|r| r.data.0).collect())
    }
}

#[async_trait]
impl Health for ClickHouseStore {
    async fn probe_write(&self) -> Result<()> {
        self.client()
            .query("INSERT INTO heddle_health (id) VALUES (1)")
            .with_setting("wait_end_of_query", "1")
            .with_setting("async_insert", "0")
            .execute()
            .await
            .map_err(backend)
    }
}
