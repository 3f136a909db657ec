//! heddle's wire vocabulary: the request/response types of the Weave trace-server API, the
//! query-language catalogs, refs and digests. Pure code with no I/O, shared by every role and backend.

pub mod annotation_queues;
pub mod calls;
pub mod canonical;
pub mod costs;
pub mod digest;
pub mod error;
pub mod feedback;
pub mod ids;
pub mod lazy_part;
pub mod limits;
pub mod member;
pub mod objects;
pub mod otlp;
pub mod project_settings;
pub mod record;
pub mod refs;
pub mod tables;
pub mod tags;
pub mod threads;
pub mod time;

pub use error::ProtoError;
pub use ids::ProjectId;
