//! Tags and aliases of object versions (docs/api/objects.md#tags-and-aliases): the request
//! shapes of their routes and the rules a tag or an alias must follow.
//!
//! A tag labels one version (`(object_id, digest)`); a version has any number of tags. An alias
//! names one version of an object (`(object_id, alias)` → digest): setting it on another version
//! moves it. `latest` is never stored: it is the newest live version, computed on read.

use serde::Deserialize;

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::limits::{MAX_ALIAS_CHARS, MAX_NAMES_PER_REQUEST, MAX_TAG_CHARS};
use crate::objects::LATEST_ALIAS;

/// Body of `PUT /objs/{object_id}/versions/{digest}/tags` and `POST .../tags/remove`. The
/// SDK's body also carries `object_id`, which the path already says; it is ignored.
#[derive(Debug, Deserialize)]
pub struct TagsReq {
    pub project_id: ProjectId,
    pub tags: Vec<String>,
}

/// Body of `PUT /objs/{object_id}/aliases`.
#[derive(Debug, Deserialize)]
pub struct AliasSetReq {
    pub project_id: ProjectId,
    pub digest: String,
    pub aliases: Vec<String>,
}

/// Body of `POST /objs/{object_id}/aliases/remove`.
#[derive(Debug, Deserialize)]
pub struct AliasRemoveReq {
    pub project_id: ProjectId,
    pub aliases: Vec<String>,
}

/// The query string of `GET /tags` and `GET /aliases`.
#[derive(Debug, Deserialize)]
pub struct ProjectParam {
    pub project_id: ProjectId,
}

/// A tag: 1 to [`MAX_TAG_CHARS`] characters, words of letters, digits, `-` and `_` separated by
/// single spaces (no leading, trailing or double spaces) — the hosted service's rule.
pub fn check_tag(tag: &str) -> Result<(), ProtoError> {
    let word_char = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    let words_ok = tag.split(' ').all(|w| !w.is_empty() && w.chars().all(word_char));
    if tag.is_empty() || tag.chars().count() > MAX_TAG_CHARS || !words_ok {
        return Err(ProtoError::invalid(format!(
            "invalid tag {tag:?}: 1-{MAX_TAG_CHARS} characters, letters, digits, '-' and '_', \
             words separated by single spaces"
        )));
    }
    Ok(())
}

/// An alias: 1 to [`MAX_ALIAS_CHARS`] characters, not only whitespace, no `/` or `:` (they
/// would make refs ambiguous), no control characters. `latest` and `v<number>` are reserved:
/// refs already read them as the newest version and a version index.
pub fn check_alias(alias: &str) -> Result<(), ProtoError> {
    let bad = |why: &str| Err(ProtoError::invalid(format!("invalid alias {alias:?}: {why}")));
    if alias.trim().is_empty() {
        return bad("must not be empty or whitespace only");
    }
    if alias.chars().count() > MAX_ALIAS_CHARS {
        return bad(&format!("at most {MAX_ALIAS_CHARS} characters"));
    }
    if alias.chars().any(|c| c == '/' || c == ':' || c.is_control()) {
        return bad("must not contain '/', ':' or control characters");
    }
    if alias == LATEST_ALIAS {
        return bad("\"latest\" is reserved: it always names the newest version");
    }
    if alias.len() > 1 && alias.starts_with('v') && alias[1..].bytes().all(|b| b.is_ascii_digit()) {
        return bad("v<number> is reserved: it names a version by its index");
    }
    Ok(())
}

/// Checks a request's list of names with `check` and the per-request bound; returns them
/// deduplicated, in the order given.
pub fn checked_names(
    what: &str,
    names: Vec<String>,
    check: fn(&str) -> Result<(), ProtoError>,
) -> Result<Vec<String>, ProtoError> {
    if names.len() > MAX_NAMES_PER_REQUEST {
        return Err(ProtoError::invalid(format!(
            "at most {MAX_NAMES_PER_REQUEST} {what} per request, got {}",
            names.len()
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        check(&n)?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        for ok in ["prod", "needs review", "a-b_c", "日本", &"x".repeat(MAX_TAG_CHARS)] {
            assert!(check_tag(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(MAX_TAG_CHARS + 1);
        for bad in ["", " a", "a ", "a  b", "a/b", "a:b", "a.b", "tab\tx", long.as_str()] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn aliases() {
        for ok in ["production", "v1.2", "release candidate", "v", "version3", "vx1"] {
            assert!(check_alias(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_ALIAS_CHARS + 1);
        for bad in ["", "  ", "latest", "v0", "v12", "a/b", "a:b", "a\nb", long.as_str()] {
            assert!(check_alias(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn name_lists() {
        let names = vec!["a".to_owned(), "b".to_owned(), "a".to_owned()];
        assert_eq!(checked_names("tags", names, check_tag).unwrap(), ["a", "b"]);
        let many = vec!["a".to_owned(); MAX_NAMES_PER_REQUEST + 1];
        assert!(checked_names("tags", many, check_tag).is_err());
        assert!(checked_names("tags", vec!["a b ".into()], check_tag).is_err());
    }
}
