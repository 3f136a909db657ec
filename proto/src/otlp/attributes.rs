//! A span's attributes, read by the convention keys of [`super::conventions`]: the first key of
//! a rule present wins, and a key's value is the attribute itself or the attributes under
//! `key.` nested into one object.
//!
//! The convention keys are numbered once ([`RULES`]). A span's attributes are matched against
//! them in one pass: each dotted prefix of each key (`a`, `a.b` and `a.b.c` of `a.b.c`) is
//! looked up once, and what matched is kept as a short list of hits. A span holds ~15
//! attributes and is read by ~80 convention keys, most of them absent, so every rule is then
//! answered from the hits without touching the attributes or hashing its keys again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::LazyLock;

use serde_json::Value;
use smallvec::SmallVec;

use super::conventions as conv;
use super::tree::{Leaf, Nested, Tree, prefix_ends};
use super::values::{Attr, index_maps_to_lists};

/// A convention key's number in [`Rules::keys`].
type KeyId = u8;

/// A set of convention keys, one bit each: [`Rules::new`] checks that they fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct KeySet(u128);

impl KeySet {
    const CAPACITY: usize = u128::BITS as usize;

    fn insert(&mut self, id: KeyId) {
        self.0 |= 1 << id;
    }

    fn holds(self, id: KeyId) -> bool {
        self.0 & (1 << id) != 0
    }

    fn meets(self, other: KeySet) -> bool {
        self.0 & other.0 != 0
    }
}

/// A rule's keys in order of precedence, and the set of them: most rules find none of their
/// keys among a span's, and that one test tells.
pub(super) struct Rule {
    keys: Vec<KeyId>,
    set: KeySet,
}

/// Every convention key, numbered in the order the rules first name it.
#[derive(Default)]
struct KeyNumbers {
    by_name: HashMap<&'static str, KeyId, foldhash::fast::FixedState>,
    names: Vec<&'static str>,
}

impl KeyNumbers {
    /// `keys` numbered, each key once across all rules.
    fn rule(&mut self, keys: &[&'static str]) -> Rule {
        let ids = keys.iter().map(|key| {
            *self.by_name.entry(key).or_insert_with(|| {
                self.names.push(key);
                (self.names.len() - 1) as KeyId
            })
        });
        let keys: Vec<KeyId> = ids.collect();
        let mut set = KeySet::default();
        keys.iter().for_each(|id| set.insert(*id));
        Rule { keys, set }
    }
}

/// Each rule of [`super::conventions`] as the numbers of its keys.
pub(super) struct Rules {
    numbers: KeyNumbers,
    pub inputs: Rule,
    pub outputs: Rule,
    pub usage: Vec<(&'static str, Rule)>,
    pub attributes: Vec<(&'static str, Rule)>,
    pub display_name: Rule,
    pub thread_id: Rule,
    pub is_turn: Rule,
    pub wb_run_id: Rule,
    pub wb_run_step: Rule,
    pub wb_run_step_end: Rule,
    pub extra: Rule,
}

pub(super) static RULES: LazyLock<Rules> = LazyLock::new(Rules::new);

impl Rules {
    fn new() -> Rules {
        let mut n = KeyNumbers::default();
        let rules = Rules {
            inputs: n.rule(conv::INPUT_KEYS),
            outputs: n.rule(conv::OUTPUT_KEYS),
            usage: conv::USAGE_KEYS.iter().map(|(f, keys)| (*f, n.rule(keys))).collect(),
            attributes: conv::ATTRIBUTE_KEYS.iter().map(|(f, keys)| (*f, n.rule(keys))).collect(),
            display_name: n.rule(conv::DISPLAY_NAME_KEYS),
            thread_id: n.rule(conv::THREAD_ID_KEYS),
            is_turn: n.rule(conv::IS_TURN_KEYS),
            wb_run_id: n.rule(conv::WB_RUN_ID_KEYS),
            wb_run_step: n.rule(conv::WB_RUN_STEP_KEYS),
            wb_run_step_end: n.rule(conv::WB_RUN_STEP_END_KEYS),
            extra: n.rule(&[conv::EXTRA_ATTRIBUTES_KEY]),
            numbers: n,
        };
        assert!(
            rules.numbers.names.len() <= KeySet::CAPACITY,
            "more convention keys than a KeySet holds"
        );
        rules
    }

    fn id(&self, key: &str) -> Option<KeyId> {
        self.numbers.by_name.get(key).copied()
    }

    fn name(&self, id: KeyId) -> &'static str {
        self.numbers.names[id as usize]
    }
}

/// Whether a value counts as present: untruthy values count as absent.
fn truthy(v: &Leaf) -> bool {
    match v {
        Leaf::Value(v) => truthy_value(v),
        Leaf::Text(t) => !t.is_empty(),
        Leaf::Str(s) => !s.is_empty(),
        Leaf::Any(a) => a.truthy(),
        Leaf::Nested(_) => true,
    }
}

pub(super) fn truthy_value(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A convention key that is an attribute's key or one of its dotted prefixes.
#[derive(Debug, Clone, Copy)]
struct Hit {
    key: KeyId,
    /// The attribute, an index into [`Attributes::flat`].
    attribute: u32,
    /// The attribute's key is the convention key itself, not under it.
    exact: bool,
}

/// One flag per attribute.
pub(super) type Marks = SmallVec<[bool; 64]>;

/// What a sequence of attribute keys matched among the convention keys.
#[derive(Debug, Clone, Default)]
pub(super) struct Matched {
    /// In attribute order. Shared: every span of a key sequence starts from its sequence's
    /// hits, and only a span with event attributes adds to them.
    hits: Rc<Vec<Hit>>,
    /// The keys among `hits`.
    present: KeySet,
}

impl Matched {
    /// Matches `keys`, the attributes from number `first` on.
    pub fn extend<'k>(&mut self, keys: impl IntoIterator<Item = &'k str>, first: usize) {
        let rules = &*RULES;
        for (i, key) in keys.into_iter().enumerate() {
            for end in prefix_ends(key).chain([key.len()]) {
                if let Some(id) = rules.id(&key[..end]) {
                    let attribute = (first + i) as u32;
                    let hit = Hit { key: id, attribute, exact: end == key.len() };
                    Rc::make_mut(&mut self.hits).push(hit);
                    self.present.insert(id);
                }
            }
        }
    }

    /// For each of `n` attributes, whether its key is one of `keys` or lies under one.
    pub fn under(&self, keys: KeySet, n: usize) -> Marks {
        let mut marked = Marks::from_elem(false, n);
        for hit in self.hits.iter().filter(|h| keys.holds(h.key)) {
            marked[hit.attribute as usize] = true;
        }
        marked
    }
}

/// The span's attributes, flat and in order, with their matches among the convention keys.
pub(super) struct Attributes<'a> {
    pub flat: Vec<(Cow<'a, str>, Attr<'a>)>,
    matched: Matched,
}

impl<'a> Attributes<'a> {
    /// `flat`, whose keys from number `matched_up_to` on are not matched yet.
    pub fn new(
        flat: Vec<(Cow<'a, str>, Attr<'a>)>,
        mut matched: Matched,
        matched_up_to: usize,
    ) -> Attributes<'a> {
        matched.extend(flat[matched_up_to..].iter().map(|(k, _)| k.as_ref()), matched_up_to);
        Attributes { flat, matched }
    }

    /// The value of the convention key `id`: the first truthy attribute of that key, else the
    /// attributes under `key.` nested into one object (indexed maps read as lists), if truthy.
    fn get(&self, id: KeyId) -> Option<Leaf<'_>> {
        if !self.matched.present.holds(id) {
            return None;
        }
        let mut under = Vec::new();
        for hit in self.matched.hits.iter().filter(|h| h.key == id) {
            let (key, value) = &self.flat[hit.attribute as usize];
            if !hit.exact {
                under.push((key.as_ref(), value));
                continue;
            }
            let v = value.leaf();
            if truthy(&v) {
                return Some(v);
            }
        }
        if under.is_empty() {
            return None;
        }
        let skip = RULES.name(id).len() + 1;
        let under = under.into_iter().map(|(key, v)| (&key[skip..], v.leaf()));
        // Not empty, so present.
        let tree = Tree::nest(under);
        if tree.reads_as_written() {
            return Some(Leaf::Nested(Rc::new(Nested::new(tree))));
        }
        Some(index_maps_to_lists(Value::Object(tree.into_map())))
            .filter(truthy_value)
            .map(|v| Leaf::Value(Cow::Owned(v)))
    }

    /// The first key of `rule` present, marked as used. Most rules have none of their keys in a
    /// span: that test is made where it is asked, and only a rule that has one is looked up.
    #[inline]
    pub fn take_first(&self, used: &mut KeySet, rule: &Rule) -> Option<(&'static str, Leaf<'_>)> {
        if !self.matched.present.meets(rule.set) {
            return None;
        }
        self.take_present(used, rule)
    }

    fn take_present(&self, used: &mut KeySet, rule: &Rule) -> Option<(&'static str, Leaf<'_>)> {
        let (id, v) = rule.keys.iter().find_map(|id| self.get(*id).map(|v| (*id, v)))?;
        used.insert(id);
        Some((RULES.name(id), v))
    }

    pub fn take_string(&self, used: &mut KeySet, rule: &Rule) -> Option<String> {
        self.take_first(used, rule).and_then(|(_, v)| match v {
            Leaf::Str(s) => Some(s.to_owned()),
            v => as_string(v.as_value()?),
        })
    }

    pub fn take_int(&self, used: &mut KeySet, rule: &Rule) -> Option<i64> {
        self.take_first(used, rule).and_then(|(_, v)| match v {
            Leaf::Str(s) => parse_int(s),
            Leaf::Any(a) => a.int().or_else(|| as_int(a.value())),
            v => as_int(v.as_value()?),
        })
    }

    /// For each attribute, whether its key is one of `keys` or lies under one.
    pub fn under(&self, keys: KeySet) -> Marks {
        self.matched.under(keys, self.flat.len())
    }
}

/// A value as a string: strings as themselves, anything but null as its JSON text.
pub(super) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A count sent as a string.
fn parse_int(s: &str) -> Option<i64> {
    s.trim().parse().ok()
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => parse_int(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_convention_key_is_numbered_once() {
        let rules = &*RULES;
        let numbers = &rules.numbers;
        assert!(numbers.names.len() <= KeySet::CAPACITY);
        assert_eq!(numbers.by_name.len(), numbers.names.len());
        for (id, key) in numbers.names.iter().enumerate() {
            assert_eq!(numbers.by_name[key] as usize, id);
        }
        let named = |keys: &[&str], rule: &Rule| {
            let by_id: Vec<&str> = rule.keys.iter().map(|id| rules.name(*id)).collect();
            assert_eq!(by_id, keys);
            assert_eq!(rule.set.0.count_ones() as usize, keys.len());
            assert!(rule.keys.iter().all(|id| rule.set.holds(*id)));
        };
        named(conv::INPUT_KEYS, &rules.inputs);
        named(conv::OUTPUT_KEYS, &rules.outputs);
        named(conv::IS_TURN_KEYS, &rules.is_turn);
        for ((field, keys), (f, rule)) in conv::ATTRIBUTE_KEYS.iter().zip(&rules.attributes) {
            assert_eq!(field, f);
            named(keys, rule);
        }
    }
}
