//! Blobs ([`crate::blobs`]) on SQLite, in `call_blob_chunks`; and the write probe, a row of
//! `heddle_health` written again.

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use rusqlite::params;

use super::SqliteStore;
use super::writer::backend;
use crate::{BlobStore, Health, Result, blobs, files};

/// Identical rows of a repeated write are skipped.
const INSERT_CHUNK: &str = "INSERT OR IGNORE INTO call_blob_chunks (project_id, digest, \
                            chunk_index, data) VALUES (?1, ?2, ?3, ?4)";

const SELECT_CHUNKS: &str = "SELECT data FROM call_blob_chunks WHERE project_id = ?1 AND \
                             digest = ?2 ORDER BY chunk_index";

const PROBE: &str = "INSERT OR REPLACE INTO heddle_health (id, probed_at) VALUES (1, ?1)";

#[async_trait]
impl BlobStore for SqliteStore {
    /// Every chunk in one writer job (one savepoint), so a blob commits whole.
    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.writer
            .exec(move |conn| {
                let mut insert = conn.prepare_cached(INSERT_CHUNK).map_err(backend)?;
                for (i, data) in files::chunks(&content) {
                    insert
                        .execute(params![project.as_str(), digest, i, &data[..]])
                        .map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.read(move |conn| {
            let parts = conn
                .prepare_cached(SELECT_CHUNKS)
                .and_then(|mut st| {
                    st.query_map(params![project.as_str(), digest], |r| {
                        r.get::<_, Vec<u8>>(0).map(Bytes::from)
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)?;
            blobs::assemble(&digest, size, parts)
        })
        .await
    }
}

#[async_trait]
impl Health for SqliteStore {
    async fn probe_write(&self) -> Result<()> {
        self.writer
            .exec(|conn| {
                conn.execute(PROBE, params![Micros::now().0]).map_err(backend)?;
                Ok(())
            })
            .await
    }
}
