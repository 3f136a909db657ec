//! Files on SQLite: a row in `files` per digest, its content in `file_chunks`
//! ([`crate::files`]).

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use super::writer::backend;
use crate::{FileStore, Result, StoreError, files};

const INSERT_FILE: &str = "
INSERT INTO files (project_id, digest, size_bytes, n_chunks, content, created_at)
VALUES (?1, ?2, ?3, ?4, x'', ?5)
ON CONFLICT (project_id, digest) DO NOTHING
";

const INSERT_FILE_CHUNK: &str = "
INSERT INTO file_chunks (project_id, digest, chunk_index, data) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (project_id, digest, chunk_index) DO NOTHING
";

const FILE_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM files WHERE project_id = ?1 AND digest = ?2)";

/// Size, chunk count, and the inline content of a file stored before chunking.
const SELECT_FILE: &str =
    "SELECT size_bytes, n_chunks, content FROM files WHERE project_id = ?1 AND digest = ?2";

const SELECT_FILE_CHUNKS: &str =
    "SELECT data FROM file_chunks WHERE project_id = ?1 AND digest = ?2 ORDER BY chunk_index";

const FILES_SIZE: &str = "SELECT COALESCE(SUM(size_bytes), 0) FROM files WHERE project_id = ?1";

#[async_trait]
impl FileStore for SqliteStore {
    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.writer
            .exec(move |conn| {
                let p = project.as_str();
                let exists: bool = conn
                    .query_row(FILE_EXISTS, params![p, digest], |r| r.get(0))
                    .map_err(backend)?;
                if exists {
                    return Ok(());
                }
                // Chunks and file row commit together: a job that fails is undone whole.
                let mut chunk = conn.prepare_cached(INSERT_FILE_CHUNK).map_err(backend)?;
                for (i, data) in files::chunks(&content) {
                    chunk.execute(params![p, digest, i, &data[..]]).map_err(backend)?;
                }
                conn.prepare_cached(INSERT_FILE)
                    .and_then(|mut st| {
                        st.execute(params![
                            p,
                            digest,
                            content.len() as i64,
                            files::chunk_count(content.len()),
                            Micros::now().0
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.read(move |conn| {
            let p = project.as_str();
            let found: Option<(i64, u32, Vec<u8>)> = conn
                .query_row(SELECT_FILE, params![p, digest], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
                .map_err(backend)?;
            let Some((size, n_chunks, inline)) = found else {
                return Err(StoreError::NotFound(format!("file {digest} not found")));
            };
            if n_chunks == 0 {
                return Ok(Bytes::from(inline)); // stored before chunking, or empty
            }
            let parts = conn
                .prepare_cached(SELECT_FILE_CHUNKS)
                .and_then(|mut st| {
                    st.query_map(params![p, digest], |r| r.get::<_, Vec<u8>>(0).map(Bytes::from))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)?;
            files::assemble(&digest, size as u64, n_chunks, parts)
        })
        .await
    }

    async fn files_size(&self, project: &ProjectId) -> Result<u64> {
        let project = project.clone();
        self.read(move |conn| {
            conn.query_row(FILES_SIZE, params![project.as_str()], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(backend)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SqliteOptions, migrations};
    use super::*;

    #[tokio::test]
    async fn files_in_chunks_and_files_from_before_chunking() {
        let dir = tempfile::tempdir().unwrap();
        let project = ProjectId::parse("e/p").unwrap();
        {
            // A database at schema version 2 holding a file the old way (content inline).
            let conn = migrations::database_at(dir.path(), 2);
            conn.execute(
                "INSERT INTO files (project_id, digest, size_bytes, content, created_at)
                 VALUES ('e/p', 'old', 3, x'616263', 0)",
                [],
            )
            .unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        assert_eq!(store.read_file(&project, "old").await.unwrap(), Bytes::from_static(b"abc"));

        let content: Bytes = (0..(5usize << 20) / 2).map(|i| (i % 253) as u8).collect();
        store.create_file(&project, "big", content.clone()).await.unwrap();
        store.create_file(&project, "big", content.clone()).await.unwrap(); // idempotent
        let chunks: Vec<(i64, i64)> = store
            .read(|conn| {
                let mut st = conn
                    .prepare(
                        "SELECT chunk_index, length(data) FROM file_chunks WHERE digest = 'big'
                         ORDER BY chunk_index",
                    )
                    .map_err(backend)?;
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                    .map_err(backend)
            })
            .await
            .unwrap();
        assert_eq!(chunks, [(0, 1 << 20), (1, 1 << 20), (2, 1 << 19)], "2.5 MiB in 1 MiB chunks");
        assert_eq!(store.read_file(&project, "big").await.unwrap(), content);
        assert_eq!(store.files_size(&project).await.unwrap(), content.len() as u64 + 3);
    }
}
