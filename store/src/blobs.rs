//! Blobs: large call parts that the distributed write path moves out of its Kafka records
//! (`heddle_proto::record::offload`). They are stored like files, in chunks of
//! [`files::CHUNK_SIZE`] (both backends), keyed by `(project, digest)`; the digest is the
//! SHA-256 of the bytes, so writing a blob twice writes identical rows. There is no header row:
//! the reference carries the size, which gives the chunk count, and a read checks that every
//! chunk is there ([`files::assemble`]).

use bytes::Bytes;

use crate::{Result, StoreError, files};

/// Joins the chunks read back into the blob of `size` bytes; a blob without any chunk is
/// missing.
pub fn assemble(digest: &str, size: u64, parts: Vec<Bytes>) -> Result<Bytes> {
    if parts.is_empty() && size > 0 {
        return Err(StoreError::NotFound(format!("blob {digest} not found")));
    }
    files::assemble(digest, size, files::chunk_count(size as usize), parts)
}
