use thiserror::Error;

/// Everything that can be wrong with a request before it touches storage. Every variant is the
/// caller's fault, so every variant maps to a 4xx.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ProtoError {
    /// Malformed or semantically invalid input (400).
    #[error("{0}")]
    Invalid(String),
    /// A field the caller may not filter or sort on (403).
    #[error("{0}")]
    Forbidden(String),
    /// A client-supplied digest that does not match the content (409).
    #[error("digest mismatch: expected {expected}, computed {actual}")]
    DigestMismatch { expected: String, actual: String },
}

impl ProtoError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        ProtoError::Invalid(msg.into())
    }
}

pub type Result<T, E = ProtoError> = std::result::Result<T, E>;

/// Query errors keep their status: invalid is a 400, forbidden a 403.
impl From<heddle_ql::QlError> for ProtoError {
    fn from(e: heddle_ql::QlError) -> Self {
        match e {
            heddle_ql::QlError::Invalid(m) => ProtoError::Invalid(m),
            heddle_ql::QlError::Forbidden(m) => ProtoError::Forbidden(m),
        }
    }
}
