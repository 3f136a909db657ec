//! Ingest sampling (docs/api/project-settings.md#ingest-sampling): whether a trace is kept is a
//! function of its id and the project's rate alone, so every call and span of a trace gets the
//! same answer on every request and every ingest process, whatever order they arrive in.

use sha2::{Digest, Sha256};

/// Whether the trace `trace_id` is kept at `rate` (the share of traces kept, 0 to 1): the
/// first 8 bytes of the id's SHA-256, as a fraction of 2^64, fall below the rate. A hash rather
/// than the id itself, since ids (UUIDv7, OTLP trace ids) are not uniform in every byte.
pub fn keeps_trace(trace_id: &str, rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate.is_nan() || rate <= 0.0 {
        return false;
    }
    let digest = Sha256::digest(trace_id.as_bytes());
    let head = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    (head as f64) < rate * (u64::MAX as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_stable_and_follow_the_rate() {
        let ids: Vec<String> = (0..20_000).map(|i| format!("019a{i:028x}")).collect();
        for rate in [0.1, 0.5, 0.9] {
            let kept = ids.iter().filter(|id| keeps_trace(id, rate)).count() as f64;
            let share = kept / ids.len() as f64;
            assert!((share - rate).abs() < 0.02, "rate {rate}: kept {share}");
        }
        // A lower rate keeps a subset of what a higher one keeps.
        assert!(ids.iter().all(|id| !keeps_trace(id, 0.2) || keeps_trace(id, 0.6)));
        assert!(ids.iter().all(|id| keeps_trace(id, 1.0) && !keeps_trace(id, 0.0)));
        assert_eq!(keeps_trace("abc", 0.5), keeps_trace("abc", 0.5));
    }
}
