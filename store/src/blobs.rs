//! Blobs: large call parts that the distributed write path moves out of its Kafka records
//! (`heddle_proto::record::offload`). They are stored like files, in chunks of
//! [`files::CHUNK_SIZE`] (both backends), keyed by `(project, digest)`; the digest is the
//! SHA-256 of the bytes, so writing a blob twice writes identical rows. There is no header row:
//! the reference carries the size, which gives the chunk count, and a read checks that every
//! chunk is there ([`files::assemble`]).

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;

use crate::{Result, StoreError, files};

#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `content` as the project's blob `digest`, the digest of the bytes, so a repeat
    /// stores the same bytes again (idempotent). Returns once the blob is durable and complete:
    /// only then may a record referencing it be produced.
    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()>;

    /// The project's blob `digest`, `size` bytes long; [`StoreError::NotFound`] when absent.
    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes>;
}

/// Joins the chunks read back into the blob of `size` bytes; a blob without any chunk is
/// missing.
pub fn assemble(digest: &str, size: u64, parts: Vec<Bytes>) -> Result<Bytes> {
    if parts.is_empty() && size > 0 {
        return Err(StoreError::NotFound(format!("blob {digest} not found")));
    }
    files::assemble(digest, size, files::chunk_count(size as usize), parts)
}
