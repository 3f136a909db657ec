//! Blobs ([`crate::blobs`]) and the write probe on SQLite.

use bytes::Bytes;
use heddle_proto::time::Micros;
use rusqlite::{Connection, params};

use super::writer::backend;
use crate::{Result, blobs, files};

/// Identical rows of a repeated write are skipped.
const INSERT_CHUNK: &str = "INSERT OR IGNORE INTO call_blob_chunks (project_id, digest, \
                            chunk_index, data) VALUES (?1, ?2, ?3, ?4)";

const SELECT_CHUNKS: &str = "SELECT data FROM call_blob_chunks WHERE project_id = ?1 AND \
                             digest = ?2 ORDER BY chunk_index";

const PROBE: &str = "INSERT OR REPLACE INTO heddle_health (id, probed_at) VALUES (1, ?1)";

/// Writes every chunk; the caller runs it in one savepoint, so a blob commits whole.
pub(super) fn put(conn: &Connection, project: &str, digest: &str, content: &Bytes) -> Result<()> {
    let mut insert = conn.prepare_cached(INSERT_CHUNK).map_err(backend)?;
    for (i, data) in files::chunks(content) {
        insert.execute(params![project, digest, i, &data[..]]).map_err(backend)?;
    }
    Ok(())
}

pub(super) fn read(conn: &Connection, project: &str, digest: &str, size: u64) -> Result<Bytes> {
    let parts = conn
        .prepare_cached(SELECT_CHUNKS)
        .and_then(|mut st| {
            st.query_map(params![project, digest], |r| r.get::<_, Vec<u8>>(0).map(Bytes::from))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)?;
    blobs::assemble(digest, size, parts)
}

pub(super) fn probe(conn: &Connection) -> Result<()> {
    conn.execute(PROBE, params![Micros::now().0]).map_err(backend)?;
    Ok(())
}
