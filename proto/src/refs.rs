//! Weave ref URIs (docs/api/refs.md#ref-uris, docs/api/refs.md#read-a-batch-of-refs):
//! `weave:///<entity>/<project>/<kind>/...`.
//!
//! Object and op refs are `.../object/<name>:<version>[/<edge>/<value>]*`; the name and every
//! extra are percent-encoded by the SDK (`/` → `%2F`), so the URI is split at `/` first and each
//! part decoded afterwards, like the SDK and the reference server do. Table refs are
//! `.../table/<digest>`. Parsing is strict where the reference server is (odd extras, unknown
//! edges, non-numeric indexes → 400).

use serde::Deserialize;

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::objects::VersionSel;

pub const SCHEME: &str = "weave:///";

/// Most refs one `/refs/read_batch` may ask for (the reference server's limit).
pub use crate::limits::MAX_REFS_PER_BATCH;

#[derive(Debug, Deserialize)]
pub struct RefsReadBatchReq {
    pub refs: Vec<String>,
}

/// One step of a ref's path into a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edge {
    /// A dict key (`key`) or an object attribute (`attr`, a key of the stored dict).
    Key(String),
    /// A list index (`index`).
    Index(i64),
    /// A table row by row digest (`id`).
    Id(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub project: ProjectId,
    /// `op` refs name ops; both resolve through the same object versions.
    pub is_op: bool,
    pub name: String,
    pub version: VersionSel,
    pub extra: Vec<Edge>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRef {
    pub project: ProjectId,
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    Object(ObjectRef),
    Table(TableRef),
    /// Call refs (and other kinds) parse but cannot be read through `/refs/read_batch`.
    Other {
        project: ProjectId,
        kind: String,
    },
}

impl Ref {
    pub fn project(&self) -> &ProjectId {
        match self {
            Ref::Object(r) => &r.project,
            Ref::Table(r) => &r.project,
            Ref::Other { project, .. } => project,
        }
    }
}

fn bad(uri: &str, why: &str) -> ProtoError {
    ProtoError::invalid(format!("invalid ref {uri:?}: {why}"))
}

/// Whether a stored string is a ref to follow (values keep refs as plain strings).
pub fn is_ref(s: &str) -> bool {
    s.starts_with(SCHEME)
}

pub fn parse(uri: &str) -> Result<Ref, ProtoError> {
    let path = uri.strip_prefix(SCHEME).ok_or_else(|| bad(uri, "must start with weave:///"))?;
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() < 4 {
        return Err(bad(uri, "expected weave:///<entity>/<project>/<kind>/<name>"));
    }
    let project =
        ProjectId::from_parts(parts[0], parts[1]).map_err(|e| bad(uri, &e.to_string()))?;
    let (kind, rest) = (parts[2], &parts[3..]);
    match kind {
        "table" => {
            if rest.len() != 1 || rest[0].is_empty() {
                return Err(bad(uri, "a table ref is weave:///<entity>/<project>/table/<digest>"));
            }
            Ok(Ref::Table(TableRef { project, digest: rest[0].to_owned() }))
        }
        "object" | "op" => {
            let (name, version) = match rest[0].rsplit_once(':') {
                Some((name, version)) => (name, version),
                None => (rest[0], "latest"),
            };
            let name = decode(name).ok_or_else(|| bad(uri, "bad percent-encoding in the name"))?;
            if name.is_empty() || version.is_empty() {
                return Err(bad(uri, "empty name or version"));
            }
            let mut extra_parts = &rest[1..];
            if extra_parts == [""] {
                extra_parts = &[]; // a trailing slash
            }
            let extra = parse_extra(uri, extra_parts)?;
            Ok(Ref::Object(ObjectRef {
                project,
                is_op: kind == "op",
                name,
                version: VersionSel::parse(version),
                extra,
            }))
        }
        other => Ok(Ref::Other { project, kind: other.to_owned() }),
    }
}

fn parse_extra(uri: &str, parts: &[&str]) -> Result<Vec<Edge>, ProtoError> {
    if !parts.len().is_multiple_of(2) {
        return Err(bad(uri, "extras must be <edge>/<value> pairs"));
    }
    parts
        .chunks(2)
        .map(|pair| {
            let value = decode(pair[1]).ok_or_else(|| bad(uri, "bad percent-encoding"))?;
            match pair[0] {
                "key" | "attr" => Ok(Edge::Key(value)),
                "index" => value
                    .parse::<i64>()
                    .map(Edge::Index)
                    .map_err(|_| bad(uri, &format!("index {value:?} is not an integer"))),
                "id" => Ok(Edge::Id(value)),
                other => Err(bad(uri, &format!("unknown edge {other:?}"))),
            }
        })
        .collect()
}

/// Percent-decoding (`%2F` → `/`); `None` for a malformed escape or invalid UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            // Exactly two hex digits: `from_str_radix` alone also takes a sign, and read
            // `%+5` as byte 5 (found by fuzzing, docs/fuzzing.md).
            let hex = b.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ProjectId {
        ProjectId::parse(s).unwrap()
    }

    #[test]
    fn parses_object_refs_with_extras() {
        let r =
            parse("weave:///ent/proj/object/my_ds:abc/attr/rows/id/XYZ/key/a%2Fb%3Ac%25").unwrap();
        assert_eq!(
            r,
            Ref::Object(ObjectRef {
                project: p("ent/proj"),
                is_op: false,
                name: "my_ds".into(),
                version: VersionSel::Digest("abc".into()),
                extra: vec![
                    Edge::Key("rows".into()),
                    Edge::Id("XYZ".into()),
                    Edge::Key("a/b:c%".into())
                ],
            })
        );
        let r = parse("weave:///e/p/op/f%20g:v2/index/3").unwrap();
        let Ref::Object(o) = r else { panic!() };
        assert!(o.is_op);
        assert_eq!((o.name.as_str(), o.version), ("f g", VersionSel::Index(2)));
        assert_eq!(o.extra, [Edge::Index(3)]);
        let Ref::Object(o) = parse("weave:///e/p/object/x").unwrap() else { panic!() };
        assert_eq!(o.version, VersionSel::Latest);
        let Ref::Object(o) = parse("weave:///e/p/object/x:d/").unwrap() else { panic!() };
        assert!(o.extra.is_empty(), "a trailing slash adds no extras");
    }

    #[test]
    fn parses_tables_and_other_kinds() {
        assert_eq!(
            parse("weave:///e/p/table/abc").unwrap(),
            Ref::Table(TableRef { project: p("e/p"), digest: "abc".into() })
        );
        assert!(matches!(parse("weave:///e/p/call/123").unwrap(), Ref::Other { .. }));
    }

    #[test]
    fn rejects_malformed_refs() {
        for bad in [
            "",
            "weave://e/p/object/x:1",
            "http:///e/p/object/x:1",
            "weave:///e/p",
            "weave:///e/p/object",
            "weave:///e//object/x:1",
            "weave:///e/p/object/x:1/key",
            "weave:///e/p/object/x:1/bogus/1",
            "weave:///e/p/object/x:1/index/one",
            "weave:///e/p/object/x:1/key/%zz",
            "weave:///e/p/object/:1",
            "weave:///e/p/object/x:",
            "weave:///e/p/table/",
            "weave:///e/p/table/a/b",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn escapes_are_two_hex_digits_not_signed_numbers() {
        // Found by fuzzing (docs/fuzzing.md): `%+2` decoded as byte 2.
        for bad in
            ["weave:///n/o/object/%+25", "weave:///e/p/object/x:1/key/a%+f", "weave:///e/p/op/%-1"]
        {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let Ref::Object(o) = parse("weave:///e/p/object/a%2b%2F:v1/key/%e2%9c%93").unwrap() else {
            panic!()
        };
        assert_eq!((o.name.as_str(), o.extra), ("a+/", vec![Edge::Key("\u{2713}".into())]));
    }
}
