//! heddle's domain rules: what the server derives from stored data, the same for every backend
//! and role. Pure code, no I/O; the wire types these rules work on live in `heddle-proto`.
//!
//! - [`prices`]: the prices of a project's calls and the costs they give a call's token usage;
//! - [`thread_stats`]: the statistics of a thread's turns.

pub mod prices;
pub mod thread_stats;
