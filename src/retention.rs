//! The retention purge of the roles that serve queries (docs/storage.md#retention): every
//! interval, and once at start, each project's data older than its retention is deleted in small
//! batches (`heddle_store::project_settings`). Several processes running it against one store
//! only repeat deletes of what is already gone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use heddle_proto::time::Micros;
use heddle_store::Store;
use heddle_store::project_settings::{PURGE_BATCH, PURGE_PAUSE, purge_expired_everywhere};

pub async fn run(store: Arc<dyn Store>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let began = Instant::now();
        match purge_expired_everywhere(&*store, Micros::now(), PURGE_BATCH, PURGE_PAUSE).await {
            Ok(p) if p.calls + p.feedback + p.files > 0 => tracing::info!(
                calls = p.calls,
                feedback = p.feedback,
                files = p.files,
                seconds = began.elapsed().as_secs_f64(),
                "retention purge deleted expired data"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e.chain(), "retention purge failed"),
        }
    }
}
