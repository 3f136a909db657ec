//! `serde_json`'s verdict on text the scan was not sure of ([`super::scan`]): whether parsing it
//! into values succeeds within [`MAX_MEMBER_DEPTH`], found by walking it with a visitor that
//! builds nothing. Text that values refuse must cost no more than reading it: parsing a refused
//! member into values would build everything before the fault (a lone surrogate at the end of
//! megabytes of numbers) only to throw it away.

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use crate::limits::MAX_MEMBER_DEPTH;

/// Why values refuse a text.
pub(super) enum Refusal {
    TooDeep,
    Invalid(serde_json::Error),
}

/// The key under which `serde_json` (built with `arbitrary_precision`, as heddle is) hands a
/// number to a visitor as a map of one entry, and reads an object of that one key as a number.
pub(super) const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Whether `text` parses into values within [`MAX_MEMBER_DEPTH`].
pub(super) fn check(text: &str) -> Result<(), Refusal> {
    run(text, false).map(|_| ())
}

/// Whether some object in `text` repeats a key (compared as values read keys, escapes
/// decoded); `None` when values refuse the text. Text stored as sent never does: tests and the
/// fuzz target check that with this.
pub fn repeats_a_key(text: &str) -> Option<bool> {
    run(text, true).ok()
}

fn run(text: &str, track_keys: bool) -> Result<bool, Refusal> {
    let mut walk = Walk { depth: 0, track_keys, repeated: false };
    let mut de = serde_json::Deserializer::from_str(text);
    match (&mut walk).deserialize(&mut de).and_then(|()| de.end()) {
        Ok(()) => Ok(walk.repeated),
        Err(_) if walk.depth > MAX_MEMBER_DEPTH => Err(Refusal::TooDeep),
        Err(e) => Err(Refusal::Invalid(e)),
    }
}

/// The objects and arrays open (past [`MAX_MEMBER_DEPTH`] the walk stops with `depth` left
/// above it), and, when keys are tracked, whether an object repeated one.
struct Walk {
    depth: usize,
    track_keys: bool,
    repeated: bool,
}

impl Walk {
    fn enter<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.depth += 1;
        if self.depth > MAX_MEMBER_DEPTH {
            return Err(E::custom("too deep"));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Walk {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.enter()?;
        while seq.next_element_seed(&mut *self)?.is_some() {}
        self.depth -= 1;
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut next = map.next_key::<Cow<'de, str>>()?;
        if next.as_deref() == Some(NUMBER_TOKEN) {
            // A number as serde_json hands one over, or an object written with that first key,
            // which values read as a number too: not a level of nesting either way.
            let digits: String = map.next_value()?;
            digits.parse::<serde_json::Number>().map_err(A::Error::custom)?;
            return match map.next_key::<IgnoredAny>()? {
                None => Ok(()),
                Some(_) => Err(A::Error::custom("a number object with more than one key")),
            };
        }
        self.enter()?;
        let mut keys = HashSet::new();
        while let Some(key) = next {
            if self.track_keys && !keys.insert(key) {
                self.repeated = true;
            }
            map.next_value_seed(&mut *self)?;
            next = map.next_key()?;
        }
        self.depth -= 1;
        Ok(())
    }
}
