//! Dotted attribute keys nested into objects, over borrowed values: the one nesting rule
//! (`gen_ai.prompt.0.role` → `{"gen_ai": {"prompt": {"0": {"role": ..}}}}`), built without
//! copying the values and written straight to JSON text. A span's attributes are nested two or
//! three times (its `otel_dump`, the call's `attributes`, a convention key's children), so
//! copying them into `serde_json` maps each time was most of a span's conversion.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use serde_json::{Map, Value};

use super::values::{AnyAttr, JsonText};
use crate::member::write::{Emit, Object, Text};

/// Entries a tree looks through one by one; past this it keeps an index of its keys, so that an
/// object of thousands of attributes still nests in linear time.
const SCAN: usize = 16;

/// A JSON object in insertion order; setting a key that is present replaces its value in place
/// (as a `serde_json::Map` does).
#[derive(Debug, Default, Clone)]
pub struct Tree<'v> {
    entries: Vec<(Cow<'v, str>, Node<'v>)>,
    index: Option<HashMap<Cow<'v, str>, usize>>,
}

#[derive(Debug, Clone)]
pub enum Node<'v> {
    Leaf(Leaf<'v>),
    Tree(Tree<'v>),
}

/// A value in a tree: decoded, or an attribute's JSON text, written out as it was sent and
/// parsed only when a rule reads into it.
#[derive(Debug, Clone)]
pub enum Leaf<'v> {
    Value(Cow<'v, Value>),
    Text(&'v JsonText<'v>),
    /// A string attribute, borrowed from the request (most of a span's attributes are).
    Str(&'v str),
    /// Any other attribute, written from the request and decoded only when a rule reads into it.
    Any(&'v AnyAttr<'v>),
    /// The attributes under a convention key, nested ([`Nested`]).
    Nested(Rc<Nested<'v>>),
}

/// The attributes under a convention key (`gen_ai.request.*` of `model_parameters`) nested into
/// an object, kept as a tree and written from it, when that tree is already what reading it as
/// a value would make ([`Tree::reads_as_written`]). Made into a `serde_json` map, which hashed
/// every key and copied every value, it was ~5% of a span's conversion (docs/benchmarks.md,
/// "Hot calls inlined"). Its value is made only when a rule reads into it.
#[derive(Debug)]
pub struct Nested<'v> {
    tree: Tree<'v>,
    value: OnceCell<Value>,
}

impl<'v> Nested<'v> {
    pub fn new(tree: Tree<'v>) -> Nested<'v> {
        Nested { tree, value: OnceCell::new() }
    }

    fn value(&self) -> &Value {
        self.value.get_or_init(|| Value::Object(self.tree.clone().into_map()))
    }
}

impl<'v> Leaf<'v> {
    pub fn is_object(&self) -> bool {
        match self {
            Leaf::Value(v) => v.is_object(),
            Leaf::Text(t) => t.is_object(),
            Leaf::Str(_) => false,
            Leaf::Any(a) => a.is_object(),
            Leaf::Nested(_) => true,
        }
    }

    /// Whether it holds neither an object nor a list.
    fn is_scalar(&self) -> bool {
        match self {
            Leaf::Value(v) => !v.is_object() && !v.is_array(),
            Leaf::Str(_) => true,
            Leaf::Any(a) => a.is_scalar(),
            Leaf::Text(_) | Leaf::Nested(_) => false,
        }
    }

    /// The decoded value (a text is parsed on first use); `None` for a string, which is not
    /// copied into a value to be read.
    pub fn as_value(&self) -> Option<&Value> {
        match self {
            Leaf::Value(v) => Some(v),
            Leaf::Text(t) => Some(t.value()),
            Leaf::Any(a) => Some(a.value()),
            Leaf::Nested(n) => Some(n.value()),
            Leaf::Str(_) => None,
        }
    }

    /// The value, borrowed where it can be.
    fn into_cow(self) -> Cow<'v, Value> {
        match self {
            Leaf::Value(v) => v,
            Leaf::Text(t) => Cow::Borrowed(t.value()),
            Leaf::Any(a) => Cow::Borrowed(a.value()),
            Leaf::Str(s) => Cow::Owned(Value::String(s.to_owned())),
            Leaf::Nested(n) => Cow::Owned(n.value().clone()),
        }
    }
}

impl Emit for Leaf<'_> {
    fn emit(&self, out: &mut Text) {
        match self {
            Leaf::Value(v) => v.emit(out),
            Leaf::Text(t) => out.push_str(t.text()),
            Leaf::Str(s) => s.emit(out),
            Leaf::Any(a) => a.emit(out),
            Leaf::Nested(n) => n.tree.emit(out),
        }
    }
}

impl<'v> Node<'v> {
    fn is_object(&self) -> bool {
        match self {
            Node::Tree(_) => true,
            Node::Leaf(v) => v.is_object(),
        }
    }

    /// The node as a tree, an object leaf opened into one (its members still borrowed).
    fn open(&mut self) -> Option<&mut Tree<'v>> {
        if matches!(self, Node::Leaf(v) if v.is_object()) {
            let Node::Leaf(object) = std::mem::replace(self, Node::Tree(Tree::default())) else {
                unreachable!("matched above")
            };
            *self = Node::Tree(Tree::from_object(object.into_cow()));
        }
        match self {
            Node::Tree(tree) => Some(tree),
            Node::Leaf(_) => None,
        }
    }

    /// The string at `path` below this node.
    pub fn str_at(&self, path: &[&str]) -> Option<&str> {
        match (self, path) {
            (Node::Leaf(Leaf::Str(s)), []) => Some(s),
            (Node::Leaf(Leaf::Nested(n)), [key, rest @ ..]) => n.tree.get(key)?.str_at(rest),
            (Node::Leaf(v), []) => v.as_value()?.as_str(),
            (Node::Leaf(v), [key, rest @ ..]) => {
                rest.iter().try_fold(v.as_value()?.get(key)?, |v, k| v.get(k))?.as_str()
            }
            (Node::Tree(tree), [key, rest @ ..]) => tree.get(key)?.str_at(rest),
            (Node::Tree(_), []) => None,
        }
    }

    fn into_value(self) -> Value {
        match self {
            Node::Leaf(v) => v.into_cow().into_owned(),
            Node::Tree(tree) => Value::Object(tree.into_map()),
        }
    }
}

impl<'v> Tree<'v> {
    /// Nests `attrs` (dotted keys, in order) into one object.
    pub fn nest(attrs: impl IntoIterator<Item = (&'v str, Leaf<'v>)>) -> Tree<'v> {
        let mut tree = Tree::default();
        for (key, value) in attrs {
            tree.insert_path(key, value);
        }
        tree
    }

    fn from_object(object: Cow<'v, Value>) -> Tree<'v> {
        let mut tree = Tree::default();
        // A map's keys are unique: each is appended without a lookup.
        match object {
            Cow::Borrowed(Value::Object(map)) => {
                for (k, v) in map {
                    tree.push(Cow::Borrowed(k), Node::Leaf(Leaf::Value(Cow::Borrowed(v))));
                }
            }
            Cow::Owned(Value::Object(map)) => {
                for (k, v) in map {
                    tree.push(Cow::Owned(k), Node::Leaf(Leaf::Value(Cow::Owned(v))));
                }
            }
            _ => {}
        }
        tree
    }

    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k == key),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node<'v>> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    /// Sets `key` to `node`: in place when present, else last.
    pub fn set(&mut self, key: Cow<'v, str>, node: Node<'v>) {
        match self.position(&key) {
            Some(i) => self.entries[i].1 = node,
            None => self.push(key, node),
        }
    }

    /// Appends `key`, which is absent.
    fn push(&mut self, key: Cow<'v, str>, node: Node<'v>) {
        match &mut self.index {
            Some(index) => {
                index.insert(key.clone(), self.entries.len());
            }
            None if self.entries.len() == SCAN => {
                let mut index: HashMap<_, _> =
                    self.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
                index.insert(key.clone(), self.entries.len());
                self.index = Some(index);
            }
            None => {}
        }
        self.entries.push((key, node));
    }

    /// Sets the value at the dotted `key`. A key that collides with another's structure (`a` = 1
    /// and `a.b` = 2) keeps both readable: the scalar goes under the empty key of the object; an
    /// object value merges into an object already there.
    pub fn insert_path(&mut self, key: &'v str, value: Leaf<'v>) {
        let mut segments = key.split('.').peekable();
        let mut node = self;
        while let Some(seg) = segments.next() {
            let at = node.position(seg);
            if segments.peek().is_none() {
                match at.map(|i| &mut node.entries[i].1).filter(|n| n.is_object()) {
                    Some(existing) => {
                        let existing = existing.open().expect("an object");
                        if value.is_object() {
                            existing.merge(value.into_cow());
                        } else {
                            existing.set(Cow::Borrowed(""), Node::Leaf(value));
                        }
                    }
                    None => node.set(Cow::Borrowed(seg), Node::Leaf(value)),
                }
                return;
            }
            let i = at.unwrap_or_else(|| {
                node.push(Cow::Borrowed(seg), Node::Tree(Tree::default()));
                node.entries.len() - 1
            });
            let slot = &mut node.entries[i].1;
            if !slot.is_object() {
                let scalar = std::mem::replace(slot, Node::Tree(Tree::default()));
                if let Node::Tree(tree) = slot {
                    tree.push(Cow::Borrowed(""), scalar);
                }
            }
            node = slot.open().expect("an object");
        }
    }

    /// Merges the members of the object `from` in: objects into objects, anything else set.
    fn merge(&mut self, from: Cow<'v, Value>) {
        for (key, value) in Tree::from_object(from).entries {
            match self.position(&key).map(|i| &mut self.entries[i].1) {
                Some(existing) if existing.is_object() && value.is_object() => {
                    let Node::Leaf(value) = value else { unreachable!("members are leaves") };
                    existing.open().expect("an object").merge(value.into_cow());
                }
                _ => self.set(key, value),
            }
        }
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.entries.into_iter().map(|(k, n)| (k.into_owned(), n.into_value())).collect()
    }

    /// Whether its value is what `super::values::index_maps_to_lists` leaves as it is: no
    /// level's keys are exactly `"0"`..`"n-1"` (which would read as a list) and no leaf holds
    /// an object or a list (which it would look into).
    pub fn reads_as_written(&self) -> bool {
        let digits = |k: &str| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
        let mut index = itoa::Buffer::new();
        let is_list = !self.entries.is_empty()
            && self.entries.iter().all(|(k, _)| digits(k))
            && (0..self.entries.len()).all(|i| self.position(index.format(i)).is_some());
        !is_list
            && self.entries.iter().all(|(_, node)| match node {
                Node::Tree(tree) => tree.reads_as_written(),
                Node::Leaf(leaf) => leaf.is_scalar(),
            })
    }
}

impl Emit for Tree<'_> {
    fn emit(&self, out: &mut Text) {
        let mut obj = Object::open(out);
        for (k, node) in &self.entries {
            obj.member(k, node);
        }
        obj.close();
    }
}

impl Emit for Node<'_> {
    fn emit(&self, out: &mut Text) {
        match self {
            Node::Leaf(v) => v.emit(out),
            Node::Tree(tree) => tree.emit(out),
        }
    }
}

/// Where the dotted prefixes of `key` end (`a` and `a.b` of `a.b.c`; not `key` itself): the
/// keys it is nested under.
pub(super) fn prefix_ends(key: &str) -> impl Iterator<Item = usize> + '_ {
    key.match_indices('.').map(|(end, _)| end)
}

/// The nested JSON text of attributes with given keys, in a given order, less their values:
/// the text around the values, and where each value goes. Spans of one instrumentation carry
/// the same keys span after span, so a request's spans share a few shapes (`super::sequences`),
/// and a span's attributes are written into its shape instead of being nested again.
///
/// Only keys whose nesting does not depend on their values have a shape: all distinct, none a
/// dotted prefix of another. Otherwise a scalar and an object can meet at one key, and then
/// whether a value is an object decides the nesting ([`Tree::insert_path`]).
#[derive(Debug)]
pub struct Shape {
    text: String,
    /// `(offset into text, index of the key)`, in order.
    slots: Vec<(usize, usize)>,
}

impl Shape {
    /// The shape of `keys`, if they have one.
    pub(super) fn of(keys: &[&str]) -> Option<Shape> {
        let distinct: HashSet<&str, foldhash::fast::RandomState> = keys.iter().copied().collect();
        let prefixed = |key: &str| prefix_ends(key).any(|end| distinct.contains(&key[..end]));
        if distinct.len() != keys.len() || keys.iter().any(|k| prefixed(k)) {
            return None;
        }
        // Each leaf holds its key's index.
        let tree = Tree::nest(
            keys.iter().enumerate().map(|(i, k)| (*k, Leaf::Value(Cow::Owned(Value::from(i))))),
        );
        let mut text = Text::with_capacity(0);
        let mut slots = Vec::with_capacity(keys.len());
        tree.outline(&mut text, &mut slots);
        Some(Shape { text: text.into_string(), slots })
    }

    /// Writes the nested object of `values` (one per key, in the keys' order).
    pub fn write(&self, values: &[Leaf], out: &mut Text) {
        let mut at = 0;
        for (offset, i) in &self.slots {
            out.push_str(&self.text[at..*offset]);
            values[*i].emit(out);
            at = *offset;
        }
        out.push_str(&self.text[at..]);
    }
}

impl Tree<'_> {
    /// Writes the tree's text as [`Emit`] does, but with a slot (see [`Shape::slots`]) where
    /// each leaf, which holds its key's index, would go.
    fn outline(&self, text: &mut Text, slots: &mut Vec<(usize, usize)>) {
        let mut obj = Object::open(text);
        for (key, node) in &self.entries {
            let text = obj.key(key);
            match node {
                Node::Tree(tree) => tree.outline(text, slots),
                Node::Leaf(leaf) => {
                    let i = leaf.as_value().and_then(Value::as_u64).expect("a key's index");
                    slots.push((text.len(), i as usize));
                }
            }
        }
        obj.close();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::member::write::to_text;
    use crate::otlp::values::index_maps_to_lists;

    /// A tree kept as written says so only when it writes what its value, read as lists where
    /// its keys are indexes, writes.
    #[test]
    fn a_tree_reads_as_written_only_when_its_value_would_not_change() {
        let values = [json!("gpt-4o"), json!(0.5), json!(1024), json!(true), json!(null)];
        let cases: &[(&[&str], bool)] = &[
            (&["model", "temperature", "max_tokens"], true),
            (&["a", "a.b", "c.d.e"], true),
            (&["0", "2"], true),
            (&["1", "0"], false),
            (&["0"], false),
            (&["x.0", "x.1", "y"], false),
            (&["x.1", "x.2", "y"], true),
            (&["", "\"\\"], true),
        ];
        for (keys, as_written) in cases {
            let leaves: Vec<(&str, Leaf)> = keys
                .iter()
                .zip(values.iter().cycle())
                .map(|(k, v)| (*k, Leaf::Value(Cow::Borrowed(v))))
                .collect();
            let tree = Tree::nest(leaves.clone());
            assert_eq!(tree.reads_as_written(), *as_written, "{keys:?}");
            let value = index_maps_to_lists(Value::Object(Tree::nest(leaves).into_map()));
            if *as_written {
                assert_eq!(to_text(&tree, 0), to_text(&value, 0), "{keys:?}");
                let nested = Leaf::Nested(Rc::new(Nested::new(tree)));
                assert_eq!(nested.as_value(), Some(&value), "{keys:?}");
            }
        }
        // A leaf holding an object or a list is looked into, so the tree is not kept.
        let list = json!([{"0": 1}]);
        let tree = Tree::nest([("a", Leaf::Value(Cow::Borrowed(&list)))]);
        assert!(!tree.reads_as_written());
    }

    #[test]
    fn a_shape_writes_what_nesting_writes() {
        let keys = [
            "gen_ai.operation.name",
            "gen_ai.request.model",
            "server.port",
            "gen_ai.request.temperature",
            "a\"b.c\\d",
            "",
            "x..y",
            "gen_ai.usage.input_tokens",
            "solo",
        ];
        let texts: Vec<String> = (0..keys.len()).map(|i| format!("v\"{i}")).collect();
        let values: Vec<Leaf> = texts.iter().map(|t| Leaf::Str(t)).collect();
        let nested = Tree::nest(keys.iter().copied().zip(values.iter().cloned()));
        let shape = Shape::of(&keys).expect("distinct keys, none under another");
        let mut written = Text::with_capacity(0);
        shape.write(&values, &mut written);
        assert_eq!(written.into_string(), crate::member::write::to_text(&nested, 0));
    }

    #[test]
    fn random_keys_with_a_shape_write_what_nesting_writes() {
        let mut rng = fastrand::Rng::with_seed(11);
        let segments = ["a", "b", "", "a\"", "é"];
        let (mut shaped, mut unshaped) = (0, 0);
        for _ in 0..20_000 {
            let keys: Vec<String> = (0..rng.usize(..6))
                .map(|_| {
                    let n = rng.usize(1..4);
                    let segs: Vec<&str> =
                        (0..n).map(|_| segments[rng.usize(..segments.len())]).collect();
                    segs.join(".")
                })
                .collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let Some(shape) = Shape::of(&keys) else {
                unshaped += 1;
                continue;
            };
            shaped += 1;
            let texts: Vec<String> = (0..keys.len()).map(|i| format!("v{i}")).collect();
            let values: Vec<Leaf> = texts.iter().map(|t| Leaf::Str(t)).collect();
            let nested = Tree::nest(keys.iter().copied().zip(values.iter().cloned()));
            let mut written = Text::with_capacity(0);
            shape.write(&values, &mut written);
            assert_eq!(written.into_string(), to_text(&nested, 0), "{keys:?}");
        }
        assert!(shaped > 1_000 && unshaped > 1_000, "{shaped} shaped, {unshaped} not");
    }

    #[test]
    fn keys_whose_nesting_depends_on_values_have_no_shape() {
        assert!(Shape::of(&["a", "a"]).is_none());
        assert!(Shape::of(&["a.b", "a"]).is_none());
        assert!(Shape::of(&["a", "a.b.c"]).is_none());
        assert!(Shape::of(&["a", "a."]).is_none());
        assert!(Shape::of(&["a", "ab", "a-b", "b.a"]).is_some());
        assert!(Shape::of(&[]).is_some());
    }
}
