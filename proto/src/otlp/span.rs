//! One OTLP span → one complete call, written straight into the call's JSON members: the
//! attributes are nested by reference ([`Tree`]) and serialised once, never copied into
//! intermediate `serde_json` maps.

use std::borrow::Cow;

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::Value;
use serde_json::value::RawValue;
use smallvec::SmallVec;

use super::attributes::{Attributes, KeySet, RULES, as_string};
use super::conventions as conv;
use super::request::{KeyValue, Scope, Span, Status};
use super::sequences::{Sequences, ShapeOf};
use super::tree::{Leaf, Node, Shape, Tree};
use super::values::{Attr, nested, span_attribute};
use crate::lazy_part::{LazyEnd, LazyMember, LazyPart, LazyStart};
use crate::limits;
use crate::member::write::{Emit, List, Marked, Object, Raw, Text};
use crate::time::Micros;
use crate::{ProjectId, ProtoError};

impl Emit for Scope<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.field("name", self.name);
        obj.field("version", self.version);
        obj.close();
    }
}

/// Why a span was rejected (counted in `partial_success`).
pub type SpanError = String;

/// Whether the dotted `key` is `prefix` itself or lies under it (`a.b` is under `a`, `ab` is not).
fn at_or_under(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// Every attribute key within [`limits::MAX_ATTRIBUTE_KEY_BYTES`] and
/// [`limits::MAX_ATTRIBUTE_KEY_SEGMENTS`]: keys are nested by their dots, so an unbounded key
/// would nest a value thousands of levels deep.
pub fn check_attribute_keys(attrs: &[KeyValue]) -> Result<(), SpanError> {
    attrs.iter().try_for_each(|kv| check_key(kv.key))
}

/// One attribute key (see [`check_attribute_keys`]).
pub(super) fn check_key(key: &str) -> Result<(), SpanError> {
    if key.len() > limits::MAX_ATTRIBUTE_KEY_BYTES {
        return Err(format!(
            "attribute key of {} bytes is longer than the limit of {}",
            key.len(),
            limits::MAX_ATTRIBUTE_KEY_BYTES
        ));
    }
    let segments = key.bytes().filter(|b| *b == b'.').count() + 1;
    if segments > limits::MAX_ATTRIBUTE_KEY_SEGMENTS {
        let head: String = key.chars().take(64).collect();
        return Err(format!(
            "attribute key {head:?}... has {segments} dot-separated segments, more than the \
             limit of {}",
            limits::MAX_ATTRIBUTE_KEY_SEGMENTS
        ));
    }
    Ok(())
}

fn hex_id(bytes: &[u8], len: usize, what: &str) -> Result<String, SpanError> {
    if bytes.len() != len {
        return Err(format!("{what} must be {len} bytes, got {}", bytes.len()));
    }
    if bytes.iter().all(|b| *b == 0) {
        return Err(format!("{what} is all zeroes"));
    }
    Ok(hex::encode(bytes))
}

fn micros(nanos: u64) -> Micros {
    Micros((nanos / 1_000) as i64)
}

/// `{key: value}`.
struct One<'a, V: ?Sized>(&'a str, &'a V);

impl<V: Emit + ?Sized> Emit for One<'_, V> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.member(self.0, self.1);
        obj.close();
    }
}

/// About how long a leaf's JSON text is, to size the string it is written into: a text kept as
/// sent exactly, a string nearly, anything else guessed.
fn leaf_size(v: &Leaf) -> usize {
    match v {
        Leaf::Text(t) => t.text().len(),
        Leaf::Str(s) => s.len() + 2,
        Leaf::Any(_) => 16,
        Leaf::Nested(_) => 64,
        Leaf::Value(v) => match v.as_ref() {
            Value::String(s) => s.len() + 2,
            _ => 16,
        },
    }
}

/// About how long the nested JSON text of `attrs` is (see [`leaf_size`]): each key with its
/// quotes, colon and comma, and its value.
fn attributes_size<'v>(attrs: impl Iterator<Item = &'v (Cow<'v, str>, Attr<'v>)>) -> usize {
    attrs.map(|(k, v)| k.len() + 4 + leaf_size(&v.leaf())).sum::<usize>() + 2
}

/// The `inputs` or `output` text made of the attribute a rule took: `{key: value}`, or the value
/// itself for a generic key ([`inputs`], [`output`]), or `{}` when there is none.
enum Taken<'f, 'v> {
    Nothing,
    Whole(&'f Leaf<'v>),
    Keyed(&'f str, &'f Leaf<'v>),
}

impl Emit for Taken<'_, '_> {
    fn emit(&self, out: &mut Text) {
        match self {
            Taken::Nothing => out.push_str("{}"),
            Taken::Whole(v) => v.emit(out),
            Taken::Keyed(k, v) => One(k, *v).emit(out),
        }
    }
}

impl Taken<'_, '_> {
    /// About how long its text is (a text kept as sent is copied as it is).
    fn size(&self) -> usize {
        match self {
            Taken::Nothing => 2,
            Taken::Whole(v) => leaf_size(v),
            Taken::Keyed(k, v) => k.len() + leaf_size(v) + 5,
        }
    }
}

/// The `inputs`: a single generic `input`/`inputs` object is unwrapped.
fn inputs<'f, 'v>(found: Option<&'f (&'f str, Leaf<'v>)>) -> Taken<'f, 'v> {
    match found {
        None => Taken::Nothing,
        Some(("input" | "inputs", v)) if v.is_object() => Taken::Whole(v),
        Some((k, v)) => Taken::Keyed(k, v),
    }
}

/// The `output` (the same unwrapping for `output`/`outputs`).
fn output<'f, 'v>(found: Option<&'f (&'f str, Leaf<'v>)>) -> Option<Taken<'f, 'v>> {
    found.map(|(k, v)| match *k {
        "output" | "outputs" => Taken::Whole(v),
        k => Taken::Keyed(k, v),
    })
}

/// Token counts in the SDK's usage shape (`{field: count}`, fields in [`conv::USAGE_KEYS`]
/// order), with `total_tokens` completed from its parts and `requests: 1`.
struct Usage(Vec<(&'static str, i64)>);

impl Emit for Usage {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        for (field, n) in &self.0 {
            obj.field(field, n);
        }
        obj.close();
    }
}

/// The span's token counts; `None` when it reports none. The call's summary is
/// `{"usage": {model: usage}}`.
fn usage(attrs: &Attributes, used: &mut KeySet) -> Option<Usage> {
    let mut usage = Vec::new();
    for (field, rule) in &RULES.usage {
        if let Some(n) = attrs.take_int(used, rule) {
            usage.push((*field, n));
        }
    }
    if usage.is_empty() {
        return None;
    }
    let get = |field: &str| usage.iter().find(|(f, _)| *f == field).map(|(_, n)| *n);
    if get("total_tokens").is_none() {
        let sum = |a: &str, b: &str| get(a)?.checked_add(get(b)?);
        if let Some(total) = sum("prompt_tokens", "completion_tokens")
            .or_else(|| sum("input_tokens", "output_tokens"))
        {
            usage.push(("total_tokens", total));
        }
    }
    usage.push(("requests", 1));
    Some(Usage(usage))
}

/// `events.<name>` entries for the input and output keys that name events: the attributes of
/// the span's events with that name, as a list.
fn event_attributes(span: &Span) -> Vec<(String, Value)> {
    let mut by_name: Vec<(String, Vec<Value>)> = Vec::new();
    for event in &span.events {
        let key = format!("events.{}", event.name);
        if !conv::INPUT_KEYS.contains(&key.as_str()) && !conv::OUTPUT_KEYS.contains(&key.as_str()) {
            continue;
        }
        let value = nested(&event.attributes);
        match by_name.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(value),
            None => by_name.push((key, vec![value])),
        }
    }
    by_name.into_iter().map(|(key, list)| (key, Value::Array(list))).collect()
}

/// The exception text of a failed span: its `exception` event (`type: message`, then the
/// stack trace) when it recorded one, else the status message, else `"error"`.
fn exception(span: &Span, status: &Status) -> Option<String> {
    if status.code != StatusCode::Error as i32 {
        return None;
    }
    let event = span.events.iter().find(|e| e.name == "exception").map(|e| {
        let get = |k: &str| {
            e.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.as_ref())
                .map(super::values::any_value)
                .and_then(|v| as_string(&v))
        };
        let head = match (get("exception.type"), get("exception.message")) {
            (Some(t), Some(m)) => format!("{t}: {m}"),
            (Some(t), None) => t,
            (None, Some(m)) => m,
            (None, None) => String::new(),
        };
        match get("exception.stacktrace") {
            Some(trace) if !head.is_empty() => format!("{head}\n{trace}"),
            Some(trace) => trace,
            None => head,
        }
    });
    Some(
        event
            .filter(|e| !e.is_empty())
            .or_else(|| Some(status.message.to_owned()).filter(|m| !m.is_empty()))
            .unwrap_or_else(|| "error".to_owned()),
    )
}

fn kind_name(kind: i32) -> &'static str {
    match SpanKind::try_from(kind).unwrap_or(SpanKind::Unspecified) {
        SpanKind::Unspecified => "UNSPECIFIED",
        SpanKind::Internal => "INTERNAL",
        SpanKind::Server => "SERVER",
        SpanKind::Client => "CLIENT",
        SpanKind::Producer => "PRODUCER",
        SpanKind::Consumer => "CONSUMER",
    }
}

fn status_name(code: i32) -> &'static str {
    match StatusCode::try_from(code).unwrap_or(StatusCode::Unset) {
        StatusCode::Unset => "UNSET",
        StatusCode::Ok => "OK",
        StatusCode::Error => "ERROR",
    }
}

/// The attribute keys (or `events.<name>`) whose values became the call's inputs and output.
struct Moved<'a> {
    inputs: Option<&'a str>,
    output: Option<&'a str>,
}

impl Emit for Moved<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        if let Some(inputs) = self.inputs {
            obj.field("inputs", inputs);
        }
        if let Some(output) = self.output {
            obj.field("output", output);
        }
        obj.close();
    }
}

impl Moved<'_> {
    /// Whether `key` is, or lies under, a moved key.
    fn holds(&self, key: &str) -> bool {
        [self.inputs, self.output].into_iter().flatten().any(|m| at_or_under(key, m))
    }

    fn is_empty(&self) -> bool {
        self.inputs.is_none() && self.output.is_none()
    }
}

/// What a span shares with the others of its resource and scope, written once for all of them.
pub struct Shared<'a> {
    /// `{"attributes": .., "dropped_attributes_count": ..}` of the resource, or `null`.
    pub resource: Box<RawValue>,
    /// The nesting depth of `resource`.
    pub resource_depth: usize,
    pub scope: Scope<'a>,
}

/// The original span, readable: hex ids, RFC 3339 times, nested attributes (the Weave
/// server's `otel_dump` shape), less the attributes and events that became the call's inputs
/// and output: `attributes_moved` names them (docs/otlp.md#what-otel_dump-holds).
struct Dump<'a> {
    name: &'a str,
    context: DumpContext<'a>,
    kind: &'static str,
    parent_id: Option<&'a str>,
    start_time: Micros,
    end_time: Micros,
    status: DumpStatus<'a>,
    attributes: Nested<'a>,
    events: Vec<DumpEvent<'a>>,
    links: Vec<DumpLink<'a>>,
    resource: &'a RawValue,
    scope: &'a Scope<'a>,
    /// Left out when nothing moved.
    attributes_moved: &'a Moved<'a>,
}

impl Emit for Dump<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.field("name", self.name);
        obj.field("context", &self.context);
        obj.field("kind", self.kind);
        obj.field("parent_id", &self.parent_id);
        obj.field("start_time", &self.start_time);
        obj.field("end_time", &self.end_time);
        obj.field("status", &self.status);
        obj.field("attributes", &self.attributes);
        obj.field("events", &List(&self.events));
        obj.field("links", &List(&self.links));
        obj.field("resource", &Marked(Raw(self.resource.get())));
        obj.field("scope", self.scope);
        if !self.attributes_moved.is_empty() {
            obj.field("attributes_moved", self.attributes_moved);
        }
        obj.close();
    }
}

/// The dump's attributes or the call's: nested, or written into their keys' shape.
enum Nested<'a> {
    Tree(Tree<'a>),
    Shaped(&'a Shape, Vec<Leaf<'a>>),
}

impl Emit for Nested<'_> {
    fn emit(&self, out: &mut Text) {
        match self {
            Nested::Tree(tree) => tree.emit(out),
            Nested::Shaped(shape, values) => shape.write(values, out),
        }
    }
}

struct DumpContext<'a> {
    trace_id: &'a str,
    span_id: &'a str,
    trace_state: &'a str,
}

impl Emit for DumpContext<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.field("trace_id", self.trace_id);
        obj.field("span_id", self.span_id);
        obj.field("trace_state", self.trace_state);
        obj.close();
    }
}

struct DumpStatus<'a> {
    code: &'static str,
    message: &'a str,
}

impl Emit for DumpStatus<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.field("code", self.code);
        obj.field("message", self.message);
        obj.close();
    }
}

/// An event whose attributes moved keeps its place, name and time; its attributes are the next
/// item of the list under `events.<name>` in inputs or output.
struct DumpEvent<'a> {
    name: &'a str,
    timestamp: u64,
    attributes: Value,
    dropped_attributes_count: u32,
}

impl Emit for DumpEvent<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.field("name", self.name);
        obj.field("timestamp", &self.timestamp);
        obj.field("attributes", &self.attributes);
        obj.field("dropped_attributes_count", &self.dropped_attributes_count);
        obj.close();
    }
}

struct DumpLink<'a> {
    trace_id: String,
    span_id: String,
    trace_state: &'a str,
    attributes: Value,
    dropped_attributes_count: u32,
    flags: u32,
}

impl Emit for DumpLink<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        obj.field("trace_id", self.trace_id.as_str());
        obj.field("span_id", self.span_id.as_str());
        obj.field("trace_state", self.trace_state);
        obj.field("attributes", &self.attributes);
        obj.field("dropped_attributes_count", &self.dropped_attributes_count);
        obj.field("flags", &self.flags);
        obj.close();
    }
}

/// Levels a member can add above an attribute's value: otel_dump's object and the key's dotted
/// segments (inputs, output and attributes add no more).
pub(super) const ABOVE_ATTRIBUTE: usize = 1 + limits::MAX_ATTRIBUTE_KEY_SEGMENTS;
/// Levels otel_dump adds above an event's or link's nested attributes: its object, the list
/// and the event or link.
pub(super) const ABOVE_EVENT_ATTRIBUTES: usize = 3;
/// Levels otel_dump adds above the resource.
pub(super) const ABOVE_RESOURCE: usize = 1;

/// Whether something `depth` deep under `above` levels is within [`limits::MAX_MEMBER_DEPTH`].
fn fits(above: usize, depth: usize) -> bool {
    above + depth <= limits::MAX_MEMBER_DEPTH
}

/// The deepest of a span's attribute values; texts kept as sent were measured when walked.
fn deepest_attribute<'v>(values: impl IntoIterator<Item = &'v Attr<'v>>) -> usize {
    let depth = |v: &Attr| match v {
        Attr::Text(t) => t.depth(),
        Attr::Str(_) => 0,
        Attr::Any(a) => a.depth(),
        Attr::Value(v) => deepest([v]),
    };
    values.into_iter().map(depth).max().unwrap_or(0)
}

/// The deepest of `values` (see [`limits::json_depth`]); scalars are passed over at no cost.
fn deepest<'v>(values: impl IntoIterator<Item = &'v Value>) -> usize {
    values
        .into_iter()
        .filter(|v| v.is_array() || v.is_object())
        .map(|v| limits::json_depth(v, limits::MAX_MEMBER_DEPTH))
        .max()
        .unwrap_or(0)
}

/// What the call's `attributes` are made of: the attributes no rule used, nested, then the
/// fields the rules made, then the members of `wandb.attributes`; each sets its key over what
/// came before, so a field wins over an attribute of its name.
struct CallAttributes<'v, 'u, U> {
    unused: &'u U,
    fields: &'u [(&'static str, Leaf<'v>)],
    extra: Option<&'v serde_json::Map<String, Value>>,
}

impl<'v, U, I> CallAttributes<'v, '_, U>
where
    U: Fn() -> I,
    I: Iterator<Item = (&'v str, Leaf<'v>)>,
{
    /// Nested, keeping only the keys `keep` allows at the top level.
    fn nest(&self, keep: impl Fn(&str) -> bool) -> Tree<'v> {
        let top = |key: &str| keep(key.split('.').next().unwrap_or(key));
        let mut all = Tree::nest((self.unused)().filter(|(k, _)| top(k)));
        for (field, v) in self.fields.iter().filter(|(f, _)| keep(f)) {
            all.set(Cow::Borrowed(field), Node::Leaf(v.clone()));
        }
        for (k, v) in self.extra.into_iter().flatten().filter(|(k, _)| keep(k)) {
            all.set(Cow::Borrowed(k), Node::Leaf(Leaf::Value(Cow::Borrowed(v))));
        }
        all
    }

    fn tree(&self) -> Tree<'v> {
        self.nest(|_| true)
    }

    /// The model a span's usage is counted under: `model`, else `model_parameters.model`. Only
    /// those two keys are nested to read it: a key's subtree depends on its keys alone.
    fn model(&self) -> Option<String> {
        let all = self.nest(|key| key == "model" || key == "model_parameters");
        all.get("model")
            .and_then(|n| n.str_at(&[]))
            .or_else(|| all.get("model_parameters")?.str_at(&["model"]))
            .map(str::to_owned)
    }
}

/// A member to write: at most [`limits::MAX_MEMBER_DEPTH`] deep so that it reads back. When its
/// values are shallow enough that it cannot be deeper (`bounded`), its text is not scanned once
/// written: that scan was a tenth of a span's conversion.
fn member<'e>(
    what: &'static str,
    value: &'e dyn Emit,
    size: usize,
    bounded: bool,
) -> LazyMember<'e> {
    LazyMember { what, value, size, bounded }
}

/// Converts one span of `project` into a complete call of the op `op_name` (its ref, see
/// [`super::op::op_ref`]) and hands it to `out`, its members unwritten ([`LazyPart`]).
/// `sequences` holds what the key sequences of the request's spans so far matched, and the
/// shapes of their dumped attributes ([`Shape`]). An error of `out` rejects the span too.
pub fn to_call<'a>(
    project: &ProjectId,
    span: &'a Span<'a>,
    op_name: &str,
    shared: &Shared,
    wb_user_id: Option<&str>,
    sequences: &mut Sequences<'a>,
    out: &mut dyn FnMut(LazyPart) -> Result<(), ProtoError>,
) -> Result<(), SpanError> {
    // The span's own keys are checked once per key sequence, its events' and links' here.
    let keys: SmallVec<[&str; 32]> = span.attributes.iter().map(|kv| kv.key).collect();
    let (matched, sequence) = sequences.matched(&keys)?;
    span.events.iter().try_for_each(|e| check_attribute_keys(&e.attributes))?;
    span.links.iter().try_for_each(|l| check_attribute_keys(&l.attributes))?;
    let id = hex_id(span.span_id, 8, "span_id")?;
    let trace_id = hex_id(span.trace_id, 16, "trace_id")?;
    let parent_id = match span.parent_span_id {
        [] => None,
        p if p.iter().all(|b| *b == 0) && p.len() == 8 => None,
        p => Some(hex_id(p, 8, "parent_span_id")?),
    };
    if span.start_time_unix_nano == 0 {
        return Err("start_time_unix_nano is missing".into());
    }
    let started_at = micros(span.start_time_unix_nano);
    let ended_at = micros(span.end_time_unix_nano.max(span.start_time_unix_nano));
    let status = span.status.clone().unwrap_or_default();

    let mut flat: Vec<(Cow<str>, Attr)> = span
        .attributes
        .iter()
        .map(|kv| (Cow::Borrowed(kv.key), span_attribute(kv.value.as_ref())))
        .collect();
    let span_attribute_count = flat.len();
    flat.extend(event_attributes(span).into_iter().map(|(k, v)| (Cow::Owned(k), Attr::Value(v))));
    let attrs = Attributes::new(flat, matched, span_attribute_count);
    let rules = &*RULES;
    let mut used = KeySet::default();
    let inputs_found = attrs.take_first(&mut used, &rules.inputs);
    let output_found = attrs.take_first(&mut used, &rules.outputs);
    // Which attributes moved into inputs and output: those the two rules took.
    let moved_keys = used;
    let moved_attributes = attrs.under(moved_keys);
    // The content that became inputs and output is stored there only: the dump names where it
    // went instead of holding it a second time (docs/otlp.md#what-otel_dump-holds).
    let moved = Moved {
        inputs: inputs_found.as_ref().map(|(k, _)| *k),
        output: output_found.as_ref().map(|(k, _)| *k),
    };
    let inputs = inputs(inputs_found.as_ref());
    let output = output(output_found.as_ref());
    let usage = usage(&attrs, &mut used);

    let mut fields = Vec::with_capacity(rules.attributes.len());
    // Which fields were made, by the number of their rule.
    const _: () = assert!(conv::ATTRIBUTE_KEYS.len() <= u16::BITS as usize);
    let mut made = 0u16;
    for (i, (field, rule)) in rules.attributes.iter().enumerate() {
        if let Some((_, v)) = attrs.take_first(&mut used, rule) {
            fields.push((*field, v));
            made |= 1 << i;
        }
    }
    let display_name = attrs.take_string(&mut used, &rules.display_name);
    let thread_id = attrs.take_string(&mut used, &rules.thread_id);
    let is_turn = attrs.take_first(&mut used, &rules.is_turn).is_some();
    let turn_id = (thread_id.is_some() && is_turn).then_some(id.as_str());
    let wb_run_id = attrs.take_string(&mut used, &rules.wb_run_id);
    let wb_run_step = attrs.take_int(&mut used, &rules.wb_run_step);
    let wb_run_step_end = attrs.take_int(&mut used, &rules.wb_run_step_end);
    let extra = attrs.take_first(&mut used, &rules.extra);
    let extra = match extra.as_ref().and_then(|(_, v)| v.as_value()) {
        Some(Value::Object(extra)) => Some(extra),
        _ => None,
    };
    let used_attributes = attrs.under(used);
    let unused = || {
        let unused = attrs.flat.iter().zip(&used_attributes).filter(|(_, used)| !**used);
        unused.map(|((k, v), _)| (k.as_ref(), v.leaf()))
    };
    let call_attributes = CallAttributes { unused: &unused, fields: &fields, extra };
    let model = call_attributes.model();
    // Every member must read back (see `limits::check_json_text`).
    let values_shallow =
        fits(ABOVE_ATTRIBUTE, deepest_attribute(attrs.flat.iter().map(|(_, v)| v)));
    // The attributes' text and the dump's both hold what did not move into inputs and output:
    // sized by those, not by the messages (which would leave each member's string kilobytes of
    // spare capacity).
    let kept = |n: usize| {
        let kept = attrs.flat[..n].iter().zip(&moved_attributes).filter(|(_, moved)| !**moved);
        kept.map(|(kv, _)| kv)
    };
    // Written into its keys' shape when it has one: a span without events of its own and
    // without `wandb.attributes` writes the same keys as the others of its key sequence.
    let call_attributes_size = attributes_size(kept(attrs.flat.len()));
    let of = ShapeOf::Attributes { used, fields: made };
    let keys = || unused().map(|(k, _)| k).chain(fields.iter().map(|(f, _)| *f)).collect();
    let shaped = extra.is_none() && attrs.flat.len() == span_attribute_count;
    let shape = if shaped { sequences.shape(sequence, of, keys) } else { None };
    let attributes = match &shape {
        Some(shape) => {
            let mut values = Vec::with_capacity(attrs.flat.len() + fields.len());
            values.extend(unused().map(|(_, v)| v).chain(fields.iter().map(|(_, v)| v.clone())));
            Nested::Shaped(shape, values)
        }
        None => Nested::Tree(call_attributes.tree()),
    };

    let dumped_keys = || kept(span_attribute_count).map(|(k, _)| k.as_ref()).collect();
    let of = ShapeOf::Dump { moved: moved_keys };
    let dump_shape = sequences.shape(sequence, of, dumped_keys);
    let dumped_attributes = match &dump_shape {
        Some(shape) => {
            let mut values = Vec::with_capacity(span_attribute_count);
            values.extend(kept(span_attribute_count).map(|(_, v)| v.leaf()));
            Nested::Shaped(shape, values)
        }
        None => Nested::Tree(Tree::nest(
            kept(span_attribute_count).map(|(k, v)| (k.as_ref(), v.leaf())),
        )),
    };
    let dump = Dump {
        name: span.name,
        context: DumpContext { trace_id: &trace_id, span_id: &id, trace_state: span.trace_state },
        kind: kind_name(span.kind),
        parent_id: parent_id.as_deref(),
        start_time: micros(span.start_time_unix_nano),
        end_time: micros(span.end_time_unix_nano),
        status: DumpStatus { code: status_name(status.code), message: status.message },
        attributes: dumped_attributes,
        events: span
            .events
            .iter()
            .map(|e| DumpEvent {
                name: e.name,
                timestamp: e.time_unix_nano,
                attributes: if moved.holds(&format!("events.{}", e.name)) {
                    Value::Null
                } else {
                    nested(&e.attributes)
                },
                dropped_attributes_count: e.dropped_attributes_count,
            })
            .collect(),
        links: span
            .links
            .iter()
            .map(|l| DumpLink {
                trace_id: hex::encode(l.trace_id),
                span_id: hex::encode(l.span_id),
                trace_state: l.trace_state,
                attributes: nested(&l.attributes),
                dropped_attributes_count: l.dropped_attributes_count,
                flags: l.flags,
            })
            .collect(),
        resource: &shared.resource,
        scope: &shared.scope,
        attributes_moved: &moved,
    };
    let dump_shallow = values_shallow
        && fits(ABOVE_RESOURCE, shared.resource_depth)
        && fits(
            ABOVE_EVENT_ATTRIBUTES,
            deepest(
                dump.events
                    .iter()
                    .map(|e| &e.attributes)
                    .chain(dump.links.iter().map(|l| &l.attributes)),
            ),
        );
    // The span's own attributes that did not move, the resource and a few hundred bytes more.
    let dump_size = attributes_size(kept(span_attribute_count)) + shared.resource.get().len() + 512;

    let model = model.as_deref().unwrap_or("usage");
    let by_model = usage.as_ref().map(|usage| One(model, usage));
    let usage = by_model.as_ref().map(|by_model| One("usage", by_model));
    let summary: &dyn Emit = match &usage {
        Some(usage) => usage,
        None => &Raw("{}"),
    };
    let exception = exception(span, &status);
    let part = LazyPart {
        project,
        id: &id,
        trace_id: &trace_id,
        start: LazyStart {
            op_name,
            display_name: display_name.as_deref(),
            parent_id: parent_id.as_deref(),
            thread_id: thread_id.as_deref(),
            turn_id,
            started_at,
            attributes: member("attributes", &attributes, call_attributes_size, values_shallow),
            inputs: member("inputs", &inputs, inputs.size(), values_shallow),
            otel_dump: Some(member("otel_dump", &dump, dump_size, dump_shallow)),
            wb_user_id,
            wb_run_id: wb_run_id.as_deref(),
            wb_run_step,
        },
        end: LazyEnd {
            ended_at,
            summary: member("summary", summary, 128, true),
            output: output.as_ref().map(|o| member("output", o, o.size(), values_shallow)),
            exception: exception.as_deref(),
            wb_run_step_end,
        },
    };
    out(part).map_err(|e| e.to_string())
}
