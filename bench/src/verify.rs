//! Read-back verification of the streamed calls against what was written.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use crate::client::{StreamRead, clip};

#[derive(Deserialize)]
struct CallRow {
    id: String,
    project_id: String,
    #[serde(default)]
    trace_id: Value,
    #[serde(default)]
    parent_id: Value,
    #[serde(default)]
    op_name: Value,
    #[serde(default)]
    inputs: Value,
    #[serde(default)]
    output: Value,
    #[serde(default)]
    attributes: Value,
    #[serde(default)]
    summary: Value,
    #[serde(default)]
    ended_at: Value,
}

/// How the sample call is compared with its row.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SampleCheck {
    /// `trace_id`, `parent_id`, `op_name`, `inputs`, `output`, `attributes` and `summary.usage`
    /// equal to what was written (calls sent as they are stored).
    Exact,
    /// Every member of the sample is in the row, recursively (objects may hold more members):
    /// for spans, whose calls the server derives and adds to.
    Subset,
}

pub(crate) fn verify_stream(
    read: &StreamRead,
    project: &str,
    written: &HashSet<String>,
    sample: &Value,
    check: SampleCheck,
    problems: &mut Vec<String>,
) {
    let mut say = |p: String| problems.push(format!("calls/stream_query: {p}"));
    if read.lines != written.len() {
        say(format!("streamed {} lines, but {} calls were sent", read.lines, written.len()));
    }
    if !read.content_type.starts_with("application/jsonl") {
        say(format!("Content-Type is {:?}, expected application/jsonl", read.content_type));
    }
    let body = read.body.strip_suffix(b"\n").unwrap_or(&read.body);
    if body.is_empty() {
        return;
    }
    let mut seen = HashSet::with_capacity(written.len());
    let (mut blank, mut bad_json, mut foreign, mut unknown, mut dupes, mut running) =
        (0, 0, 0, 0, 0, 0);
    let mut first_bad = None;
    for line in body.split(|&b| b == b'\n') {
        if line.is_empty() || line == b"\r" {
            blank += 1;
            continue;
        }
        let row: CallRow = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                bad_json += 1;
                first_bad.get_or_insert_with(|| {
                    format!("{e}: {}", clip(&String::from_utf8_lossy(line)))
                });
                continue;
            }
        };
        if row.project_id != project {
            foreign += 1;
        }
        if row.ended_at.is_null() {
            running += 1;
        }
        if !written.contains(&row.id) {
            unknown += 1;
        }
        if sample["id"].as_str() == Some(row.id.as_str()) {
            match check {
                SampleCheck::Exact => compare_sample(sample, &row, &mut say),
                SampleCheck::Subset => match serde_json::from_slice::<Value>(line) {
                    Ok(full) => compare_subset(sample, &full, &row.id, &mut say),
                    Err(e) => say(format!("call {}: {e}", row.id)),
                },
            }
        }
        if !seen.insert(row.id) {
            dupes += 1;
        }
    }
    let missing = written.len() - written.iter().filter(|id| seen.contains(*id)).count();
    for (n, what) in [
        (blank, "blank lines (the SDK's parser raises on them)"),
        (bad_json, "lines that are not a Call JSON object"),
        (foreign, "rows whose project_id is not the queried project"),
        (unknown, "rows with an id that was never written"),
        (dupes, "duplicate rows"),
        (missing, "written calls missing from the stream"),
        (running, "rows without ended_at (written as complete calls)"),
    ] {
        if n > 0 {
            say(format!("{n} {what}"));
        }
    }
    if let Some(b) = first_bad {
        say(format!("first unparsable line: {b}"));
    }
    if !seen.contains(sample["id"].as_str().unwrap_or_default()) {
        say("the sample call was not in the stream".into());
    }
}

fn compare_sample(sample: &Value, row: &CallRow, say: &mut impl FnMut(String)) {
    for (field, got) in [
        ("trace_id", &row.trace_id),
        ("parent_id", &row.parent_id),
        ("op_name", &row.op_name),
        ("inputs", &row.inputs),
        ("output", &row.output),
        ("attributes", &row.attributes),
    ] {
        if &sample[field] != got {
            say(format!(
                "call {}: {field} came back as {} but was written as {}",
                row.id,
                clip(&got.to_string()),
                clip(&sample[field].to_string())
            ));
        }
    }
    if sample["summary"]["usage"] != row.summary["usage"] {
        say(format!(
            "call {}: summary.usage came back as {} but was written as {}",
            row.id, row.summary["usage"], sample["summary"]["usage"]
        ));
    }
}

/// Reports every member of `expected` that `got` lacks or holds with another value.
fn compare_subset(expected: &Value, got: &Value, id: &str, say: &mut impl FnMut(String)) {
    fn walk(path: &str, e: &Value, g: &Value, out: &mut Vec<String>) {
        match (e, g) {
            (Value::Object(e), Value::Object(g)) => {
                for (k, ev) in e {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    match g.get(k) {
                        Some(gv) => walk(&p, ev, gv, out),
                        None => {
                            out.push(format!("{p} is missing (expected {})", clip(&ev.to_string())))
                        }
                    }
                }
            }
            _ if e == g => {}
            _ => out.push(format!(
                "{path} came back as {} but was sent as {}",
                clip(&g.to_string()),
                clip(&e.to_string())
            )),
        }
    }
    let mut found = Vec::new();
    walk("", expected, got, &mut found);
    for f in found.into_iter().take(10) {
        say(format!("call {id}: {f}"));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn subset_check_reports_missing_and_different_members_only() {
        let expected = json!({"id": "a", "attributes": {"model": "m", "server": {"port": 443}}});
        let mut found = Vec::new();
        let got = json!({"id": "a", "extra": 1,
                         "attributes": {"model": "m", "more": 2, "server": {"port": 443}}});
        compare_subset(&expected, &got, "a", &mut |p| found.push(p));
        assert!(found.is_empty(), "{found:?}");
        let got = json!({"id": "a", "attributes": {"model": "n"}});
        compare_subset(&expected, &got, "a", &mut |p| found.push(p));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("attributes.model came back as \"n\""), "{}", found[0]);
        assert!(found[1].contains("attributes.server is missing"), "{}", found[1]);
    }
}
