//! The write front, HTTP only: call ingestion ([`http`]) and OTLP trace and log ingest over
//! HTTP and gRPC ([`otlp`], [`otlp_logs`]) validate and convert requests and hand call parts and placeholder ops to the
//! write pipeline's sink (`heddle_pipeline`): the store directly (embedded mode) or Kafka
//! (distributed mode).

mod grpc;
pub mod http;
pub mod otlp;
pub mod otlp_logs;

pub use http::routes;
