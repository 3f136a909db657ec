//! Conversions of stored values that several resources share.

use heddle_proto::ProjectId;
use serde_json::value::RawValue;

/// Stored JSON text as a raw value. The text was valid JSON when stored; a failure here means
/// the database was changed behind heddle's back.
pub(super) fn raw(json: Option<String>) -> rusqlite::Result<Option<Box<RawValue>>> {
    json.map(|s| {
        RawValue::from_string(s).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))
    })
    .transpose()
}

pub(super) fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("valid JSON")
}

/// A stored project id.
pub(super) fn project_id(text: &str) -> rusqlite::Result<ProjectId> {
    ProjectId::parse(text).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))
}
