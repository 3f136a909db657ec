//! Typed identifiers.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ProtoError;

/// A project in its external form `<entity>/<project>`: exactly one `/`, neither part empty.
/// This is the only form heddle stores and returns, so there is no internal id to leak.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectId {
    full: String,
    slash: usize,
}

impl ProjectId {
    pub fn parse(s: &str) -> Result<Self, ProtoError> {
        let bad = || {
            ProtoError::invalid(format!(
                "invalid project_id {s:?}: expected \"<entity>/<project>\""
            ))
        };
        let slash = s.find('/').ok_or_else(bad)?;
        let (entity, project) = (&s[..slash], &s[slash + 1..]);
        if entity.is_empty() || project.is_empty() || project.contains('/') {
            return Err(bad());
        }
        if s.len() > 512 || s.chars().any(char::is_control) {
            return Err(bad());
        }
        Ok(ProjectId { full: s.to_owned(), slash })
    }

    pub fn from_parts(entity: &str, project: &str) -> Result<Self, ProtoError> {
        Self::parse(&format!("{entity}/{project}"))
    }

    pub fn entity(&self) -> &str {
        &self.full[..self.slash]
    }

    pub fn project(&self) -> &str {
        &self.full[self.slash + 1..]
    }

    pub fn as_str(&self) -> &str {
        &self.full
    }
}

impl fmt::Display for ProjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

impl Serialize for ProjectId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.full)
    }
}

impl<'de> Deserialize<'de> for ProjectId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ProjectId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A fresh call/trace id in the form the SDK uses (UUIDv7, lowercase hex with dashes).
pub fn new_call_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entity_and_project() {
        let p = ProjectId::parse("ent/proj").unwrap();
        assert_eq!((p.entity(), p.project(), p.as_str()), ("ent", "proj", "ent/proj"));
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["", "ent", "/proj", "ent/", "a/b/c", "a/\u{0}"] {
            assert!(ProjectId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
