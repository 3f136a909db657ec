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
use std::sync::LazyLock;

use serde_json::Value;

use super::conventions as conv;
use super::tree::{Leaf, Tree};
use super::values::{Attr, index_maps_to_lists};

/// A convention key's number in [`Rules::keys`].
type KeyId = u8;

/// A set of convention keys, one bit each: [`Rules::new`] checks that they fit.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KeySet(u128);

impl KeySet {
    const CAPACITY: usize = u128::BITS as usize;

    fn insert(&mut self, id: KeyId) {
        self.0 |= 1 << id;
    }

    fn holds(self, id: KeyId) -> bool {
        self.0 & (1 << id) != 0
    }
}

/// A rule's keys in order of precedence.
pub(super) struct Rule(Vec<KeyId>);

/// Every convention key numbered, and each rule of [`super::conventions`] as those numbers.
pub(super) struct Rules {
    ids: HashMap<&'static str, KeyId, foldhash::fast::FixedState>,
    keys: Vec<&'static str>,
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
        let mut rules = Rules {
            ids: HashMap::default(),
            keys: Vec::new(),
            inputs: Rule(Vec::new()),
            outputs: Rule(Vec::new()),
            usage: Vec::new(),
            attributes: Vec::new(),
            display_name: Rule(Vec::new()),
            thread_id: Rule(Vec::new()),
            is_turn: Rule(Vec::new()),
            wb_run_id: Rule(Vec::new()),
            wb_run_step: Rule(Vec::new()),
            wb_run_step_end: Rule(Vec::new()),
            extra: Rule(Vec::new()),
        };
        rules.inputs = rules.rule(conv::INPUT_KEYS);
        rules.outputs = rules.rule(conv::OUTPUT_KEYS);
        rules.usage = conv::USAGE_KEYS.iter().map(|(f, keys)| (*f, rules.rule(keys))).collect();
        rules.attributes =
            conv::ATTRIBUTE_KEYS.iter().map(|(f, keys)| (*f, rules.rule(keys))).collect();
        rules.display_name = rules.rule(conv::DISPLAY_NAME_KEYS);
        rules.thread_id = rules.rule(conv::THREAD_ID_KEYS);
        rules.is_turn = rules.rule(conv::IS_TURN_KEYS);
        rules.wb_run_id = rules.rule(conv::WB_RUN_ID_KEYS);
        rules.wb_run_step = rules.rule(conv::WB_RUN_STEP_KEYS);
        rules.wb_run_step_end = rules.rule(conv::WB_RUN_STEP_END_KEYS);
        rules.extra = rules.rule(&[conv::EXTRA_ATTRIBUTES_KEY]);
        assert!(rules.keys.len() <= KeySet::CAPACITY, "more convention keys than a KeySet holds");
        rules
    }

    /// `keys` numbered, each key once across all rules.
    fn rule(&mut self, keys: &[&'static str]) -> Rule {
        let ids = keys.iter().map(|key| {
            *self.ids.entry(key).or_insert_with(|| {
                self.keys.push(key);
                (self.keys.len() - 1) as KeyId
            })
        });
        Rule(ids.collect())
    }
}

/// Whether a value counts as present: untruthy values count as absent.
fn truthy(v: &Leaf) -> bool {
    match v {
        Leaf::Value(v) => truthy_value(v),
        Leaf::Text(t) => !t.is_empty(),
        Leaf::Str(s) => !s.is_empty(),
    }
}

fn truthy_value(v: &Value) -> bool {
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

/// The span's attributes, flat and in order, with their matches among the convention keys.
pub(super) struct Attributes<'a> {
    pub flat: Vec<(Cow<'a, str>, Attr<'a>)>,
    /// In attribute order.
    hits: Vec<Hit>,
    /// The keys among `hits`.
    present: KeySet,
}

impl<'a> Attributes<'a> {
    pub fn new(flat: Vec<(Cow<'a, str>, Attr<'a>)>) -> Attributes<'a> {
        let rules = &*RULES;
        let mut hits = Vec::new();
        let mut present = KeySet::default();
        for (i, (key, _)) in flat.iter().enumerate() {
            let ends = key.match_indices('.').map(|(end, _)| end).chain([key.len()]);
            for end in ends {
                if let Some(&id) = rules.ids.get(&key[..end]) {
                    hits.push(Hit { key: id, attribute: i as u32, exact: end == key.len() });
                    present.insert(id);
                }
            }
        }
        Attributes { flat, hits, present }
    }

    /// The value of the convention key `id`: the first truthy attribute of that key, else the
    /// attributes under `key.` nested into one object (indexed maps read as lists), if truthy.
    fn get(&self, id: KeyId) -> Option<Leaf<'_>> {
        if !self.present.holds(id) {
            return None;
        }
        let mut under = Vec::new();
        for hit in self.hits.iter().filter(|h| h.key == id) {
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
        let skip = RULES.keys[id as usize].len() + 1;
        let under = under.into_iter().map(|(key, v)| (&key[skip..], v.leaf()));
        Some(index_maps_to_lists(Value::Object(Tree::nest(under).into_map())))
            .filter(truthy_value)
            .map(|v| Leaf::Value(Cow::Owned(v)))
    }

    /// The first key of `rule` present, marked as used.
    pub fn take_first(&self, used: &mut KeySet, rule: &Rule) -> Option<(&'static str, Leaf<'_>)> {
        let (id, v) = rule.0.iter().find_map(|id| self.get(*id).map(|v| (*id, v)))?;
        used.insert(id);
        Some((RULES.keys[id as usize], v))
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
            v => as_int(v.as_value()?),
        })
    }

    /// For each attribute, whether its key is one of `keys` or lies under one.
    pub fn under(&self, keys: KeySet) -> Vec<bool> {
        let mut marked = vec![false; self.flat.len()];
        for hit in self.hits.iter().filter(|h| keys.holds(h.key)) {
            marked[hit.attribute as usize] = true;
        }
        marked
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
        assert!(rules.keys.len() <= KeySet::CAPACITY);
        assert_eq!(rules.ids.len(), rules.keys.len());
        for (id, key) in rules.keys.iter().enumerate() {
            assert_eq!(rules.ids[key] as usize, id);
        }
        let named = |keys: &[&str], rule: &Rule| {
            let by_id: Vec<&str> = rule.0.iter().map(|id| rules.keys[*id as usize]).collect();
            assert_eq!(by_id, keys);
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
