//! The memory budget: how much memory requests may take at once for the work that grows with
//! what a client sends or asks for — decompressing and parsing bodies (a body parses into up to
//! ~40× its bytes), and building answers out of copies of stored values (refs, expanded calls).
//! Work is admitted against the shared budget as its size becomes known and waits for room,
//! briefly; when none frees up the request gets 503 with `Retry-After` instead of growing the
//! heap. The bound this gives (`docs/limits.md`): that memory stays within the budget, whatever
//! the number of connections.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ApiError;

/// What decoding a body costs, as a multiple of its decoded size, when nothing more is known
/// about it (typical JSON and protobuf decode into 2–4× their bytes).
pub const DECODE_FACTOR: usize = 4;
/// What one JSON value costs once parsed, beyond its bytes (JSON bodies are charged by their
/// shape, counted before parsing: `0,` is 2 bytes of text and 80 bytes parsed, up to twice that
/// while the list holding it grows).
pub const VALUE_COST: usize = 160;
/// Bodies up to this size (as decoded) are not charged: what they can decode into is small
/// (the per-request bounds of `docs/limits.md` apply), and a budget filled by one large body
/// must not hold up everyone's ordinary requests.
pub const UNCHARGED_BYTES: usize = 256 * 1024;
/// How long a request waits for room before it is turned away with 503.
const ADMIT_WAIT: Duration = Duration::from_secs(5);
/// Permits are counted in KiB, so the budget fits a semaphore's counter.
const UNIT: usize = 1024;

#[derive(Clone)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    total_units: u32,
}

/// Room in the budget, given back when dropped.
pub struct Admitted(OwnedSemaphorePermit);

impl Admitted {
    /// The bytes of room held.
    pub fn bytes(&self) -> usize {
        self.0.num_permits() * UNIT
    }
}

impl MemoryBudget {
    /// A budget of `bytes` (at least one largest body's worth, so every request can run alone).
    pub fn new(bytes: usize) -> MemoryBudget {
        let units = (bytes / UNIT).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        MemoryBudget { permits: Arc::new(Semaphore::new(units)), total_units: units as u32 }
    }

    /// Admits a body of `len` decoded bytes for [`DECODE_FACTOR`] times its size, topping up
    /// `held`; a small body (and nothing held) needs no room.
    pub async fn admit_body(
        &self,
        len: usize,
        held: Option<Admitted>,
    ) -> Result<Option<Admitted>, ApiError> {
        if len <= UNCHARGED_BYTES && held.is_none() {
            return Ok(None);
        }
        self.admit(len * DECODE_FACTOR, held).await.map(Some)
    }

    /// Waits for room for `cost` bytes of decoding in all. A body is admitted in steps as more
    /// becomes known about it (its compressed size, what it inflated to, its JSON shape; a gzip
    /// body before each piece it inflates): each step tops up what `held` already has, and the
    /// permits add up in one [`Admitted`]. A step that `held` already covers, or that asks more
    /// of a request already holding the whole budget (which runs alone), takes nothing more.
    pub async fn admit(&self, cost: usize, held: Option<Admitted>) -> Result<Admitted, ApiError> {
        let units = cost.div_ceil(UNIT).max(1);
        let held_units = held.as_ref().map_or(0, |a| a.0.num_permits());
        if held_units >= units.min(self.total_units as usize)
            && let Some(held) = held
        {
            return Ok(held);
        }
        let units = units.saturating_sub(held_units).clamp(1, self.total_units as usize);
        let available_alone = self.total_units as usize - held_units;
        let units = units.min(available_alone.max(1)) as u32;
        let wait = self.permits.clone().acquire_many_owned(units);
        match tokio::time::timeout(ADMIT_WAIT, wait).await {
            Ok(Ok(mut permit)) => {
                if let Some(Admitted(held)) = held {
                    permit.merge(held);
                }
                Ok(Admitted(permit))
            }
            _ => Err(ApiError::Overloaded(
                "the server is busy with as much request data as it has memory for; retry later"
                    .into(),
            )),
        }
    }
}

/// Where the JSON extractor leaves its [`Admitted`] so that it is held until the handler has
/// answered, not only while the body is parsed: the parsed request lives as long as the handler
/// does. [`hold_admissions`] puts one in every request.
#[derive(Clone, Default)]
pub struct AdmissionSlot(Arc<std::sync::Mutex<Vec<Admitted>>>);

impl AdmissionSlot {
    pub fn keep(&self, admitted: Admitted) {
        self.0.lock().expect("not poisoned").push(admitted);
    }
}

/// Middleware: gives each request an [`AdmissionSlot`] and releases what it holds once the
/// handler has produced its response.
pub async fn hold_admissions(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let slot = AdmissionSlot::default();
    req.extensions_mut().insert(slot.clone());
    let response = next.run(req).await;
    drop(slot);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_wait_for_room_then_are_turned_away() {
        let budget = MemoryBudget::new(8 * 1024 * 1024);
        // 8 MiB fills the whole budget.
        let first = budget.admit(8 * 1024 * 1024, None).await.unwrap();
        tokio::time::pause();
        let second = budget.admit(1024, None).await;
        assert!(matches!(second, Err(ApiError::Overloaded(_))));
        drop(first);
        // Admitted in two steps (gzip): the second only tops up.
        let small = budget.admit(4 * 1024 * 1024, None).await.unwrap();
        let grown = budget.admit(8 * 1024 * 1024, Some(small)).await.unwrap();
        assert_eq!(grown.0.num_permits(), 8 * 1024);
        // A step that what is held covers takes nothing more.
        let covered = budget.admit(4 * 1024 * 1024, Some(grown)).await.unwrap();
        assert_eq!(covered.0.num_permits(), 8 * 1024);
        drop(covered);
        // A body bigger than the whole budget still runs alone, and grows on without waiting
        // for room that only it could give back.
        let huge = budget.admit(usize::MAX / 8, None).await.unwrap();
        let huge = budget.admit(usize::MAX / 4, Some(huge)).await.unwrap();
        assert_eq!(huge.0.num_permits(), 8 * 1024);
        // Small bodies need no room, even while the budget is full; larger ones wait.
        assert!(budget.admit_body(UNCHARGED_BYTES, None).await.unwrap().is_none());
        assert!(budget.admit_body(UNCHARGED_BYTES + 1, None).await.is_err());
        drop(huge);
        assert!(budget.admit_body(UNCHARGED_BYTES + 1, None).await.unwrap().is_some());
    }
}
