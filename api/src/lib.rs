//! HTTP plumbing shared by the ingest and query roles: the one error type and its mapping to
//! status codes, API-key authentication, and request extractors with clear 4xx answers.

pub mod auth;
pub mod budget;
pub mod error;
pub mod extract;
pub mod settings;
pub mod state;

pub use auth::{Auth, Principal};
pub use budget::MemoryBudget;
pub use error::ApiError;
pub use extract::{
    EncodedBody, Encoding, Json, JsonBody, RawBody, admit_and_decode, admit_json_shape, blocking,
    body_text, parse,
};
pub use settings::{IngestMetrics, SettingsCache};
pub use state::{AppState, BodyLimits};
