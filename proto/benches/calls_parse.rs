//! Time of reading a `calls/complete` batch, per call, for calls shaped like `heddle-bench`'s (a
//! root and four children per trace, inputs and outputs of a few hundred bytes of prose): the
//! pass that charges a body by its shape before it is parsed (`shape`), and parsing the batch
//! into call parts, each member checked (`parse`, what the endpoint does after it: the body is
//! checked as UTF-8 once, then read as text).
//! `cargo bench -p heddle-proto --bench calls_parse`; the whole-server figures are
//! `heddle-bench`'s (docs/benchmarks.md).

use std::hint::black_box;
use std::time::Instant;

use heddle_proto::calls::CompleteCall;
use heddle_proto::limits::{MAX_JSON_DEPTH, json_shape};
use serde::Deserialize;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CALLS: usize = 500;
const ROUNDS: usize = 40;

const WORDS: &[&str] = &[
    "the",
    "order",
    "shipped",
    "refund",
    "customer",
    "asked",
    "why",
    "invoice",
    "delivery",
    "tracking",
    "number",
    "please",
    "thanks",
    "warehouse",
    "courier",
    "address",
];

#[derive(Deserialize)]
struct Batch {
    batch: Vec<CompleteCall>,
}

/// Words until at least `len` bytes, varied by `seed`.
fn text(seed: &mut u64, len: usize) -> String {
    let mut out = String::with_capacity(len + 16);
    while out.len() < len {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(WORDS[(*seed >> 33) as usize % WORDS.len()]);
    }
    out
}

fn call(n: usize, seed: &mut u64) -> Value {
    let (inputs, output) = if n.is_multiple_of(5) {
        (
            json!({"question": text(seed, 110), "context": {"customer_tier": "gold",
                "locale": "en-GB", "history": text(seed, 170)}}),
            json!({"answer": text(seed, 330), "sources": ["terms#refunds", "faq/shipping-eu"],
                "confidence": 0.87}),
        )
    } else {
        (
            json!({"model": "gpt-4o", "temperature": 0.2, "max_tokens": 512, "messages": [
                {"role": "system", "content": text(seed, 160)},
                {"role": "user", "content": text(seed, 200)}]}),
            json!({"id": format!("chatcmpl-{n:024}"), "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text(seed, 270)}}],
                "usage": {"prompt_tokens": 310, "completion_tokens": 95, "total_tokens": 405}}),
        )
    };
    json!({
        "project_id": "bench/calls",
        "id": format!("0193a1b2-c3d4-7e5f-8a9b-{n:012x}"),
        "trace_id": format!("0193a1b2-c3d4-7e5f-8a9b-{:012x}", n / 5),
        "op_name": "weave:///bench/calls/op/predict:Mw3vJtuQYtAuHMA9Ci3i7Lh5b1dRVrhQPjRXhbUO0Yc",
        "started_at": "2026-11-29T13:17:04.710855Z",
        "ended_at": "2026-11-29T13:17:06.981893Z",
        "display_name": null,
        "parent_id": (!n.is_multiple_of(5)).then(|| format!("0193a1b2-c3d4-7e5f-8a9b-{:012x}", n - n % 5)),
        "thread_id": null,
        "turn_id": null,
        "attributes": {"weave": {"client_version": "0.54.0", "source": "python-sdk",
            "os_name": "Linux", "sys_version": "3.12.3"}},
        "inputs": inputs,
        "output": output,
        "summary": {"usage": {"gpt-4o": {"requests": 1, "prompt_tokens": 310,
            "completion_tokens": 95, "total_tokens": 405}}},
        "otel_dump": null,
        "exception": null,
        "wb_user_id": null,
        "wb_run_id": null,
        "wb_run_step": null,
        "wb_run_step_end": null,
    })
}

fn per_call(label: &str, mut f: impl FnMut()) {
    f();
    let t = Instant::now();
    for _ in 0..ROUNDS {
        f();
    }
    let per = t.elapsed().as_secs_f64() / (ROUNDS * CALLS) as f64;
    println!("{label:<6} {:>7.2} µs per call  ({:>7.0} calls/s on one core)", per * 1e6, 1.0 / per);
}

fn main() {
    let mut seed = 7;
    let calls: Vec<Value> = (0..CALLS).map(|n| call(n, &mut seed)).collect();
    let body = serde_json::to_vec(&json!({ "batch": calls })).unwrap();
    println!("{CALLS} calls, {} B per call of JSON", body.len() / CALLS);
    per_call("shape", || {
        black_box(json_shape(black_box(&body), MAX_JSON_DEPTH));
    });
    per_call("parse", || {
        let text = simdutf8::basic::from_utf8(black_box(&body)).unwrap();
        let batch: Batch = serde_json::from_str(text).unwrap();
        let parts: Vec<_> =
            batch.batch.into_iter().map(|c| c.into_part(Some("user")).unwrap()).collect();
        assert_eq!(parts.len(), CALLS);
        black_box(parts);
    });
}
