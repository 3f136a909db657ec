//! The write pipeline, which knows nothing of HTTP: the ingest endpoints hand it call parts and
//! the placeholder ops OTLP spans need ([`Sink`]), and it makes them durable — straight into
//! the store ([`StoreSink`], embedded mode), or as Kafka records ([`producer`]) that the
//! [`consumer`] stores in batches ([`batch_store`]) in distributed mode
//! (docs/distributed.md). Its one error type is [`SinkError`]; its metrics are [`metrics`].
//!
//! The `kafka` feature (on by default) brings the producer and the consumer, and librdkafka
//! with them.

pub mod batch_store;
pub mod config;
#[cfg(feature = "kafka")]
pub mod consumer;
pub mod error;
pub mod metrics;
#[cfg(feature = "kafka")]
mod plan;
#[cfg(feature = "kafka")]
pub mod producer;
pub mod sink;

pub use config::KafkaConfig;
pub use error::SinkError;
pub use sink::{Sink, StoreSink};
