//! Annotation queues (docs/api/annotation-queues.md): named lists of calls for people to
//! review against a set of scorers. The request shapes of the `/annotation_queues` routes, their
//! validation, what the routes answer, and the rules of an annotator's progress on an item.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::limits::{
    MAX_FILTER_IDS, MAX_QUEUE_ADD_CALLS, MAX_QUEUE_DESCRIPTION_CHARS, MAX_QUEUE_ENTRY_BYTES,
    MAX_QUEUE_LIST_ENTRIES, MAX_QUEUE_NAME_CHARS, MAX_QUEUE_STATS_IDS,
};
use crate::refs::{self, Ref};
use crate::time::Micros;
use heddle_ql::{Direction, SortBy};

/// The longest queue or item id a path may carry; longer ones cannot exist.
pub const MAX_ID_BYTES: usize = 128;

#[derive(Debug, Deserialize)]
pub struct QueueCreateReq {
    pub project_id: ProjectId,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub scorer_refs: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct QueueUpdateReq {
    pub project_id: ProjectId,
    pub name: Option<String>,
    pub description: Option<String>,
    pub scorer_refs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub struct QueuesQueryReq {
    pub project_id: ProjectId,
    pub name: Option<String>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct QueueStatsReq {
    pub project_id: ProjectId,
    pub queue_ids: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct ItemsAddReq {
    pub project_id: ProjectId,
    pub call_ids: Vec<String>,
    pub display_fields: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ItemsFilter {
    pub id: Option<String>,
    pub added_by: Option<String>,
    pub annotation_states: Option<Vec<AnnotationState>>,
    pub call_id: Option<String>,
    pub call_op_name: Option<String>,
    pub call_trace_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ItemsQueryReq {
    pub project_id: ProjectId,
    pub filter: Option<ItemsFilter>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub include_position: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct ProgressReq {
    pub project_id: ProjectId,
    pub annotation_state: String,
}

/// Where one annotator is with one item. An item's state is that of the annotator who changed
/// it last, `unstarted` while nobody has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnnotationState {
    Unstarted,
    InProgress,
    Completed,
    Skipped,
}

impl AnnotationState {
    pub const ALL: [AnnotationState; 4] = [
        AnnotationState::Unstarted,
        AnnotationState::InProgress,
        AnnotationState::Completed,
        AnnotationState::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AnnotationState::Unstarted => "unstarted",
            AnnotationState::InProgress => "in_progress",
            AnnotationState::Completed => "completed",
            AnnotationState::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<AnnotationState> {
        AnnotationState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether an item in this state counts as done in a queue's stats.
    pub fn is_done(self) -> bool {
        matches!(self, AnnotationState::Completed | AnnotationState::Skipped)
    }
}

/// The state an annotator may set, given their current one (`None`: they never touched the
/// item). As the hosted service: `in_progress` only on an item the annotator has not touched;
/// `completed` or `skipped` from nothing or from `in_progress`; nothing after that.
pub fn check_transition(
    current: Option<AnnotationState>,
    new: &str,
) -> Result<AnnotationState, ProtoError> {
    let new = match AnnotationState::parse(new) {
        Some(s) if s != AnnotationState::Unstarted => s,
        _ => {
            return Err(ProtoError::invalid(format!(
                "invalid annotation_state {new:?}: expected \"in_progress\", \"completed\" or \
                 \"skipped\""
            )));
        }
    };
    let allowed = match (current, new) {
        (None, _) => true,
        (Some(_), AnnotationState::InProgress) => false,
        (Some(cur), _) => matches!(cur, AnnotationState::InProgress | AnnotationState::Unstarted),
    };
    if !allowed {
        let cur = current.map_or("none", AnnotationState::as_str);
        return Err(ProtoError::invalid(format!(
            "cannot change this item's annotation state from {cur:?} to {:?}",
            new.as_str()
        )));
    }
    Ok(new)
}

/// An annotation queue as the routes answer it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Queue {
    pub id: String,
    pub project_id: ProjectId,
    pub name: String,
    pub description: String,
    pub scorer_refs: Vec<String>,
    pub created_at: Micros,
    pub created_by: String,
    pub updated_at: Micros,
    pub deleted_at: Option<Micros>,
}

/// One call in a queue, as the routes answer it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueItem {
    pub id: String,
    pub project_id: ProjectId,
    pub queue_id: String,
    pub call_id: String,
    pub call_started_at: Micros,
    pub call_ended_at: Option<Micros>,
    pub call_op_name: String,
    pub call_trace_id: String,
    pub display_fields: Vec<String>,
    pub added_by: Option<String>,
    pub annotation_state: AnnotationState,
    pub annotator_user_id: Option<String>,
    pub created_at: Micros,
    pub created_by: String,
    pub updated_at: Micros,
    pub deleted_at: Option<Micros>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position_in_queue: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    pub queue_id: String,
    pub total_items: u64,
    pub completed_items: u64,
}

/// A new queue, validated.
#[derive(Debug, Clone)]
pub struct NewQueue {
    pub project: ProjectId,
    pub id: String,
    pub name: String,
    pub description: String,
    pub scorer_refs: Vec<String>,
    pub created_by: String,
    pub created_at: Micros,
}

/// The members an update changes (`None`: keep).
#[derive(Debug, Clone, Default)]
pub struct QueueChanges {
    pub name: Option<String>,
    pub description: Option<String>,
    pub scorer_refs: Option<Vec<String>>,
}

/// A call to add to a queue: the call's own fields are copied into the item when it is added.
#[derive(Debug, Clone)]
pub struct NewItem {
    pub call_id: String,
    pub call_started_at: Micros,
    pub call_ended_at: Option<Micros>,
    pub call_op_name: String,
    pub call_trace_id: String,
}

fn check_name(name: &str) -> Result<(), ProtoError> {
    if name.trim().is_empty() || name.chars().count() > MAX_QUEUE_NAME_CHARS {
        return Err(ProtoError::invalid(format!(
            "a queue name has 1-{MAX_QUEUE_NAME_CHARS} characters and is not only whitespace"
        )));
    }
    Ok(())
}

fn check_description(d: &str) -> Result<(), ProtoError> {
    if d.chars().count() > MAX_QUEUE_DESCRIPTION_CHARS {
        return Err(ProtoError::invalid(format!(
            "a queue description has at most {MAX_QUEUE_DESCRIPTION_CHARS} characters"
        )));
    }
    Ok(())
}

/// A bounded list of non-empty strings, each at most [`MAX_QUEUE_ENTRY_BYTES`].
fn check_list(what: &str, list: &[String], max: usize) -> Result<(), ProtoError> {
    if list.len() > max {
        return Err(ProtoError::invalid(format!(
            "at most {max} {what} per request, got {}",
            list.len()
        )));
    }
    if let Some(bad) = list.iter().find(|s| s.is_empty() || s.len() > MAX_QUEUE_ENTRY_BYTES) {
        return Err(ProtoError::invalid(format!(
            "{what}: {bad:?} must have 1-{MAX_QUEUE_ENTRY_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Scorer refs are refs to objects (the scorers or annotation specs reviewers fill in).
fn check_scorer_refs(list: &[String]) -> Result<(), ProtoError> {
    check_list("scorer_refs", list, MAX_QUEUE_LIST_ENTRIES)?;
    for r in list {
        match refs::parse(r)? {
            Ref::Object(_) => {}
            _ => {
                return Err(ProtoError::invalid(format!(
                    "scorer ref {r:?} is not an object or op ref"
                )));
            }
        }
    }
    Ok(())
}

/// A queue or item id from a path or a body.
pub fn check_id(what: &str, id: &str) -> Result<(), ProtoError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(ProtoError::invalid(format!("{what} must have 1-{MAX_ID_BYTES} bytes")));
    }
    Ok(())
}

fn non_negative(what: &str, v: Option<i64>) -> Result<Option<u64>, ProtoError> {
    match v {
        Some(n) if n < 0 => Err(ProtoError::invalid(format!("{what} must be >= 0, got {n}"))),
        v => Ok(v.map(|n| n as u64)),
    }
}

impl QueueCreateReq {
    pub fn validate(self, created_by: &str, now: Micros) -> Result<NewQueue, ProtoError> {
        check_name(&self.name)?;
        let description = self.description.unwrap_or_default();
        check_description(&description)?;
        check_scorer_refs(&self.scorer_refs)?;
        Ok(NewQueue {
            project: self.project_id,
            id: uuid::Uuid::now_v7().to_string(),
            name: self.name,
            description,
            scorer_refs: self.scorer_refs,
            created_by: created_by.to_owned(),
            created_at: now,
        })
    }
}

impl QueueUpdateReq {
    pub fn validate(self) -> Result<(ProjectId, QueueChanges), ProtoError> {
        if let Some(n) = &self.name {
            check_name(n)?;
        }
        if let Some(d) = &self.description {
            check_description(d)?;
        }
        if let Some(r) = &self.scorer_refs {
            check_scorer_refs(r)?;
        }
        let changes = QueueChanges {
            name: self.name,
            description: self.description,
            scorer_refs: self.scorer_refs,
        };
        Ok((self.project_id, changes))
    }
}

impl QueueChanges {
    pub fn apply(&self, q: &mut Queue, now: Micros) {
        if let Some(n) = &self.name {
            q.name = n.clone();
        }
        if let Some(d) = &self.description {
            q.description = d.clone();
        }
        if let Some(r) = &self.scorer_refs {
            q.scorer_refs = r.clone();
        }
        q.updated_at = now;
    }
}

/// What `/annotation_queues/query` may sort by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSortField {
    Id,
    Name,
    CreatedAt,
    UpdatedAt,
}

/// A validated queue listing: the project's live queues.
#[derive(Debug, Clone)]
pub struct QueuesQuery {
    pub project: ProjectId,
    /// Case-insensitive substring of the name.
    pub name: Option<String>,
    /// Always ends with `id` ascending, so paging is deterministic.
    pub sort: Vec<(QueueSortField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
}

impl QueuesQueryReq {
    pub fn validate(self) -> Result<QueuesQuery, ProtoError> {
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            let field = match s.field.as_str() {
                "id" => QueueSortField::Id,
                "name" => QueueSortField::Name,
                "created_at" => QueueSortField::CreatedAt,
                "updated_at" => QueueSortField::UpdatedAt,
                other => {
                    return Err(ProtoError::invalid(format!(
                        "cannot sort queues by {other:?}: expected \"id\", \"name\", \
                         \"created_at\" or \"updated_at\""
                    )));
                }
            };
            sort.push((field, s.direction));
        }
        if sort.is_empty() {
            sort.push((QueueSortField::CreatedAt, Direction::Desc));
        }
        sort.push((QueueSortField::Id, Direction::Asc));
        if let Some(n) = &self.name {
            check_list("name filters", std::slice::from_ref(n), 1)?;
        }
        Ok(QueuesQuery {
            project: self.project_id,
            name: self.name.filter(|n| !n.is_empty()),
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
        })
    }
}

impl QueueStatsReq {
    pub fn validate(self) -> Result<(ProjectId, Vec<String>), ProtoError> {
        if self.queue_ids.len() > MAX_QUEUE_STATS_IDS {
            return Err(ProtoError::invalid(format!(
                "at most {MAX_QUEUE_STATS_IDS} queue_ids per request, got {}",
                self.queue_ids.len()
            )));
        }
        for id in &self.queue_ids {
            check_id("a queue id", id)?;
        }
        Ok((self.project_id, self.queue_ids))
    }
}

impl ItemsAddReq {
    /// The distinct call ids in the order given, and how many repeats the request held.
    pub fn validate(self) -> Result<(ProjectId, Vec<String>, Vec<String>, u64), ProtoError> {
        if self.call_ids.len() > MAX_QUEUE_ADD_CALLS {
            return Err(ProtoError::invalid(format!(
                "at most {MAX_QUEUE_ADD_CALLS} call_ids per request, got {}",
                self.call_ids.len()
            )));
        }
        check_list("call_ids", &self.call_ids, MAX_QUEUE_ADD_CALLS)?;
        check_list("display_fields", &self.display_fields, MAX_QUEUE_LIST_ENTRIES)?;
        let given = self.call_ids.len();
        let mut ids: Vec<String> = Vec::with_capacity(given);
        let mut seen = std::collections::HashSet::new();
        for id in self.call_ids {
            if seen.insert(id.clone()) {
                ids.push(id);
            }
        }
        let repeats = (given - ids.len()) as u64;
        Ok((self.project_id, ids, self.display_fields, repeats))
    }
}

/// What queue items may be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemSortField {
    CallStartedAt,
    CallOpName,
    CreatedAt,
    UpdatedAt,
    Id,
}

/// A validated listing of a queue's items.
#[derive(Debug, Clone)]
pub struct ItemsQuery {
    pub project: ProjectId,
    pub queue_id: String,
    pub filter: ItemsFilter,
    /// Always ends with `id` ascending.
    pub sort: Vec<(ItemSortField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
    pub include_position: bool,
}

impl ItemsQueryReq {
    pub fn validate(self, queue_id: String) -> Result<ItemsQuery, ProtoError> {
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            let field = match s.field.as_str() {
                "call_started_at" => ItemSortField::CallStartedAt,
                "call_op_name" => ItemSortField::CallOpName,
                "created_at" => ItemSortField::CreatedAt,
                "updated_at" => ItemSortField::UpdatedAt,
                "id" => ItemSortField::Id,
                other => {
                    return Err(ProtoError::invalid(format!(
                        "cannot sort queue items by {other:?}: expected \"call_started_at\", \
                         \"call_op_name\", \"created_at\" or \"updated_at\""
                    )));
                }
            };
            sort.push((field, s.direction));
        }
        if sort.is_empty() {
            sort.push((ItemSortField::CreatedAt, Direction::Asc));
        }
        sort.push((ItemSortField::Id, Direction::Asc));
        let filter = self.filter.unwrap_or_default();
        let strings = [
            &filter.id,
            &filter.added_by,
            &filter.call_id,
            &filter.call_op_name,
            &filter.call_trace_id,
        ];
        for s in strings.into_iter().flatten() {
            check_list("filter values", std::slice::from_ref(s), 1)?;
        }
        if filter.annotation_states.as_ref().is_some_and(|s| s.len() > MAX_FILTER_IDS) {
            return Err(ProtoError::invalid("too many annotation_states"));
        }
        Ok(ItemsQuery {
            project: self.project_id,
            queue_id,
            filter,
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
            include_position: self.include_position.unwrap_or(false),
        })
    }
}

impl ItemsQuery {
    /// Whether `item` passes the filter (backends filter in SQL as well; this is the rule).
    pub fn matches(&self, item: &QueueItem) -> bool {
        let f = &self.filter;
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        eq(&f.id, &item.id)
            && eq(&f.call_id, &item.call_id)
            && eq(&f.call_op_name, &item.call_op_name)
            && eq(&f.call_trace_id, &item.call_trace_id)
            && f.added_by.as_deref().is_none_or(|w| item.added_by.as_deref() == Some(w))
            && f.annotation_states
                .as_ref()
                .is_none_or(|s| s.is_empty() || s.contains(&item.annotation_state))
    }
}

/// The id of the item of `call_id` in queue `queue_id`: derived from both, so adding a call
/// twice (a retry, or two servers at once) names one item, and backends that cannot check and
/// insert atomically still store it once. A UUID (version 8, custom) like the hosted service's
/// random ones.
pub fn item_id(queue_id: &str, call_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(queue_id.as_bytes());
    h.update([0]);
    h.update(call_id.as_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid().to_string()
}

/// How the routes order items: by `sort`, which ends with `id`.
pub fn compare_items(
    sort: &[(ItemSortField, Direction)],
    a: &QueueItem,
    b: &QueueItem,
) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    for (field, dir) in sort {
        let o = match field {
            ItemSortField::CallStartedAt => a.call_started_at.0.cmp(&b.call_started_at.0),
            ItemSortField::CallOpName => a.call_op_name.cmp(&b.call_op_name),
            ItemSortField::CreatedAt => a.created_at.0.cmp(&b.created_at.0),
            ItemSortField::UpdatedAt => a.updated_at.0.cmp(&b.updated_at.0),
            ItemSortField::Id => a.id.cmp(&b.id),
        };
        let o = if *dir == Direction::Desc { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn transitions() {
        use AnnotationState::*;
        let ok = |cur, new: &str| check_transition(cur, new).is_ok();
        assert!(ok(None, "in_progress") && ok(None, "completed") && ok(None, "skipped"));
        assert!(ok(Some(InProgress), "completed") && ok(Some(InProgress), "skipped"));
        assert!(!ok(Some(InProgress), "in_progress"));
        assert!(!ok(Some(Completed), "skipped") && !ok(Some(Skipped), "completed"));
        assert!(!ok(None, "unstarted") && !ok(None, "done"));
    }

    #[test]
    fn item_ids_are_stable_uuids() {
        let a = item_id("q", "c");
        assert_eq!(a, item_id("q", "c"));
        assert_ne!(a, item_id("q", "d"));
        assert_ne!(item_id("qc", ""), item_id("q", "c"));
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 8);
    }

    #[test]
    fn creates_and_queries() {
        let req = |v| serde_json::from_value::<QueueCreateReq>(v).unwrap();
        let good = json!({"project_id": "e/p", "name": "Review", "scorer_refs":
                          ["weave:///e/p/object/s:abc"], "wb_user_id": null});
        let q = req(good).validate("u", Micros(1)).unwrap();
        assert_eq!((q.description.as_str(), q.created_by.as_str()), ("", "u"));
        for bad in [
            json!({"project_id": "e/p", "name": " ", "scorer_refs": []}),
            json!({"project_id": "e/p", "name": "n", "scorer_refs": ["not a ref"]}),
            json!({"project_id": "e/p", "name": "n", "scorer_refs": ["weave:///e/p/call/x"]}),
            json!({"project_id": "e/p", "name": "x".repeat(MAX_QUEUE_NAME_CHARS + 1),
                   "scorer_refs": []}),
        ] {
            assert!(req(bad.clone()).validate("u", Micros(1)).is_err(), "{bad}");
        }
        let q: QueuesQueryReq = serde_json::from_value(json!({"project_id": "e/p",
            "sort_by": [{"field": "name", "direction": "asc"}]}))
        .unwrap();
        let q = q.validate().unwrap();
        assert_eq!(
            q.sort,
            [(QueueSortField::Name, Direction::Asc), (QueueSortField::Id, Direction::Asc)]
        );
        let bad: QueuesQueryReq = serde_json::from_value(json!({"project_id": "e/p",
            "sort_by": [{"field": "scorer_refs", "direction": "asc"}]}))
        .unwrap();
        assert!(bad.validate().is_err());
    }
}
