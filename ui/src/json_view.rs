//! JSON values as collapsible trees, weave refs as links, and LLM messages as a chat. Every
//! rendering is bounded (nodes and characters), so a 10 MB input cannot make a page that
//! freezes the browser (docs/ui.md, "Bounds").

use maud::{Markup, html};
use serde_json::Value;

use crate::fmt::{self, enc};

/// Nodes one value renders at most; the rest is summarised.
pub const MAX_NODES: usize = 2_000;
/// Characters of one string shown.
pub const MAX_STRING: usize = 4_000;
/// Levels open when the page loads.
const OPEN_LEVELS: usize = 2;

/// A value as a tree.
pub fn tree(v: &Value) -> Markup {
    let mut budget = MAX_NODES;
    html! { div.json { (node(v, 0, &mut budget)) } }
}

/// JSON text (as stored) as a tree; text that does not parse is shown as it is.
pub fn tree_text(text: &str) -> Markup {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => tree(&v),
        Err(_) => html! { pre.json { (fmt::cut(text, MAX_STRING).0) } },
    }
}

fn node(v: &Value, depth: usize, budget: &mut usize) -> Markup {
    if *budget == 0 {
        return html! { span.muted { "…" } };
    }
    *budget -= 1;
    match v {
        Value::Null => html! { span.j-null { "null" } },
        Value::Bool(b) => html! { span.j-bool { (b) } },
        Value::Number(n) => html! { span.j-num { (n.to_string()) } },
        Value::String(s) => string(s),
        Value::Array(items) if items.is_empty() => html! { span.muted { "[]" } },
        Value::Object(map) if map.is_empty() => html! { span.muted { "{}" } },
        Value::Array(items) => {
            let mut children = Vec::new();
            for item in items {
                if *budget == 0 {
                    children.push(html! { li.muted { "… more not shown" } });
                    break;
                }
                children.push(html! { li { (node(item, depth + 1, budget)) } });
            }
            html! {
                details open[depth < OPEN_LEVELS] {
                    summary { span.muted { "[" (items.len()) " items]" } }
                    ol.j-list start="0" { @for c in children { (c) } }
                }
            }
        }
        Value::Object(map) => {
            let mut children = Vec::new();
            for (k, item) in map {
                if *budget == 0 {
                    children.push(html! { dt.muted { "… more not shown" } dd {} });
                    break;
                }
                children.push(html! { dt { (k) } dd { (node(item, depth + 1, budget)) } });
            }
            html! {
                details open[depth < OPEN_LEVELS] {
                    summary { span.muted { "{" (map.len()) " keys}" } }
                    dl.j-map { @for c in children { (c) } }
                }
            }
        }
    }
}

fn string(s: &str) -> Markup {
    if let Some(href) = ref_link(s) {
        return html! { a.j-ref href=(href) { (s) } };
    }
    let (shown, rest) = fmt::cut(s, MAX_STRING);
    html! {
        span.j-str { (shown) }
        @if rest > 0 { span.muted { " … (" (fmt::int(rest as u64)) " more characters)" } }
    }
}

/// The page of a weave ref: objects and ops (`weave:///e/p/object/name:digest...`) and calls.
pub fn ref_link(s: &str) -> Option<String> {
    let rest = s.strip_prefix("weave:///")?;
    let mut parts = rest.splitn(4, '/');
    let (entity, project, kind, tail) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let base = format!("/{}/{}", enc(entity), enc(project));
    match kind {
        "object" | "op" => {
            let name_digest = tail.split('/').next()?;
            let (name, digest) = name_digest.split_once(':')?;
            let section = if kind == "op" { "ops" } else { "objects" };
            Some(format!("{base}/weave/{section}/{}/versions/{}", enc(name), enc(digest)))
        }
        "call" => Some(format!("{base}/r/call/{}", enc(tail.split('/').next()?))),
        _ => None,
    }
}

/// One message of a conversation.
pub struct Message {
    pub role: String,
    pub text: String,
}

/// The messages in a value shaped like LLM messages: a list of `{role, content}` (OpenAI,
/// Anthropic, GenAI `parts`), an OpenAI response's `choices[].message`, or either under one
/// top-level key (how OpenTelemetry spans store them, docs/otlp.md).
pub fn messages(v: &Value) -> Option<Vec<Message>> {
    if let Some(m) = message_list(v) {
        return Some(m);
    }
    if let Some(choices) = v.get("choices").and_then(Value::as_array) {
        let m: Vec<Message> =
            choices.iter().filter_map(|c| c.get("message")).filter_map(message).collect();
        if !m.is_empty() {
            return Some(m);
        }
    }
    if v.get("role").is_some() && v.get("content").is_some() {
        return message(v).map(|m| vec![m]);
    }
    let obj = v.as_object()?;
    let mut out = Vec::new();
    for item in obj.values() {
        if let Some(m) = message_list(item) {
            out.extend(m);
        } else if let Some(choices) = item.get("choices").and_then(Value::as_array) {
            out.extend(choices.iter().filter_map(|c| c.get("message")).filter_map(message));
        }
    }
    (!out.is_empty()).then_some(out)
}

fn message_list(v: &Value) -> Option<Vec<Message>> {
    let items = v.as_array()?;
    if items.is_empty() || !items.iter().all(|m| m.get("role").is_some_and(Value::is_string)) {
        return None;
    }
    Some(items.iter().filter_map(message).collect())
}

fn message(m: &Value) -> Option<Message> {
    let role = m.get("role")?.as_str()?.to_owned();
    let text = match m.get("content").or_else(|| m.get("parts")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                p => p
                    .get("text")
                    .or_else(|| p.get("content"))
                    .and_then(Value::as_str)
                    .map_or_else(|| p.to_string(), str::to_owned),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => {
            m.get("tool_calls").map_or_else(String::new, |t| format!("tool calls: {t}"))
        }
        Some(other) => other.to_string(),
    };
    Some(Message { role, text })
}

pub fn chat(messages: &[Message]) -> Markup {
    html! {
        ol.chat {
            @for m in messages {
                li class={"msg role-" (css_role(&m.role))} {
                    span.role { (m.role) }
                    div.text { (fmt::cut(&m.text, MAX_STRING * 4).0) }
                }
            }
        }
    }
}

fn css_role(role: &str) -> &'static str {
    match role {
        "user" | "human" => "user",
        "assistant" | "ai" | "model" => "assistant",
        "system" | "developer" => "system",
        "tool" | "function" => "tool",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn refs_become_page_links() {
        assert_eq!(
            ref_link("weave:///acme/demo/object/ds:abc/attr/rows/id/x").as_deref(),
            Some("/acme/demo/weave/objects/ds/versions/abc")
        );
        assert_eq!(
            ref_link("weave:///acme/demo/op/f:d1").as_deref(),
            Some("/acme/demo/weave/ops/f/versions/d1")
        );
        assert_eq!(ref_link("weave:///acme/demo/call/c1").as_deref(), Some("/acme/demo/r/call/c1"));
        assert_eq!(ref_link("weave:///acme/demo/table/t"), None);
        assert_eq!(ref_link("http://x"), None);
    }

    #[test]
    fn messages_in_common_shapes() {
        let openai = json!({"messages": [{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
        let m = messages(&openai).unwrap();
        assert_eq!((m[0].role.as_str(), m[1].text.as_str()), ("system", "hi"));
        let resp = json!({"choices": [{"message": {"role": "assistant", "content": "hello"}}]});
        assert_eq!(messages(&resp).unwrap()[0].text, "hello");
        let genai = json!({"gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "q"}]}]});
        assert_eq!(messages(&genai).unwrap()[0].text, "q");
        assert!(messages(&json!({"a": 1, "b": [1, 2]})).is_none());
    }

    #[test]
    fn trees_are_bounded() {
        let big = Value::Array((0..10_000).map(|i| json!(i)).collect());
        let html = tree(&big).into_string();
        assert!(html.contains("more not shown"));
        assert!(html.matches("<li>").count() <= MAX_NODES);
        let long = tree(&json!("x".repeat(10_000))).into_string();
        assert!(long.contains("6,000 more characters"));
    }
}
