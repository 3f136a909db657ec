//! Files on ClickHouse: a row in `files` per digest, its content in `file_chunks`
//! ([`crate::files`]); both ReplacingMergeTrees, so a racing duplicate upload collapses.

use async_trait::async_trait;
use bytes::Bytes;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};

use super::sql::Sql;
use super::{ClickHouseStore, backend};
use crate::{FileStore, Result, StoreError, files};

/// A file row; `content` is empty unless the file predates chunking.
#[derive(Debug, Row, Serialize)]
struct FileRow {
    pub project_id: String,
    pub digest: String,
    pub size_bytes: u64,
    pub content: Blob,
    pub created_at: i64,
    pub n_chunks: u32,
}

/// What `select_file` selects.
#[derive(Debug, Row, Deserialize)]
struct FileMetaRow {
    pub size_bytes: u64,
    pub n_chunks: u32,
    pub content: Blob,
}

/// What `select_file_chunks` selects.
#[derive(Debug, Row, Deserialize)]
pub(super) struct ChunkDataRow {
    pub data: Blob,
}

#[derive(Debug, Row, Serialize)]
pub(super) struct FileChunkRow {
    pub project_id: String,
    pub digest: String,
    pub chunk_index: u32,
    pub data: Blob,
}

impl FileChunkRow {
    /// The chunk rows of `content` (files and blobs are stored alike).
    pub(super) fn split(project: &str, digest: &str, content: &bytes::Bytes) -> Vec<FileChunkRow> {
        crate::files::chunks(content)
            .map(|(chunk_index, data)| FileChunkRow {
                project_id: project.to_owned(),
                digest: digest.to_owned(),
                chunk_index,
                data: Blob(data),
            })
            .collect()
    }
}

/// Binary content of a `String` column (serde's bytes, not a sequence of numbers).
#[derive(Debug, Default)]
pub(super) struct Blob(pub bytes::Bytes);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes::Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(v.into()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Blob, E> {
                Ok(Blob(bytes::Bytes::copy_from_slice(v.as_bytes())))
            }
        }
        d.deserialize_byte_buf(Visit)
    }
}

/// The file row: size, chunk count and (files stored before chunking) the inline content.
fn select_file(project: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT size_bytes, n_chunks, content FROM files WHERE project_id = ");
    sql.bind_str(project).push(" AND digest = ").bind_str(digest).push(" LIMIT 1");
    sql
}

/// A file's chunks in order, each once (a repeated upload may have stored them twice).
fn select_file_chunks(project: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT data FROM file_chunks WHERE project_id = ");
    sql.bind_str(project).push(" AND digest = ").bind_str(digest);
    sql.push(" ORDER BY chunk_index LIMIT 1 BY chunk_index");
    sql
}

fn file_exists(project: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT count() FROM files WHERE project_id = ");
    sql.bind_str(project).push(" AND digest = ").bind_str(digest);
    sql
}

/// Total bytes of a project's files, each digest once.
fn files_size(project: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT toUInt64(sum(size)) FROM (SELECT any(size_bytes) AS size FROM files WHERE project_id = ",
    );
    sql.bind_str(project).push(" GROUP BY digest)");
    sql
}

#[async_trait]
impl FileStore for ClickHouseStore {
    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        // Content-addressed: skip the upload when the digest is stored. A racing duplicate
        // writes the same rows, which collapse in the ReplacingMergeTrees.
        let n: u64 = file_exists(project.as_str(), digest)
            .query(&self.client)
            .fetch_one()
            .await
            .map_err(backend)?;
        if n > 0 {
            return Ok(());
        }
        let chunks = FileChunkRow::split(project.as_str(), digest, &content);
        // Chunks first: the file row makes the file visible, complete.
        self.insert::<FileChunkRow>("file_chunks", &chunks).await?;
        let row = FileRow {
            project_id: project.as_str().to_owned(),
            digest: digest.to_owned(),
            size_bytes: content.len() as u64,
            content: Blob::default(),
            created_at: Micros::now().0,
            n_chunks: files::chunk_count(content.len()),
        };
        self.insert::<FileRow>("files", &[row]).await
    }

    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes> {
        let found: Option<FileMetaRow> = select_file(project.as_str(), digest)
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        let meta = found.ok_or_else(|| StoreError::NotFound(format!("file {digest} not found")))?;
        if meta.n_chunks == 0 {
            return Ok(meta.content.0); // stored before chunking, or empty
        }
        let parts: Vec<ChunkDataRow> = select_file_chunks(project.as_str(), digest)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        files::assemble(
            digest,
            meta.size_bytes,
            meta.n_chunks,
            parts.into_iter().map(|r| r.data.0).collect(),
        )
    }

    async fn files_size(&self, project: &ProjectId) -> Result<u64> {
        files_size(project.as_str()).query(&self.client).fetch_one().await.map_err(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn file_statements_bind_user_values() {
        let evil = "x'); DROP TABLE files; --";
        for sql in [
            file_exists(evil, evil),
            select_file(evil, evil),
            select_file_chunks(evil, evil),
            files_size(evil),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }
}
