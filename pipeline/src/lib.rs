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
#[cfg(feature = "kafka")]
mod lend;
pub mod metrics;
#[cfg(feature = "kafka")]
mod plan;
#[cfg(feature = "kafka")]
pub mod producer;
pub mod sink;
#[cfg(feature = "kafka")]
pub mod topics;

pub use config::KafkaConfig;
pub use error::SinkError;
pub use sink::{Sink, Staged, StoreSink};

/// Call parts for the unit tests of the record planning and the batch store.
#[cfg(test)]
mod test_parts {
    use heddle_proto::ProjectId;
    use heddle_proto::calls::{CallPart, StartPart};
    use heddle_proto::time::Micros;

    /// The start part of call `id` of project `e/p`, in trace `trace`, with these inputs.
    pub fn started(id: &str, trace: &str, inputs: &str) -> CallPart {
        CallPart {
            project: ProjectId::parse("e/p").unwrap(),
            id: id.into(),
            trace_id: Some(trace.into()),
            start: Some(StartPart {
                op_name: "op".into(),
                display_name: None,
                parent_id: None,
                thread_id: None,
                turn_id: None,
                started_at: Micros(1),
                attributes: "{}".into(),
                inputs: inputs.into(),
                otel_dump: None,
                wb_user_id: None,
                wb_run_id: None,
                wb_run_step: None,
            }),
            end: None,
        }
    }
}
