//! Workload generation: deterministic SDK-shaped complete calls in serialised request bodies.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::client::Job;
use crate::verify::SampleCheck;

pub(crate) struct Written {
    pub(crate) jobs: Vec<Job>,
    pub(crate) ids: HashSet<String>,
    /// The first call generated, kept to compare with what comes back.
    pub(crate) sample: Value,
    pub(crate) sample_check: SampleCheck,
    pub(crate) body_bytes: usize,
    pub(crate) item_bytes: usize,
    pub(crate) inputs_bytes: usize,
    pub(crate) output_bytes: usize,
}

/// `n` complete calls for `project` in request bodies of `batch` items. Traces are one root
/// (`predict`) and `children` children; as with the SDK, children complete (and are sent) before
/// their root.
pub(crate) fn generate(
    project: &str,
    n: usize,
    batch: usize,
    children: usize,
    seed: u64,
) -> Written {
    let mut out = Written {
        jobs: Vec::with_capacity(n.div_ceil(batch)),
        ids: HashSet::with_capacity(n),
        sample: Value::Null,
        sample_check: SampleCheck::Exact,
        body_bytes: 0,
        item_bytes: 0,
        inputs_bytes: 0,
        output_bytes: 0,
    };
    for mut calls in Batches::new(project, n, batch, children, seed, Shape::default()) {
        for call in &calls {
            out.item_bytes += call.to_string().len();
            out.inputs_bytes += call["inputs"].to_string().len();
            out.output_bytes += call["output"].to_string().len();
            out.ids.insert(call["id"].as_str().unwrap_or_default().to_owned());
            if out.sample.is_null() {
                out.sample = call.clone();
            }
        }
        out.push_batch(&mut calls);
    }
    out
}

/// What the query benchmark adds to the workload.
#[derive(Clone, Default)]
pub(crate) struct Shape {
    /// One call in `fail_every` fails: it carries an `exception` and no output (0: none fail).
    pub(crate) fail_every: usize,
    /// A substring planted in the root's `inputs.question` of one trace in `every` (so about
    /// `1 / (every × calls per trace)` of the calls).
    pub(crate) needle: Option<(String, usize)>,
}

/// What was generated, for checking query answers.
#[derive(Default)]
pub(crate) struct Facts {
    pub(crate) calls: usize,
    pub(crate) traces: usize,
    pub(crate) failed: usize,
    /// Calls whose `inputs.question` holds the needle.
    pub(crate) planted: usize,
    /// Calls per op ref.
    pub(crate) ops: BTreeMap<String, usize>,
    /// Every call's `started_at`, in microseconds since the epoch.
    pub(crate) starts_us: Vec<i64>,
    /// A trace from the middle of the workload: its id and its number of calls.
    pub(crate) sample_trace: Option<(String, usize)>,
    /// The id of that trace's root call.
    pub(crate) sample_call: Option<String>,
}

/// The calls of [`generate`] (plus a [`Shape`]) one request body's worth at a time, so that a
/// large workload need not be held in memory; [`Batches::facts`] says what was made.
pub(crate) struct Batches {
    g: Gen,
    n: usize,
    batch: usize,
    children: usize,
    shape: Shape,
    made: usize,
    t0: DateTime<Utc>,
    pending: Vec<Value>,
    facts: Facts,
}

impl Batches {
    pub(crate) fn new(
        project: &str,
        n: usize,
        batch: usize,
        children: usize,
        seed: u64,
        shape: Shape,
    ) -> Batches {
        let traces = n.div_ceil(children + 1);
        Batches {
            g: Gen::new(project, seed),
            n,
            batch: batch.max(1),
            children,
            shape,
            made: 0,
            // Traces start 20 ms apart, ending about a minute ago.
            t0: Utc::now() - TimeDelta::milliseconds(20 * traces as i64 + 60_000),
            pending: Vec::with_capacity(batch),
            facts: Facts::default(),
        }
    }

    pub(crate) fn facts(self) -> Facts {
        self.facts
    }

    /// The op ref of a child op (1..) or of the root (0).
    pub(crate) fn op_ref(&self, op: usize) -> String {
        self.g.op_name(op)
    }

    fn add_trace(&mut self) {
        let size = (self.children + 1).min(self.n - self.made);
        let mut calls = self.g.trace(self.t0, size - 1);
        let trace = self.facts.traces;
        let f = &mut self.facts;
        let fail = self.shape.fail_every;
        let mut failed_children = 0;
        for (i, call) in calls.iter_mut().enumerate() {
            if fail > 0 && (f.calls + i) % fail == fail / 2 {
                call["exception"] = json!("RuntimeError: upstream model timed out after 30 s");
                call["output"] = Value::Null;
                f.failed += 1;
                failed_children += usize::from(i + 1 < size);
            }
        }
        let root = calls.last_mut().expect("a trace has a root");
        if failed_children > 0 {
            root["summary"]["status_counts"] =
                json!({"success": size - failed_children, "error": failed_children});
        }
        if let Some((needle, every)) = &self.shape.needle
            && trace % every == every / 2
        {
            let q = root["inputs"]["question"].as_str().unwrap_or_default();
            root["inputs"]["question"] = json!(format!("{q} {needle}"));
            f.planted += 1;
        }
        if trace == self.n.div_ceil(self.children + 1) / 2 {
            f.sample_trace = Some((root["trace_id"].as_str().unwrap_or_default().into(), size));
            f.sample_call = root["id"].as_str().map(str::to_owned);
        }
        for call in &calls {
            *f.ops.entry(call["op_name"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
            let started = call["started_at"].as_str().unwrap_or_default();
            let us = DateTime::parse_from_rfc3339(started).map_or(0, |t| t.timestamp_micros());
            f.starts_us.push(us);
        }
        f.calls += size;
        f.traces += 1;
        self.made += size;
        self.t0 += TimeDelta::milliseconds(20);
        self.pending.extend(calls);
    }
}

impl Iterator for Batches {
    type Item = Vec<Value>;

    fn next(&mut self) -> Option<Vec<Value>> {
        while self.pending.len() < self.batch && self.made < self.n {
            self.add_trace();
        }
        if self.pending.is_empty() {
            return None;
        }
        let take = self.batch.min(self.pending.len());
        Some(self.pending.drain(..take).collect())
    }
}

impl Written {
    fn push_batch(&mut self, pending: &mut Vec<Value>) {
        let job = job(std::mem::take(pending));
        self.body_bytes += job.body.as_ref().map_or(0, Vec::len);
        self.jobs.push(job);
    }
}

/// One `calls/complete` request of `calls`.
pub(crate) fn job(calls: Vec<Value>) -> Job {
    let n = calls.len();
    // The probe is a call in the middle of the body (any one would do; the middle avoids always
    // probing a root, which comes last in its trace).
    let probe = calls[n / 2]["id"].as_str().map(str::to_owned);
    let body = serde_json::to_vec(&json!({ "batch": calls })).expect("serialising a batch");
    Job { body: Some(body), calls: n, probe }
}

const WORDS: &[&str] = &[
    "the",
    "customer",
    "asked",
    "about",
    "refund",
    "policy",
    "for",
    "orders",
    "shipped",
    "outside",
    "the",
    "european",
    "union",
    "and",
    "whether",
    "import",
    "duties",
    "are",
    "included",
    "in",
    "final",
    "price",
    "shown",
    "at",
    "checkout",
    "our",
    "support",
    "agent",
    "should",
    "cite",
    "relevant",
    "section",
    "of",
    "terms",
    "service",
    "summarise",
    "options",
    "clearly",
    "a",
    "return",
    "label",
    "can",
    "be",
    "requested",
    "within",
    "thirty",
    "days",
    "delivery",
    "items",
    "must",
    "unused",
    "original",
    "packaging",
    "exchanges",
    "processed",
    "faster",
    "than",
    "refunds",
    "which",
    "take",
    "five",
    "to",
    "ten",
    "business",
    "depending",
    "on",
    "bank",
    "payment",
    "method",
    "gift",
    "cards",
    "store",
    "credit",
    "not",
    "eligible",
    "cash",
];

const CHILD_OPS: &[&str] =
    &["retrieve", "openai.chat.completions.create", "rerank", "format_answer"];

/// Deterministic workload text and numbers (splitmix64), so runs are comparable.
struct Gen {
    state: u64,
    project: String,
    digests: Vec<String>,
    model_ref: String,
    attributes: Value,
}

impl Gen {
    fn new(project: &str, seed: u64) -> Gen {
        let mut g = Gen {
            state: 0x9E37_79B9_7F4A_7C15 ^ seed,
            project: project.to_owned(),
            digests: Vec::new(),
            model_ref: String::new(),
            attributes: json!({"weave": {
                "client_version": "0.54.0",
                "source": "python-sdk",
                "sys_version": "3.12.3 (main, Nov  6 2025, 13:44:16) [GCC 13.3.0]",
                "os_name": "Linux",
                "os_version": "#1 SMP PREEMPT_DYNAMIC",
                "os_release": "6.8.0-51-generic",
            }}),
        };
        g.digests = (0..=CHILD_OPS.len()).map(|_| g.digest()).collect();
        g.model_ref = format!("weave:///{project}/object/SupportRAGModel:{}", g.digest());
        g
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A 43-character digest in the SDK's alphabet.
    fn digest(&mut self) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789XY";
        (0..43).map(|_| ALPHABET[self.below(64) as usize] as char).collect()
    }

    /// Words until at least `len` characters.
    fn text(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len + 16);
        while s.len() < len {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
        }
        s
    }

    fn op_name(&self, op: usize) -> String {
        let name = if op == 0 { "predict" } else { CHILD_OPS[(op - 1) % CHILD_OPS.len()] };
        let digest = &self.digests[if op == 0 { 0 } else { 1 + (op - 1) % CHILD_OPS.len() }];
        format!("weave:///{}/op/{name}:{digest}", self.project)
    }

    fn usage(&mut self) -> (u64, u64) {
        (120 + self.below(900), 40 + self.below(300))
    }

    /// One trace: `children` child calls, then the root.
    fn trace(&mut self, t0: DateTime<Utc>, children: usize) -> Vec<Value> {
        let trace_id = Uuid::now_v7().to_string();
        let root_id = Uuid::now_v7().to_string();
        let question = format!("{}?", self.text(110));
        let mut calls = Vec::with_capacity(children + 1);
        let mut t = t0 + TimeDelta::microseconds(300 + self.below(400) as i64);
        let (mut prompt_sum, mut completion_sum) = (0, 0);
        for i in 0..children {
            let dur = TimeDelta::microseconds(800 + self.below(2_500) as i64);
            let (prompt, completion) = self.usage();
            prompt_sum += prompt;
            completion_sum += completion;
            let (inputs, output) = self.child_io(i, &question, prompt, completion);
            let summary = json!({"usage": {"gpt-4o": {
                "requests": 1,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }}});
            let id = Uuid::now_v7().to_string();
            calls.push(self.call(
                &id,
                &trace_id,
                Some(&root_id),
                1 + i,
                (t, t + dur),
                inputs,
                output,
                summary,
            ));
            t += dur + TimeDelta::microseconds(50 + self.below(200) as i64);
        }
        let inputs = json!({
            "self": self.model_ref,
            "question": question,
            "context": {"customer_tier": "gold", "locale": "en-GB", "channel": "chat",
                        "history": self.text(170)},
        });
        let output = json!({
            "answer": self.text(330),
            "sources": ["terms-of-service#refunds", "faq/shipping-eu"],
            "confidence": 0.87,
        });
        let summary = json!({
            "usage": {"gpt-4o": {
                "requests": children,
                "prompt_tokens": prompt_sum,
                "completion_tokens": completion_sum,
                "total_tokens": prompt_sum + completion_sum,
            }},
            "status_counts": {"success": children + 1, "error": 0},
        });
        let end = t + TimeDelta::microseconds(100 + self.below(300) as i64);
        calls.push(self.call(&root_id, &trace_id, None, 0, (t0, end), inputs, output, summary));
        calls
    }

    fn child_io(
        &mut self,
        i: usize,
        question: &str,
        prompt: u64,
        completion: u64,
    ) -> (Value, Value) {
        match i % CHILD_OPS.len() {
            0 => (
                json!({"query": question, "k": 4, "index": "support-kb-v3",
                       "filters": {"lang": "en", "region": "eu"}, "note": self.text(200)}),
                json!({"documents": [
                    {"id": format!("doc-{}", self.below(100_000)), "score": 0.91, "text": self.text(130)},
                    {"id": format!("doc-{}", self.below(100_000)), "score": 0.84, "text": self.text(130)},
                    {"id": format!("doc-{}", self.below(100_000)), "score": 0.77, "text": self.text(100)},
                ]}),
            ),
            1 => (
                json!({"model": "gpt-4o", "temperature": 0.2, "max_tokens": 512, "messages": [
                    {"role": "system", "content": self.text(160)},
                    {"role": "user", "content": format!("{question} {}", self.text(100))},
                ]}),
                json!({
                    "id": format!("chatcmpl-{}", &Uuid::new_v4().simple().to_string()[..24]),
                    "object": "chat.completion", "model": "gpt-4o-2024-08-06",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": self.text(270)}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion},
                }),
            ),
            2 => (
                json!({"query": question, "candidates": [self.text(150), self.text(150)],
                       "top_n": 2}),
                json!({"ranked": [{"index": 1, "relevance": 0.93, "text": self.text(190)},
                                  {"index": 0, "relevance": 0.71, "text": self.text(190)}]}),
            ),
            _ => (
                json!({"draft": self.text(330), "style": "concise", "citations": true,
                       "max_chars": 1200}),
                json!({"text": self.text(400), "citations": ["[1] terms-of-service#refunds"]}),
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        id: &str,
        trace_id: &str,
        parent_id: Option<&str>,
        op: usize,
        (started, ended): (DateTime<Utc>, DateTime<Utc>),
        inputs: Value,
        output: Value,
        summary: Value,
    ) -> Value {
        json!({
            "project_id": self.project,
            "id": id,
            "trace_id": trace_id,
            "op_name": self.op_name(op),
            "started_at": rfc3339_micros(started),
            "ended_at": rfc3339_micros(ended),
            "display_name": null,
            "parent_id": parent_id,
            "thread_id": null,
            "turn_id": null,
            "attributes": self.attributes,
            "inputs": inputs,
            "output": output,
            "summary": summary,
            "otel_dump": null,
            "exception": null,
            "wb_user_id": null,
            "wb_run_id": null,
            "wb_run_step": null,
            "wb_run_step_end": null,
        })
    }
}

fn rfc3339_micros(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shaped_batches_fail_and_plant_as_the_facts_say() {
        let shape = Shape { fail_every: 50, needle: Some(("zqx".into(), 200 / 5)) };
        let mut batches = Batches::new("e/p", 10_003, 500, 4, 1, shape);
        let child_op = batches.op_ref(1);
        let calls: Vec<Value> = batches.by_ref().flatten().collect();
        let facts = batches.facts();
        assert_eq!((calls.len(), facts.calls, facts.traces), (10_003, 10_003, 2_001));
        let failed = calls.iter().filter(|c| !c["exception"].is_null()).count();
        assert_eq!((failed, facts.failed), (200, 200));
        assert!(calls.iter().filter(|c| !c["exception"].is_null()).all(|c| c["output"].is_null()));
        let planted = calls
            .iter()
            .filter(|c| c["inputs"]["question"].as_str().is_some_and(|q| q.contains("zqx")))
            .count();
        assert_eq!((planted, facts.planted), (50, 50));
        let roots = calls.iter().filter(|c| c["parent_id"].is_null()).count();
        assert_eq!(roots, facts.traces);
        let retrieve = calls.iter().filter(|c| c["op_name"] == child_op.as_str()).count();
        assert_eq!(facts.ops[&child_op], retrieve);
        let (trace, size) = facts.sample_trace.clone().unwrap();
        assert_eq!(calls.iter().filter(|c| c["trace_id"] == trace.as_str()).count(), size);
        assert_eq!(facts.starts_us.len(), calls.len());
        // A root whose children failed says so in its status counts.
        let failed_child =
            calls.iter().find(|c| !c["exception"].is_null() && c["parent_id"].is_string());
        let parent = failed_child.unwrap()["parent_id"].clone();
        let root = calls.iter().find(|c| c["id"] == parent).unwrap();
        assert!(root["summary"]["status_counts"]["error"].as_u64().unwrap() >= 1);
    }

    #[test]
    fn unshaped_batches_are_cut_at_the_batch_size() {
        let w = generate("e/p", 1_234, 100, 4, 1);
        assert_eq!(w.jobs.len(), 13);
        assert_eq!(w.jobs.iter().map(|j| j.calls).sum::<usize>(), 1_234);
        assert!(w.jobs[..12].iter().all(|j| j.calls == 100));
        assert_eq!(w.ids.len(), 1_234);
        assert!(w.sample["exception"].is_null());
    }
}
