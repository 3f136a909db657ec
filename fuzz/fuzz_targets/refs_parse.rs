//! Weave ref URIs: `refs::parse` on arbitrary text.
//!
//! Properties (docs/fuzzing.md): nothing panics; a parsed ref's fields are consistent with the
//! text (project = the first two segments, kind, table digest); written back in canonical
//! form (names and extras percent-encoded) it parses to the same ref; and a percent escape is
//! accepted only as `%` and two hex digits, as the SDK writes them and the reference server
//! reads them.
#![no_main]

use heddle_proto::objects::VersionSel;
use heddle_proto::refs::{self, Edge, Ref, SCHEME};
use libfuzzer_sys::fuzz_target;

/// Percent-encodes what the parser splits on (`/`, and `:` in a name) and `%` itself.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' | '/' | ':' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn version_text(v: &VersionSel) -> String {
    match v {
        VersionSel::Latest => "latest".into(),
        VersionSel::Index(i) => format!("v{i}"),
        VersionSel::Digest(d) => d.clone(),
    }
}

/// The ref written back in canonical form.
fn render(r: &Ref) -> String {
    match r {
        Ref::Table(t) => format!("{SCHEME}{}/table/{}", t.project, t.digest),
        Ref::Other { project, kind } => format!("{SCHEME}{project}/{kind}/x"),
        Ref::Object(o) => {
            let kind = if o.is_op { "op" } else { "object" };
            let mut uri = format!(
                "{SCHEME}{}/{kind}/{}:{}",
                o.project,
                encode(&o.name),
                version_text(&o.version)
            );
            for e in &o.extra {
                let (edge, value) = match e {
                    Edge::Key(k) => ("key", encode(k)),
                    Edge::Index(i) => ("index", i.to_string()),
                    Edge::Id(d) => ("id", encode(d)),
                };
                uri.push_str(&format!("/{edge}/{value}"));
            }
            uri
        }
    }
}

/// Whether every `%` in `s` starts an escape of two hex digits.
fn strict_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().all(|(i, c)| {
        *c != b'%'
            || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Half the inputs get the scheme for free, so the fuzzer spends its time past it.
    let uri = match text.strip_prefix('!') {
        Some(rest) => format!("{SCHEME}{rest}"),
        None => text.to_owned(),
    };
    let _ = refs::is_ref(&uri);
    let Ok(r) = refs::parse(&uri) else { return };

    let parts: Vec<&str> = uri[SCHEME.len()..].split('/').collect();
    assert_eq!(r.project().entity(), parts[0]);
    assert_eq!(r.project().project(), parts[1]);
    match &r {
        Ref::Table(t) => {
            assert_eq!(parts[2], "table");
            assert_eq!(t.digest, parts[3]);
        }
        Ref::Other { kind, .. } => assert_eq!(kind, parts[2]),
        Ref::Object(o) => {
            assert_eq!(parts[2], if o.is_op { "op" } else { "object" });
            assert!(!o.name.is_empty());
            let name = parts[3].rsplit_once(':').map_or(parts[3], |(n, _)| n);
            let extras = parts[4..].iter().skip(1).step_by(2);
            for s in std::iter::once(&name).chain(extras) {
                assert!(strict_escapes(s), "a malformed escape in {s:?} was decoded: {r:?}");
            }
        }
    }
    let again = render(&r);
    assert_eq!(refs::parse(&again).ok().as_ref(), Some(&r), "{again:?} reads differently");
});
