//! heddle's domain rules: what the server derives from stored data, the same for every backend
//! and role. Pure code, no I/O; the wire types these rules work on live in `heddle-proto`.
//!
//! - [`agents`]: the agents API's views over OTel GenAI agent spans (their request types, field
//!   catalog, listings, stats and chat timelines);
//! - [`expansion`]: `expand_columns` of calls queries — the plan that splits a query into SQL and
//!   work on expanded rows, and the call values those rows are evaluated on;
//! - [`quantile`]: the one quantile rule of every reported statistic;
//! - [`prices`]: the prices of a project's calls and the costs they give a call's token usage;
//! - [`redaction`]: the sensitive-data rule every write path applies under the `pii-v1` policy;
//! - [`sampling`]: which traces ingest sampling keeps;
//! - [`thread_stats`]: the statistics of a thread's turns;
//! - [`usage`]: token usage and costs rolled up over call trees, without double counting;
//! - [`series`]: time buckets and the aggregations of `/calls/stats` and `/feedback/stats`.

pub mod agents;
pub mod expansion;
pub mod prices;
pub mod quantile;
pub mod redaction;
pub mod sampling;
pub mod series;
pub mod thread_stats;
pub mod usage;
