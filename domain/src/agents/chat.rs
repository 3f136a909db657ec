//! The chat view of a trace (docs/api/agents.md#chat): the trace's spans as one ordered
//! timeline of messages. The user's prompt first, then a walk of the span tree in start order:
//! an `invoke_agent` span opens with `agent_start` and closes with its answer, an
//! `execute_tool` span is a `tool_call`, any other span with output text an
//! `assistant_message`.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::span::{AgentSpan, INVOKE_AGENT};
use super::views::assistant_text;
use heddle_proto::time::Micros;

/// Deepest span nesting the walk follows (deeper spans are left out).
pub const MAX_WALK_DEPTH: usize = 200;

fn t(m: Option<Micros>) -> Value {
    m.map_or(Value::Null, |m| m.to_rfc3339().into())
}

fn message(kind: &str, s: &AgentSpan, agent: Option<&str>, payload: Value) -> Value {
    let mut m = json!({
        "type": kind,
        "span_id": s.span_id,
        "agent_name": agent,
        "agent_version": s.agent_version,
        "started_at": t(s.started_at),
        "status_code": s.status_code,
        "status_message": s.status_message,
        "error_type": s.error_type,
        "feedback": null,
    });
    m[kind] = payload;
    m
}

struct Walk<'a> {
    spans: &'a [AgentSpan],
    children: HashMap<&'a str, Vec<usize>>,
    out: Vec<Value>,
    last_text: Option<String>,
}

impl<'a> Walk<'a> {
    fn assistant(&mut self, s: &AgentSpan, agent: Option<&str>) {
        let text = assistant_text(s);
        // An agent's answer is usually its last model call's: say it once.
        if text.is_empty() || self.last_text.as_deref() == Some(text.as_str()) {
            return;
        }
        self.out.push(message(
            "assistant_message",
            s,
            agent,
            json!({
                "text": text,
                "model": s.response_model.clone().or_else(|| s.request_model.clone()),
                "reasoning_content": s.reasoning_content,
                "reasoning_tokens": s.reasoning_tokens,
                "input_tokens": s.input_tokens,
                "output_tokens": s.output_tokens,
                "duration_ms": s.duration_ms(),
                "status": s.status_code,
                "content_refs": [],
                "input_cost_usd": null, "output_cost_usd": null, "total_cost_usd": null,
            }),
        ));
        self.last_text = Some(text);
    }

    fn walk(&mut self, i: usize, nearest_agent: Option<&'a str>, depth: usize) {
        if depth > MAX_WALK_DEPTH {
            return;
        }
        let s = &self.spans[i];
        let agent = s.agent_name.as_deref().or(nearest_agent);
        let kids = self.children.get(s.span_id.as_str()).cloned().unwrap_or_default();
        match s.operation_name.as_deref() {
            Some(INVOKE_AGENT) => {
                self.out.push(message(
                    "agent_start",
                    s,
                    agent,
                    json!({
                        "model": s.request_model,
                        "status": s.status_code,
                        "system_instructions": (!s.system_instructions.is_empty())
                            .then(|| s.system_instructions.join("\n")),
                        "tool_definitions": s.tool_definitions,
                    }),
                ));
                for k in kids {
                    self.walk(k, agent, depth + 1);
                }
                self.assistant(s, agent);
            }
            Some("execute_tool") => {
                let name = s.tool_name.clone().or_else(|| {
                    s.span_name.as_deref().map(|n| n.trim_start_matches("execute_tool ").to_owned())
                });
                self.out.push(message(
                    "tool_call",
                    s,
                    agent,
                    json!({
                        "tool_name": name,
                        "tool_arguments": s.tool_call_arguments,
                        "tool_result": s.tool_call_result,
                        "duration_ms": s.duration_ms(),
                        "status": s.status_code,
                        "content_refs": [],
                    }),
                ));
                for k in kids {
                    self.walk(k, agent, depth + 1);
                }
            }
            _ => {
                for k in kids {
                    self.walk(k, agent, depth + 1);
                }
                self.assistant(s, agent);
            }
        }
    }
}

/// Token totals count each span that reports tokens unless a descendant does too (an agent
/// span often repeats the sum of its model calls).
fn leaf_reporting(spans: &[AgentSpan], children: &HashMap<&str, Vec<usize>>) -> Vec<usize> {
    fn reports(s: &AgentSpan) -> bool {
        s.input_tokens.is_some() || s.output_tokens.is_some()
    }
    fn below(i: usize, spans: &[AgentSpan], ch: &HashMap<&str, Vec<usize>>, d: usize) -> bool {
        d < MAX_WALK_DEPTH
            && ch.get(spans[i].span_id.as_str()).is_some_and(|k| {
                k.iter().any(|&c| reports(&spans[c]) || below(c, spans, ch, d + 1))
            })
    }
    (0..spans.len()).filter(|&i| reports(&spans[i]) && !below(i, spans, children, 0)).collect()
}

/// The chat view of one trace's spans.
pub fn trace_chat(trace_id: &str, spans: &[AgentSpan]) -> Value {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| {
        spans[a]
            .started_at
            .cmp(&spans[b].started_at)
            .then_with(|| spans[a].span_id.cmp(&spans[b].span_id))
    });
    let ids: std::collections::HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for &i in &order {
        match spans[i].parent_span_id.as_deref().filter(|p| ids.contains(p)) {
            Some(p) => children.entry(p).or_default().push(i),
            None => roots.push(i),
        }
    }
    let mut w = Walk { spans, children, out: Vec::new(), last_text: None };
    // The prompt: the last user message of the first agent invocation that has one, else of
    // any span.
    let prompt = [true, false].into_iter().find_map(|invocations_only| {
        order.iter().map(|&i| &spans[i]).find_map(|s| {
            if invocations_only && !s.is_invocation() {
                return None;
            }
            let m = s
                .input_messages
                .iter()
                .rev()
                .find(|m| m.role == "user" && !m.content.is_empty())?;
            Some((s, m.content.clone()))
        })
    });
    if let Some((s, text)) = prompt {
        let mut m =
            message("user_message", s, Some("User"), json!({"text": text, "content_refs": []}));
        for k in ["span_id", "agent_version", "status_code", "status_message", "error_type"] {
            m[k] = Value::Null;
        }
        w.out.push(m);
    }
    for &r in &roots {
        w.walk(r, None, 0);
    }
    let leaves = leaf_reporting(spans, &w.children);
    let sum = |f: fn(&AgentSpan) -> Option<i64>| {
        leaves.iter().map(|&i| f(&spans[i]).unwrap_or(0)).sum::<i64>()
    };
    let root = roots.first().map(|&i| &spans[i]);
    let first_agent = order.iter().map(|&i| &spans[i]).find(|s| s.agent_name.is_some());
    json!({
        "trace_id": trace_id,
        "messages": w.out,
        "agent_name": first_agent.and_then(|s| s.agent_name.clone()),
        "agent_version": first_agent.and_then(|s| s.agent_version.clone()),
        "root_span_name": root.and_then(|r| r.agent_name.clone().or_else(|| r.span_name.clone())),
        "provider": root.and_then(|r| r.provider_name.clone())
            .or_else(|| spans.iter().find_map(|s| s.provider_name.clone())),
        "started_at": t(root.and_then(|r| r.started_at)),
        "ended_at": t(root.and_then(|r| r.ended_at)),
        "status_code": root.and_then(|r| r.status_code.clone()),
        "total_duration_ms": root.map(AgentSpan::duration_ms),
        "total_input_tokens": sum(|s| s.input_tokens),
        "total_output_tokens": sum(|s| s.output_tokens),
        "total_reasoning_tokens": sum(|s| s.reasoning_tokens),
        "total_cache_read_input_tokens": sum(|s| s.cache_read_input_tokens),
        "total_cache_creation_input_tokens": sum(|s| s.cache_creation_input_tokens),
        "total_cost_usd": null,
        "wb_user_id": root.and_then(|r| r.wb_user_id.clone()),
        "feedback": null,
    })
}
