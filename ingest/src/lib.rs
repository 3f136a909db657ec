//! The write front. HTTP call ingestion ([`http`]) and OTLP trace ingest ([`otlp`]) hands validated call parts to a sink: the
//! store directly (embedded mode) or Kafka ([`producer`], distributed mode). The [`consumer`]
//! moves Kafka into the store in batches.

pub mod batch_store;
pub mod consumer;
mod grpc;
pub mod http;
pub mod metrics;
pub mod otlp;
pub mod producer;

pub use http::routes;
