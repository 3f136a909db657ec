//! `/refs/read_batch` (docs/api/refs.md#read-a-batch-of-refs): reads object and op refs and walks
//! their extras.
//!
//! As in the reference server: more than 1000 refs, malformed refs and refs that are not object
//! or op refs (bare tables, calls) fail the whole request with 400; anything that does not
//! resolve (unknown or deleted object, missing key, index out of range, row not in the table)
//! is `null` in its slot. Tenancy: a ref into a project the key may not use is `null` — the
//! same answer as a missing object, so nothing leaks about other entities — and a walk never
//! follows an embedded ref out of the project it started in (the reference server's rule too).

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use heddle_api::budget::{Admitted, MemoryBudget, UNCHARGED_BYTES};
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::ProjectId;
use heddle_proto::limits::MAX_RESOLVED_BYTES;
use heddle_proto::objects::VersionSel;
use heddle_proto::refs::{self, Edge, MAX_REFS_PER_BATCH, ObjectRef, Ref, RefsReadBatchReq};
use heddle_store::{Store, StoreError};

use crate::objects::read_version;
use serde_json::Value;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/refs/read_batch", post(read_batch))
}

/// Embedded refs one walk may follow: a cycle of refs (impossible with content digests, but
/// `latest` can point anywhere) must not loop.
const MAX_HOPS: usize = 64;

async fn read_batch(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<RefsReadBatchReq>,
) -> Result<Response, ApiError> {
    if req.refs.len() > MAX_REFS_PER_BATCH {
        return Err(ApiError::bad_request(format!(
            "too many refs: {} (at most {MAX_REFS_PER_BATCH} per request)",
            req.refs.len()
        )));
    }
    let roots = req
        .refs
        .iter()
        .map(|uri| match refs::parse(uri)? {
            Ref::Object(o) => Ok(o),
            Ref::Table(_) => Err(ApiError::bad_request(format!(
                "{uri}: table refs cannot be read directly; read a row through an object ref"
            ))),
            Ref::Other { kind, .. } => {
                Err(ApiError::bad_request(format!("{uri}: {kind} refs cannot be read")))
            }
        })
        .collect::<Result<Vec<ObjectRef>, ApiError>>()?;
    let mut walker = Walker::new(state.store.clone());
    let mut answer = Answer::new(state.memory_budget.clone());
    // Each distinct ref is resolved and written once; its slots share that text.
    let mut seen: HashMap<&str, Bytes> = HashMap::new();
    for (root, uri) in roots.into_iter().zip(&req.refs) {
        let text = match seen.get(uri.as_str()) {
            Some(text) => text.clone(),
            None => {
                let val = if who.may_use_entity(root.project.entity()) {
                    walker.resolve(root).await?
                } else {
                    None
                };
                let text = answer.write(val.as_deref().unwrap_or(&Value::Null)).await?;
                seen.insert(uri, text.clone());
                text
            }
        };
        answer.push(text)?;
        walker.trim();
    }
    Ok(answer.into_response())
}

/// The answer `{"vals":[...]}`, as the JSON text of each distinct value and the slots that
/// name it. A thousand refs to one large object hold one copy of its text, and the answer's
/// length is known before any of it is sent: past [`MAX_RESOLVED_BYTES`] it is a 413, found
/// when the slot that crosses the bound is added, not after writing that much. The distinct
/// texts are charged to the memory budget as they are made, until the answer has been sent.
struct Answer {
    slots: Vec<Bytes>,
    /// The answer's length so far, brackets and commas included.
    len: usize,
    /// The bytes of the distinct texts.
    held: usize,
    budget: MemoryBudget,
    admitted: Option<Admitted>,
    charged: usize,
}

/// The answer is charged to the budget this much ahead of its distinct texts.
const CHARGE_STEP: usize = 4 << 20;
/// Texts up to this size are copied into the answer's chunks; larger ones are shared.
const SMALL_TEXT: usize = 1024;
const HEAD: &[u8] = b"{\"vals\":[";
const TAIL: &[u8] = b"]}";

impl Answer {
    fn new(budget: MemoryBudget) -> Answer {
        let len = HEAD.len() + TAIL.len();
        Answer { slots: Vec::new(), len, held: 0, budget, admitted: None, charged: 0 }
    }

    /// The JSON text of a value not seen before, charged once it is more than a small answer.
    async fn write(&mut self, v: &Value) -> Result<Bytes, ApiError> {
        let mut text = Vec::new();
        let room = MAX_RESOLVED_BYTES.saturating_sub(self.len);
        let mut limited = Limited { inner: &mut text, limit: room };
        match serde_json::to_writer(&mut limited, v) {
            Err(e) if e.is_io() => return Err(too_large()),
            Err(e) => return Err(ApiError::Internal(format!("serialising a resolved value: {e}"))),
            Ok(()) => {}
        }
        self.held += text.len();
        if self.held > UNCHARGED_BYTES.max(self.charged) {
            self.charged = self.held + CHARGE_STEP;
            self.admitted = Some(self.budget.admit(self.charged, self.admitted.take()).await?);
        }
        Ok(Bytes::from(text))
    }

    /// Adds the next slot.
    fn push(&mut self, text: Bytes) -> Result<(), ApiError> {
        self.len += text.len() + usize::from(!self.slots.is_empty());
        if self.len > MAX_RESOLVED_BYTES {
            return Err(too_large());
        }
        self.slots.push(text);
        Ok(())
    }

    /// The answer as a body of chunks, holding its share of the budget until it is sent. Texts
    /// of up to [`SMALL_TEXT`] bytes are copied into the chunk being filled (a thousand small
    /// values are then a few chunks, not two thousand); larger ones go out as they are.
    fn into_response(self) -> Response {
        let len = self.len;
        let admitted = self.admitted;
        let mut chunks = Vec::new();
        let mut filling = BytesMut::from(HEAD);
        for (i, text) in self.slots.into_iter().enumerate() {
            if i > 0 {
                filling.extend_from_slice(b",");
            }
            if text.len() <= SMALL_TEXT {
                filling.extend_from_slice(&text);
            } else {
                chunks.push(filling.split().freeze());
                chunks.push(text);
            }
        }
        filling.extend_from_slice(TAIL);
        chunks.push(filling.freeze());
        let body = Body::from_stream(futures::stream::iter(chunks).map(move |chunk| {
            let _held = &admitted;
            Ok::<_, Infallible>(chunk)
        }));
        ([(CONTENT_TYPE, "application/json")], [(CONTENT_LENGTH, len)], body).into_response()
    }
}

fn too_large() -> ApiError {
    ApiError::TooLarge(format!(
        "the resolved values are larger than {MAX_RESOLVED_BYTES} bytes: read fewer refs per \
         request"
    ))
}

/// A writer that fails once its buffer would exceed `limit`.
struct Limited<'a> {
    inner: &'a mut Vec<u8>,
    limit: usize,
}

impl std::io::Write for Limited<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.inner.len() + data.len() > self.limit {
            return Err(std::io::Error::other("answer too large"));
        }
        self.inner.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Cache bounds of one request's [`Walker`]: past these it forgets what it read (a long
/// `expand_columns` scan must not grow without bound). Tables hold their whole row-digest list.
const MAX_CACHED_OBJECTS: usize = 10_000;
const MAX_CACHED_TABLES: usize = 64;
const MAX_CACHED_ROWS: usize = 50_000;

/// Resolves refs against the store, remembering what one request has read already (a batch of
/// dataset row refs reads the dataset and its row list once).
pub(crate) struct Walker {
    store: Arc<dyn Store>,
    objects: HashMap<(ProjectId, String, String), Option<Arc<Value>>>,
    tables: HashMap<(ProjectId, String), Option<HashSet<String>>>,
    rows: HashMap<(ProjectId, String), Option<Arc<Value>>>,
}

impl Walker {
    pub(crate) fn new(store: Arc<dyn Store>) -> Walker {
        Walker { store, objects: HashMap::new(), tables: HashMap::new(), rows: HashMap::new() }
    }

    /// Forgets cached reads beyond the bounds above.
    pub(crate) fn trim(&mut self) {
        if self.objects.len() > MAX_CACHED_OBJECTS {
            self.objects.clear();
        }
        if self.tables.len() > MAX_CACHED_TABLES {
            self.tables.clear();
        }
        if self.rows.len() > MAX_CACHED_ROWS {
            self.rows.clear();
        }
    }

    /// Reads the table rows that `roots` name by `id` edges, all in one store read, so
    /// resolving a page of dataset row refs does not read row by row. Rows of other projects
    /// are never read.
    pub(crate) async fn prefetch_rows(
        &mut self,
        project: &ProjectId,
        roots: &[&ObjectRef],
    ) -> Result<(), ApiError> {
        let mut wanted: Vec<String> = roots
            .iter()
            .filter(|r| r.project == *project)
            .flat_map(|r| r.extra.iter())
            .filter_map(|e| match e {
                Edge::Id(row) if !self.rows.contains_key(&(project.clone(), row.clone())) => {
                    Some(row.clone())
                }
                _ => None,
            })
            .collect();
        wanted.sort();
        wanted.dedup();
        if wanted.is_empty() {
            return Ok(());
        }
        let mut found = self.store.read_rows(project, &wanted, true).await?;
        for row in wanted {
            let val = match found.remove(&row).and_then(|r| r.val) {
                Some(raw) => Some(parse_row(&row, raw.get())?),
                None => None,
            };
            self.rows.insert((project.clone(), row), val);
        }
        Ok(())
    }

    /// The value `root` points at, or `None` when it does not resolve. A whole object is
    /// shared with the cache, not copied; a part of one is copied once.
    pub(crate) async fn resolve(
        &mut self,
        root: ObjectRef,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let scope = root.project.clone();
        let Some(mut base) = self.object(&scope, &root.name, &root.version).await? else {
            return Ok(None);
        };
        // Where the walk is: `path` below `base`.
        let mut path: Vec<Edge> = Vec::new();
        let mut extra: VecDeque<Edge> = root.extra.into();
        let mut hops = 0;
        while let Some(edge) = extra.pop_front() {
            let Some(here) = walk(&base, &path) else { return Ok(None) };
            // An embedded ref with extras still to walk: continue inside what it points at.
            if let Value::String(s) = here
                && refs::is_ref(s)
            {
                hops += 1;
                let Ok(inner) = refs::parse(s) else { return Ok(None) };
                if hops > MAX_HOPS || *inner.project() != scope {
                    return Ok(None);
                }
                match inner {
                    Ref::Object(o) => {
                        let Some(v) = self.object(&scope, &o.name, &o.version).await? else {
                            return Ok(None);
                        };
                        base = v;
                        path.clear();
                        extra.push_front(edge);
                        for e in o.extra.into_iter().rev() {
                            extra.push_front(e);
                        }
                    }
                    Ref::Table(t) => {
                        let Edge::Id(row) = edge else { return Ok(None) };
                        let Some(v) = self.row(&scope, &t.digest, &row).await? else {
                            return Ok(None);
                        };
                        base = v;
                        path.clear();
                    }
                    Ref::Other { .. } => return Ok(None),
                }
                continue;
            }
            path.push(edge);
        }
        if path.is_empty() {
            return Ok(Some(base));
        }
        Ok(walk(&base, &path).map(|v| Arc::new(v.clone())))
    }

    /// An object version's value; `None` when unknown or deleted.
    async fn object(
        &mut self,
        project: &ProjectId,
        name: &str,
        version: &VersionSel,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let key = (project.clone(), name.to_owned(), format!("{version:?}"));
        if let Some(v) = self.objects.get(&key) {
            return Ok(v.clone());
        }
        let val = match read_version(&*self.store, project, name, version, false).await {
            Ok(obj) => match obj.val {
                Some(raw) => Some(Arc::new(serde_json::from_str(raw.get()).map_err(|e| {
                    ApiError::Internal(format!("stored value of {name} is not JSON: {e}"))
                })?)),
                None => Some(Arc::new(Value::Null)),
            },
            Err(StoreError::NotFound(_) | StoreError::Deleted { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        self.objects.insert(key, val.clone());
        Ok(val)
    }

    /// Row `row` of table `table`; `None` unless the table exists and holds that row.
    async fn row(
        &mut self,
        project: &ProjectId,
        table: &str,
        row: &str,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let key = (project.clone(), table.to_owned());
        if !self.tables.contains_key(&key) {
            let list = self.store.table_slice(project, table, 0, None).await?;
            self.tables.insert(key.clone(), list.map(|l| l.row_digests.into_iter().collect()));
        }
        if !self.tables[&key].as_ref().is_some_and(|rows| rows.contains(row)) {
            return Ok(None);
        }
        let key = (project.clone(), row.to_owned());
        if let Some(v) = self.rows.get(&key) {
            return Ok(v.clone());
        }
        let mut found = self.store.read_rows(project, &[row.to_owned()], true).await?;
        let val = match found.remove(row).and_then(|r| r.val) {
            Some(raw) => Some(parse_row(row, raw.get())?),
            None => None,
        };
        self.rows.insert(key, val.clone());
        Ok(val)
    }
}

fn parse_row(digest: &str, raw: &str) -> Result<Arc<Value>, ApiError> {
    serde_json::from_str(raw)
        .map(Arc::new)
        .map_err(|e| ApiError::Internal(format!("stored row {digest} is not JSON: {e}")))
}

/// The value at `path` below `base` (dict keys and list indexes only).
fn walk<'a>(base: &'a Value, path: &[Edge]) -> Option<&'a Value> {
    path.iter().try_fold(base, |v, edge| match (edge, v) {
        (Edge::Key(k), Value::Object(m)) => m.get(k),
        (Edge::Index(i), Value::Array(a)) => usize::try_from(*i).ok().and_then(|i| a.get(i)),
        _ => None,
    })
}
