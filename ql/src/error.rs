use thiserror::Error;

/// What can be wrong with a query. Every variant is the caller's fault (a 4xx).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum QlError {
    /// Malformed or ill-typed query (400).
    #[error("{0}")]
    Invalid(String),
    /// A field the caller may not filter or sort on (403).
    #[error("{0}")]
    Forbidden(String),
}

impl QlError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        QlError::Invalid(msg.into())
    }
}
