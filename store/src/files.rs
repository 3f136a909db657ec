//! File contents are stored in chunks (both backends): one file row with the digest, size and
//! chunk count, and one row per chunk. Chunks keep every row — and every read and write of
//! one — bounded, whatever the file's size (the SDK uploads files up to its 31 MiB request
//! limit). A file row is written only after all of its chunks, so a file that is visible is
//! complete.
//!
//! Files stored before chunking (chunk count 0) keep their content in the file row.

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use heddle_proto::ProjectId;

use crate::{Result, StoreError};

#[async_trait]
pub trait FileStore: Send + Sync {
    /// Stores file content under its digest, in chunks; idempotent.
    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()>;

    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes>;

    /// Total bytes of the project's files (each digest once).
    async fn files_size(&self, project: &ProjectId) -> Result<u64>;
}

/// Bytes per chunk.
pub const CHUNK_SIZE: usize = 1 << 20;

/// `content` cut into chunks (no copy). An empty file has no chunk.
pub fn chunks(content: &Bytes) -> impl Iterator<Item = (u32, Bytes)> + '_ {
    (0..content.len().div_ceil(CHUNK_SIZE)).map(move |i| {
        let start = i * CHUNK_SIZE;
        (i as u32, content.slice(start..content.len().min(start + CHUNK_SIZE)))
    })
}

/// Chunk count of a file of `size` bytes.
pub fn chunk_count(size: usize) -> u32 {
    size.div_ceil(CHUNK_SIZE) as u32
}

/// Joins the chunks read back (in chunk order), checking they make the whole file.
pub fn assemble(digest: &str, size: u64, n_chunks: u32, parts: Vec<Bytes>) -> Result<Bytes> {
    let total: usize = parts.iter().map(Bytes::len).sum();
    if parts.len() != n_chunks as usize || total as u64 != size {
        return Err(StoreError::backend(format!(
            "file {digest} is incomplete: {} of {n_chunks} chunks, {total} of {size} bytes",
            parts.len()
        )));
    }
    if parts.len() == 1 {
        return Ok(parts.into_iter().next().expect("one part"));
    }
    let mut out = BytesMut::with_capacity(total);
    for p in parts {
        out.extend_from_slice(&p);
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_join() {
        for size in [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, 3 * CHUNK_SIZE + 7] {
            let content: Bytes = (0..size).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
            let parts: Vec<(u32, Bytes)> = chunks(&content).collect();
            assert_eq!(parts.len() as u32, chunk_count(size), "{size}");
            assert!(parts.iter().enumerate().all(|(i, (n, _))| *n == i as u32));
            assert!(parts.iter().all(|(_, p)| !p.is_empty() && p.len() <= CHUNK_SIZE));
            let back = parts.into_iter().map(|(_, p)| p).collect();
            let joined = assemble("d", size as u64, chunk_count(size), back).unwrap();
            assert_eq!(joined, content, "{size}");
        }
        let short = vec![Bytes::from_static(b"abc")];
        assert!(assemble("d", 4, 1, short.clone()).is_err(), "size mismatch");
        assert!(assemble("d", 3, 2, short).is_err(), "chunk missing");
    }
}
