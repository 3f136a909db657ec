//! OTLP resources stored once per project (docs/storage.md#otlp-resources).
//!
//! Every span of an OTLP request carries its resource (service, SDK, host, process, ...) in its
//! `otel_dump`, the same few hundred bytes or more for each span of a process. The store keeps
//! each distinct resource once, in `otel_resources`, and the row of a span names it in
//! `calls.otel_resource`; its `otel_dump` keeps the member with `null` in its place. Reading the
//! call puts the resource back where it was, so the dump reads back byte for byte as written.
//!
//! Only a top-level `resource` object of at least [`SHARED_BYTES`] is taken out, and only when
//! the dump names it once: a dump sent by a client with any other shape is stored as sent.

use std::ops::Range;

use heddle_proto::calls::OtelDump;
use rusqlite::Connection;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::writer::rowid_or_insert;

/// Resources smaller than this stay in the dump: a key of their own would not save anything.
const SHARED_BYTES: usize = 64;

/// The `resource` member of a dump, `null` included (an `Option` would read it as absent).
/// `serde` refuses a dump that names it twice, or not at all: such a dump is stored as sent.
#[derive(Deserialize)]
struct Member<'a> {
    #[serde(borrow)]
    resource: &'a RawValue,
}

/// Where the text of the top-level `resource` value lies in `dump`.
fn resource_span(dump: &str) -> Option<Range<usize>> {
    let value = serde_json::from_str::<Member<'_>>(dump).ok()?.resource.get();
    // The value borrows from `dump`: its place is the distance between the two.
    let start = value.as_ptr() as usize - dump.as_ptr() as usize;
    Some(start..start + value.len())
}

/// A dump with its resource taken out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// The dump with `null` in the resource's place.
    pub rest: String,
    /// Where the resource's text lies in the dump it was split from.
    pub resource: Range<usize>,
}

/// Takes the resource out of `dump`; `None` keeps the dump as it is. The resource's place is
/// the one the dump's writer kept, or else read from the dump.
pub(crate) fn split(dump: &OtelDump) -> Option<Split> {
    let resource = dump.resource().or_else(|| resource_span(dump))?;
    let text = &dump[resource.clone()];
    if text.len() < SHARED_BYTES || !text.starts_with('{') {
        return None;
    }
    let mut rest = String::with_capacity(dump.len() - text.len() + 4);
    rest.push_str(&dump[..resource.start]);
    rest.push_str("null");
    rest.push_str(&dump[resource.end..]);
    Some(Split { rest, resource })
}

/// The dump as it was written: `resource` put back in the place [`split`] left `null`.
pub(crate) fn join(dump: &str, resource: &str) -> Option<String> {
    let span = resource_span(dump).filter(|s| &dump[s.clone()] == "null")?;
    let mut whole = String::with_capacity(dump.len() + resource.len());
    whole.push_str(&dump[..span.start]);
    whole.push_str(resource);
    whole.push_str(&dump[span.end..]);
    Some(whole)
}

/// The text of the resource taken out of the `otel_dump` of the `calls` row at hand, as an SQL
/// expression: NULL for a dump stored whole, without running the subquery (most rows).
pub(crate) const RESOURCE_OF_ROW: &str = "IIF(calls.otel_resource IS NULL, NULL, \
     (SELECT resource FROM otel_resources WHERE id = calls.otel_resource))";

const SELECT: &str = "SELECT id FROM otel_resources WHERE project_key = ?1 AND resource = ?2";
const INSERT: &str = "INSERT INTO otel_resources (project_key, resource) VALUES (?1, ?2)";

/// The id of `resource` in the project of key `project`, stored now if it is new: in the
/// caller's transaction, which writes the spans naming it.
pub(crate) fn key(conn: &Connection, project: i64, resource: &str) -> rusqlite::Result<i64> {
    rowid_or_insert(conn, SELECT, INSERT, &[&project, &resource])
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESOURCE: &str = r#"{"attributes":{"service":{"name":"support-agent","version":"2.14.0"},"host":{"name":"worker-0"}},"dropped_attributes_count":0}"#;

    #[test]
    fn a_split_dump_joins_back_to_the_same_text() {
        let dump = format!(
            r#"{{"name":"chat","attributes":{{"resource":1}},"resource":{RESOURCE},"scope":{{"name":"s"}}}}"#
        );
        let Split { rest, resource } = split(&dump.clone().into()).unwrap();
        assert_eq!(&dump[resource], RESOURCE);
        assert_eq!(
            rest,
            r#"{"name":"chat","attributes":{"resource":1},"resource":null,"scope":{"name":"s"}}"#
        );
        assert_eq!(join(&rest, RESOURCE).unwrap(), dump);
        // Whitespace around the value stays where it was.
        let spaced = format!("{{ \"resource\" : {RESOURCE} , \"x\": [1] }}");
        let Split { rest, resource } = split(&spaced.clone().into()).unwrap();
        assert_eq!(join(&rest, &spaced[resource]).unwrap(), spaced);
    }

    #[test]
    fn other_shapes_are_kept_as_sent() {
        let small = r#"{"resource":{"attributes":{}},"name":"x"}"#;
        let repeated = format!(r#"{{"resource":{RESOURCE},"resource":{RESOURCE}}}"#);
        let not_object = format!(r#"{{"resource":"{}"}}"#, "r".repeat(100));
        for dump in [small, &repeated, &not_object, "[1,2]", "null", r#"{"name":"x"}"#] {
            assert_eq!(split(&dump.to_owned().into()), None, "{dump}");
        }
        // A dump whose resource is not the `null` split left is not joined.
        assert_eq!(join(&format!(r#"{{"resource":{RESOURCE}}}"#), RESOURCE), None);
    }
}
