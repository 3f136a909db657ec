//! The attribute keys of a request's spans, matched and shaped once per sequence. One
//! instrumentation writes the same keys in the same order span after span, so a request of
//! hundreds of spans holds a few key sequences. For each, what its keys match among the
//! convention keys ([`Matched`]) and the shape of its dumped attributes ([`Shape`]) are made
//! once and found again by the sequence. Matching every dotted prefix of every key, span after
//! span, was about 7% of a span's conversion, and finding the shape hashed the kept keys again
//! (docs/benchmarks.md, "Key sequences matched once").

use std::collections::HashMap;
use std::rc::Rc;

use super::attributes::{KeySet, Matched};
use super::span::{SpanError, check_key};
use super::tree::Shape;

/// Key sequences kept per request: a request whose spans all differ is matched and nested span
/// by span.
const MAX_SEQUENCES: usize = 64;
/// Shapes kept per request, over all its sequences.
const MAX_SHAPES: usize = 64;

/// A span's key sequence among its request's: `None` past [`MAX_SEQUENCES`].
#[derive(Debug, Clone, Copy)]
pub(super) struct SequenceId(Option<usize>);

struct Sequence {
    matched: Matched,
    /// The shapes of its spans' attributes as members write them (`None`: no shape).
    shapes: Vec<(ShapeOf, Option<Rc<Shape>>)>,
}

/// Which of a span's attributes a shape writes, given its key sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShapeOf {
    /// The dump's: those not under the convention keys `moved` into inputs and output.
    Dump { moved: KeySet },
    /// The call's `attributes`: those not under the convention keys `used` by a rule, then
    /// the fields the rules made (bit `i`: the field of the `i`th attribute rule).
    Attributes { used: KeySet, fields: u16 },
}

/// The key sequences of one request's spans.
#[derive(Default)]
pub struct Sequences<'a> {
    ids: HashMap<Vec<&'a str>, usize, foldhash::fast::RandomState>,
    seen: Vec<Sequence>,
    shapes: usize,
}

impl<'a> Sequences<'a> {
    /// What the span attribute keys `keys` match, and their sequence; each key is checked
    /// ([`check_key`]) before it is matched, once per sequence.
    pub(super) fn matched(&mut self, keys: &[&'a str]) -> Result<(Matched, SequenceId), SpanError> {
        if let Some(&id) = self.ids.get(keys) {
            return Ok((self.seen[id].matched.clone(), SequenceId(Some(id))));
        }
        keys.iter().try_for_each(|key| check_key(key))?;
        let mut matched = Matched::default();
        matched.extend(keys.iter().copied(), 0);
        if self.seen.len() == MAX_SEQUENCES {
            return Ok((matched, SequenceId(None)));
        }
        self.ids.insert(keys.to_vec(), self.seen.len());
        self.seen.push(Sequence { matched: matched.clone(), shapes: Vec::new() });
        Ok((matched, SequenceId(Some(self.seen.len() - 1))))
    }

    /// The shape `of` the attributes of sequence `id`; `keys` names the keys it writes, in
    /// order, when the shape is new. Shared, since a span's members are written after it took
    /// the shapes of both.
    pub(super) fn shape<'k>(
        &mut self,
        id: SequenceId,
        of: ShapeOf,
        keys: impl FnOnce() -> Vec<&'k str>,
    ) -> Option<Rc<Shape>> {
        let sequence = &mut self.seen[id.0?];
        let at = match sequence.shapes.iter().position(|(o, _)| *o == of) {
            Some(at) => at,
            None if self.shapes < MAX_SHAPES => {
                self.shapes += 1;
                sequence.shapes.push((of, Shape::of(&keys()).map(Rc::new)));
                sequence.shapes.len() - 1
            }
            None => return None,
        };
        sequence.shapes[at].1.clone()
    }
}
