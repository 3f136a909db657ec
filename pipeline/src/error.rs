//! The one error type of the write pipeline. It speaks of the write, not of HTTP: the API maps
//! it to status codes in one place (`heddle_api::error`).

use heddle_store::StoreError;

/// Any lower error kept as the source of a pipeline error (Kafka's, a task's).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// What the write needs cannot take it now (Kafka does not acknowledge, its metadata is
    /// unavailable, the store does not take an offloaded call); nothing was stored, and the
    /// same write may be retried later.
    #[error("{what}; the data was not stored, retry later")]
    Unavailable {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    /// One call cannot be written at all (Kafka refuses even a reference to it as too large);
    /// the other calls of the write may be retried without it.
    #[error("{0}")]
    TooLarge(String),
    /// The store refused or failed the write; it means what the store's error means.
    #[error("the store did not take the write: {0}")]
    Store(#[from] StoreError),
    /// A fault of the pipeline itself (a task that panicked, a record it cannot re-read).
    #[error("{what}")]
    Internal {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
}

impl SinkError {
    pub fn unavailable(what: impl Into<String>, source: Option<BoxError>) -> SinkError {
        SinkError::Unavailable { what: what.into(), source }
    }

    pub fn internal(what: impl Into<String>, source: impl Into<BoxError>) -> SinkError {
        SinkError::Internal { what: what.into(), source: Some(source.into()) }
    }
}
