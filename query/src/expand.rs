//! Serving `expand_columns` (docs/api/calls.md#count-calls, docs/api/calls.md#stream-calls; the
//! plan is `heddle_domain::expansion`).
//!
//! Three shapes, all reading calls from the store as a stream and resolving refs a page at a
//! time (one row read per page for dataset rows, objects and row lists cached per request):
//! - expansion only: SQL filters, orders and pages; pages of rows are expanded on the way out;
//! - a filter through an expand column: the candidates (SQL part of the filter, SQL order) are
//!   streamed, expanded, filtered here, and `offset`/`limit` applied here; the scan stops once
//!   `limit` rows went out;
//! - an order through an expand column: a first pass keeps only each match's sort key and id
//!   (at most [`MAX_SORTED_CALLS`] matches and [`MAX_SORT_KEY_BYTES`] of keys, else 400), sorts
//!   them, and a second pass reads the chosen page of calls by id.
//!
//! Memory is bounded by one page of rows plus, when sorting, the keys.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use heddle_api::ApiError;
use heddle_api::budget::{Admitted, MemoryBudget, VALUE_COST};
use heddle_domain::expansion::{
    CallValues, ExpandPlan, KeyPart, by_ids, compare_keys, eval, sort_key,
};
use heddle_proto::calls::{Call, CallsQuery};
use heddle_proto::limits::{MAX_MEMBER_DEPTH, json_depth, json_shape};
use heddle_proto::refs::{self, ObjectRef, Ref};
use heddle_store::{CallStream, Store};
use serde_json::Value;

use crate::refs::Walker;

/// Calls whose refs are resolved together.
const PAGE: usize = 500;
/// ... or fewer, when parsing their JSON members costs this much (see [`Expander::read_page`]).
const PAGE_COST: usize = 64 << 20;
/// Most bytes of copied values one slice of expanded calls may hold (see [`Expander`]).
const SLICE_COPY_BYTES: usize = 16 << 20;
/// Most calls an order through an expand column may sort (the keys stay in memory).
pub const MAX_SORTED_CALLS: usize = 100_000;
/// Most bytes of sort keys (strings) such an order may hold.
pub const MAX_SORT_KEY_BYTES: usize = 64 << 20;
/// Calls read by id at once in the second pass of a sort.
const FETCH_BY_ID: usize = 1000;

/// Expands pages of calls: replaces the ref at each expand column, shallow columns first.
///
/// Each row gets its own copy of what a ref resolved to, so rows are expanded a slice at a
/// time: as many as fit [`SLICE_COPY_BYTES`] of copies (a slice is halved until it fits), and
/// the caller serialises or drops a slice before asking for the next. Expansion is idempotent
/// (a replaced slot no longer holds a ref), so a slice that did not fit is simply retried.
pub(crate) struct Expander {
    walker: Walker,
    plan: Arc<ExpandPlan>,
    /// The current slice's copies are charged here, and released when the next is asked for.
    budget: MemoryBudget,
    admitted: Option<Admitted>,
    /// The parsed rows read and not yet used up are charged here.
    page_admitted: Option<Admitted>,
    page_cost: usize,
    /// Rows read but not yet expanded.
    pending: VecDeque<CallValues>,
    /// Rows per slice: halved when a slice's copies do not fit, doubled back after one that did.
    take: usize,
}

/// Why a slice could not be expanded.
enum SliceError {
    /// Its copies would exceed the budget: retry with fewer rows.
    Oversized,
    Api(ApiError),
}

impl From<ApiError> for SliceError {
    fn from(e: ApiError) -> Self {
        SliceError::Api(e)
    }
}

impl Expander {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        plan: Arc<ExpandPlan>,
        budget: MemoryBudget,
    ) -> Expander {
        Expander {
            walker: Walker::new(store),
            plan,
            budget,
            admitted: None,
            page_admitted: None,
            page_cost: 0,
            pending: VecDeque::new(),
            take: PAGE,
        }
    }

    /// Queues rows for [`Expander::next_slice`].
    fn push(&mut self, rows: Vec<CallValues>) {
        self.pending.extend(rows);
    }

    /// Reads the next page from `rows` when nothing is queued; false once both are empty.
    async fn fill(
        &mut self,
        rows: &mut CallStream,
        exhausted: &mut bool,
    ) -> Result<bool, ApiError> {
        if self.pending.is_empty() && !*exhausted {
            self.release_page();
            let (page, last) = self.read_page(rows, PAGE).await?;
            *exhausted = last;
            self.push(page);
        }
        Ok(!self.pending.is_empty())
    }

    /// Gives back the charge of the rows read so far: they are used up.
    fn release_page(&mut self) {
        self.page_admitted = None;
        self.page_cost = 0;
    }

    /// The next page of calls from the store, as parsed rows: at most `n` rows and
    /// [`PAGE_COST`] of parsing, charged to the memory budget before each row is parsed (a
    /// stored member parses into up to ~40× its text) and held until the page is used up. The
    /// flag says whether the store has no more rows.
    async fn read_page(
        &mut self,
        rows: &mut CallStream,
        n: usize,
    ) -> Result<(Vec<CallValues>, bool), ApiError> {
        let mut page = Vec::with_capacity(n.min(PAGE));
        let start = self.page_cost;
        while page.len() < n && self.page_cost - start < PAGE_COST {
            match rows.next().await {
                Some(call) => {
                    let call = call?;
                    self.page_cost +=
                        [Some(&call.inputs), Some(&call.attributes), call.output.as_ref()]
                            .into_iter()
                            .flatten()
                            .map(|raw| {
                                let shape = json_shape(raw.get().as_bytes(), usize::MAX);
                                raw.get().len() * 2 + shape.values * VALUE_COST
                            })
                            .sum::<usize>();
                    let held = self.page_admitted.take();
                    self.page_admitted = Some(self.budget.admit(self.page_cost, held).await?);
                    page.push(CallValues::new(call));
                }
                None => return Ok((page, true)),
            }
        }
        Ok((page, false))
    }

    /// The next queued rows, expanded; empty when nothing is queued.
    async fn next_slice(&mut self) -> Result<Vec<CallValues>, ApiError> {
        // The previous slice has been sent or dropped by now.
        self.admitted = None;
        loop {
            let n = self.take.min(self.pending.len());
            let mut slice: Vec<CallValues> = self.pending.drain(..n).collect();
            match self.expand(&mut slice).await {
                Ok(()) => {
                    self.take = (self.take * 2).min(PAGE);
                    return Ok(slice);
                }
                Err(SliceError::Oversized) if n > 1 => {
                    for row in slice.into_iter().rev() {
                        self.pending.push_front(row);
                    }
                    self.take = n / 2;
                }
                Err(SliceError::Oversized) => {
                    return Err(ApiError::TooLarge(format!(
                        "expanding one call would copy more than {SLICE_COPY_BYTES} bytes of \
                         referenced values: ask for fewer expand_columns"
                    )));
                }
                Err(SliceError::Api(e)) => return Err(e),
            }
        }
    }

    async fn expand(&mut self, rows: &mut [CallValues]) -> Result<(), SliceError> {
        self.walker.trim();
        let plan = self.plan.clone();
        let mut copied = 0usize;
        let mut depth_start = 0;
        while depth_start < plan.columns.len() {
            let depth = plan.columns[depth_start].len();
            let end = plan.columns[depth_start..]
                .iter()
                .position(|c| c.len() != depth)
                .map_or(plan.columns.len(), |n| depth_start + n);
            let group = &plan.columns[depth_start..end];
            depth_start = end;

            let mut targets: Vec<(usize, usize, String)> = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                for (j, col) in group.iter().enumerate() {
                    if let Some(uri) = row.ref_at(col) {
                        targets.push((i, j, uri.to_owned()));
                    }
                }
            }
            if targets.is_empty() {
                continue;
            }
            // Each distinct ref once; only object and op refs of the call's own project.
            let mut unique: HashMap<String, Option<ObjectRef>> = HashMap::new();
            for (_, _, uri) in &targets {
                unique.entry(uri.clone()).or_insert_with(|| match refs::parse(uri) {
                    Ok(Ref::Object(o)) if o.project == plan.project => Some(o),
                    _ => None,
                });
            }
            let roots: Vec<&ObjectRef> = unique.values().flatten().collect();
            self.walker.prefetch_rows(&plan.project, &roots).await?;
            // Resolved once per page; each row gets its own copy, so the copies are counted
            // against MAX_RESOLVED_BYTES (a large object expanded into every row of a page).
            let mut resolved: HashMap<String, (Arc<Value>, usize)> = HashMap::new();
            for (uri, root) in unique {
                if let Some(root) = root
                    && let Some(val) = self.walker.resolve(root).await?
                    && !val.is_null()
                {
                    let size = json_len(&val);
                    resolved.insert(uri, (val, size));
                }
            }
            // Counted before anything of this group is replaced, so a slice that does not fit
            // is left as it was for the retry.
            copied += targets
                .iter()
                .filter_map(|(_, _, uri)| resolved.get(uri))
                .map(|r| r.1)
                .sum::<usize>();
            if copied > SLICE_COPY_BYTES {
                return Err(SliceError::Oversized);
            }
            // The copies, and the text they become when the slice is sent.
            let held = self.admitted.take();
            self.admitted = Some(self.budget.admit(copied * 2, held).await?);
            for (i, j, uri) in targets {
                if let Some((val, _)) = resolved.get(&uri) {
                    let col = &group[j];
                    // The slot is col.len() - 1 levels below its member; the value nests below.
                    if col.len() - 1 + json_depth(val, MAX_MEMBER_DEPTH) > MAX_MEMBER_DEPTH {
                        return Err(SliceError::Api(ApiError::bad_request(format!(
                            "expanding {} would nest the call deeper than {MAX_MEMBER_DEPTH} \
                             levels",
                            col.join(".")
                        ))));
                    }
                    rows[i].replace(col, Value::clone(val));
                }
            }
        }
        Ok(())
    }

    /// Whether a (expanded) call passes the conditions SQL could not check.
    fn matches(&self, row: &CallValues) -> bool {
        self.plan.residual.as_ref().is_none_or(|e| eval(e, row) == Some(true))
    }
}

/// The length of a value as JSON text, without building the text.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, v).expect("JSON values serialise");
    count.0
}

fn jsonl(calls: impl IntoIterator<Item = Call>) -> Result<Bytes, ApiError> {
    let mut buf = Vec::new();
    for call in calls {
        serde_json::to_writer(&mut buf, &call)
            .map_err(|e| ApiError::Internal(format!("serialising a call: {e}")))?;
        buf.push(b'\n');
    }
    Ok(Bytes::from(buf))
}

/// A JSONL body as chunks; the first chunk is produced before the response starts so that
/// errors still become a status (docs/api/README.md#streaming-responses-jsonl).
pub(crate) type Chunks = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, ApiError>> + Send>>;

struct Scan {
    rows: CallStream,
    exhausted: bool,
    expander: Expander,
    /// Rows still to skip and to send, when paging happens here.
    skip: u64,
    left: Option<u64>,
    done: bool,
}

/// Expansion only, or a filter through an expand column (no in-memory order).
pub(crate) async fn stream(
    store: Arc<dyn Store>,
    budget: MemoryBudget,
    candidates: CallsQuery,
    plan: ExpandPlan,
) -> Result<Chunks, ApiError> {
    let page_here = plan.in_memory();
    let (skip, left) = if page_here { (plan.offset, plan.limit) } else { (0, None) };
    let plan = Arc::new(plan);
    let rows = store.query_calls(candidates).await?;
    let scan = Scan {
        rows,
        exhausted: false,
        expander: Expander::new(store, plan.clone(), budget),
        skip,
        left,
        done: left == Some(0),
    };
    let chunks = futures::stream::unfold(scan, move |mut s| {
        let plan = plan.clone();
        async move {
            if s.done {
                return None;
            }
            let out = async {
                if !s.expander.fill(&mut s.rows, &mut s.exhausted).await? {
                    s.done = true;
                    return Ok(Bytes::new());
                }
                let slice = s.expander.next_slice().await?;
                let mut keep = Vec::with_capacity(slice.len());
                for row in slice {
                    if !s.expander.matches(&row) {
                        continue;
                    }
                    if s.skip > 0 {
                        s.skip -= 1;
                        continue;
                    }
                    if let Some(left) = &mut s.left {
                        *left -= 1;
                        if *left == 0 {
                            s.done = true;
                        }
                    }
                    keep.push(row.into_call(plan.return_values));
                    if s.done && s.left == Some(0) {
                        break;
                    }
                }
                jsonl(keep)
            }
            .await;
            if out.is_err() {
                s.done = true;
            }
            Some((out, s))
        }
    });
    first_ready(Box::pin(chunks)).await
}

/// Pulls chunks until one is non-empty (or the end), so the response starts with data or an
/// error status; returns the stream with that chunk in front.
async fn first_ready(mut chunks: Chunks) -> Result<Chunks, ApiError> {
    loop {
        match chunks.next().await {
            None => return Ok(Box::pin(futures::stream::empty())),
            Some(Err(e)) => return Err(e),
            Some(Ok(b)) if b.is_empty() => continue,
            Some(Ok(b)) => return Ok(Box::pin(futures::stream::iter([Ok(b)]).chain(chunks))),
        }
    }
}

/// An order through an expand column: sort the matches' keys, then read the page by id.
pub(crate) async fn sorted(
    store: Arc<dyn Store>,
    budget: MemoryBudget,
    candidates: CallsQuery,
    plan: ExpandPlan,
) -> Result<Chunks, ApiError> {
    let plan = Arc::new(plan);
    let sort = plan.sort.clone().expect("sorted() is for plans that sort in memory");
    let mut expander = Expander::new(store.clone(), plan.clone(), budget);
    let mut rows = store.query_calls(candidates).await?;
    let mut keyed: Vec<(Vec<KeyPart>, String)> = Vec::new();
    let mut key_bytes = 0usize;
    let mut exhausted = false;
    while expander.fill(&mut rows, &mut exhausted).await? {
        let slice = expander.next_slice().await?;
        for row in slice.iter().filter(|r| expander.matches(r)) {
            let key = sort_key(&sort, row);
            key_bytes += key.iter().map(KeyPart::heap_size).sum::<usize>() + row.call.id.len();
            keyed.push((key, row.call.id.clone()));
            if keyed.len() > MAX_SORTED_CALLS || key_bytes > MAX_SORT_KEY_BYTES {
                return Err(ApiError::bad_request(format!(
                    "sorting through expanded refs is limited to {MAX_SORTED_CALLS} matching \
                     calls ({} MiB of sort keys); narrow the query with filters on plain fields",
                    MAX_SORT_KEY_BYTES >> 20
                )));
            }
        }
    }
    drop(rows);
    keyed.sort_by(|a, b| compare_keys(&sort, &a.0, &b.0));
    let start = usize::try_from(plan.offset).unwrap_or(usize::MAX).min(keyed.len());
    let end = plan
        .limit
        .map_or(keyed.len(), |l| start.saturating_add(usize::try_from(l).unwrap_or(usize::MAX)))
        .min(keyed.len());
    let ids: Vec<String> = keyed.drain(start..end).map(|(_, id)| id).collect();
    drop(keyed);

    let batches: std::vec::IntoIter<Vec<String>> =
        ids.chunks(FETCH_BY_ID).map(<[String]>::to_vec).collect::<Vec<_>>().into_iter();
    let chunks = futures::stream::unfold((batches, expander), move |(mut batches, mut ex)| {
        let store = store.clone();
        let plan = plan.clone();
        async move {
            let out = async {
                if ex.pending.is_empty() {
                    ex.release_page();
                    let Some(ids) = batches.next() else { return Ok(None) };
                    let q = by_ids(&plan.project, ids.clone(), plan.user_columns);
                    let mut rows = store.query_calls(q).await?;
                    let mut by_id: HashMap<String, CallValues> = HashMap::new();
                    loop {
                        let (page, last) = ex.read_page(&mut rows, FETCH_BY_ID).await?;
                        by_id.extend(page.into_iter().map(|r| (r.call.id.clone(), r)));
                        if last {
                            break;
                        }
                    }
                    // In sorted order; a call deleted since the first pass is left out.
                    ex.push(ids.iter().filter_map(|id| by_id.remove(id)).collect());
                }
                let slice = if plan.return_values {
                    ex.next_slice().await?
                } else {
                    ex.pending.drain(..).collect()
                };
                jsonl(slice.into_iter().map(|r| r.into_call(plan.return_values))).map(Some)
            }
            .await
            .transpose()?;
            if out.is_err() {
                batches = Vec::new().into_iter();
                ex.pending.clear();
            }
            Some((out, (batches, ex)))
        }
    });
    first_ready(Box::pin(chunks)).await
}

/// `query_stats` with a filter through an expand column: counts the matches, up to `limit`.
pub(crate) async fn count(
    store: Arc<dyn Store>,
    budget: MemoryBudget,
    candidates: CallsQuery,
    plan: ExpandPlan,
) -> Result<u64, ApiError> {
    let limit = plan.limit;
    let mut expander = Expander::new(store.clone(), Arc::new(plan), budget);
    let mut rows = store.query_calls(candidates).await?;
    let mut n = 0u64;
    let mut exhausted = false;
    while limit.is_none_or(|l| n < l) && expander.fill(&mut rows, &mut exhausted).await? {
        for row in expander.next_slice().await? {
            if expander.matches(&row) {
                n += 1;
                if limit.is_some_and(|l| n >= l) {
                    return Ok(n);
                }
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use bytes::Bytes;
    use heddle_domain::expansion::Planned;
    use heddle_proto::ProjectId;
    use heddle_proto::calls::{CallPart, CallsQueryReq, StartedCall};
    use heddle_proto::digest::{object_digest, row_digest, table_digest};
    use heddle_proto::objects::{
        DeletedVersion, ObjSchema, ObjectsDelete, ObjectsQuery, VersionSel,
    };
    use heddle_proto::tables::Row;
    use heddle_store::prelude::*;
    use heddle_store::sqlite::{SqliteOptions, SqliteStore};
    use heddle_store::{Composite, NewObject, NewTable, Result, StoredRow, TableSlice};
    use serde_json::json;

    use super::*;

    fn budget() -> MemoryBudget {
        MemoryBudget::new(64 << 20)
    }

    /// The SQLite store's calls, objects and tables, counting the reads ref resolution makes.
    struct Counting {
        inner: Arc<SqliteStore>,
        reads: Mutex<HashMap<&'static str, usize>>,
    }

    impl Counting {
        fn count(&self, what: &'static str) {
            *self.reads.lock().unwrap().entry(what).or_default() += 1;
        }
        fn reads(&self, what: &str) -> usize {
            self.reads.lock().unwrap().get(what).copied().unwrap_or(0)
        }
        /// The whole store, with calls, objects and tables through this counter.
        fn store(self: &Arc<Self>) -> Arc<dyn Store> {
            Arc::new(Composite {
                calls: self.clone(),
                objects: self.clone(),
                tables: self.clone(),
                ..Composite::of(self.inner.clone())
            })
        }
    }

    #[async_trait]
    impl CallStore for Counting {
        async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()> {
            self.inner.apply_call_parts(parts).await
        }
        async fn set_call_display_name(&self, p: &ProjectId, id: &str, n: &str) -> Result<()> {
            self.inner.set_call_display_name(p, id, n).await
        }
        async fn delete_calls(&self, p: &ProjectId, ids: &[String]) -> Result<u64> {
            self.inner.delete_calls(p, ids).await
        }
        async fn query_calls(&self, q: CallsQuery) -> Result<CallStream> {
            self.count("query_calls");
            self.inner.query_calls(q).await
        }
        async fn count_calls(&self, q: CallsQuery) -> Result<u64> {
            self.inner.count_calls(q).await
        }
    }

    #[async_trait]
    impl ObjectStore for Counting {
        async fn create_object(&self, o: NewObject) -> Result<()> {
            self.inner.create_object(o).await
        }
        async fn read_object(
            &self,
            p: &ProjectId,
            id: &str,
            v: &VersionSel,
            m: bool,
        ) -> Result<ObjSchema> {
            self.count("read_object");
            self.inner.read_object(p, id, v, m).await
        }
        async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>> {
            self.inner.query_objects(q).await
        }
        async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>> {
            self.inner.delete_objects(d).await
        }
    }

    #[async_trait]
    impl TableStore for Counting {
        async fn create_table(&self, t: NewTable) -> Result<()> {
            self.inner.create_table(t).await
        }
        async fn table_slice(
            &self,
            p: &ProjectId,
            d: &str,
            o: u64,
            l: Option<u64>,
        ) -> Result<Option<TableSlice>> {
            self.count("table_slice");
            self.inner.table_slice(p, d, o, l).await
        }
        async fn read_rows(
            &self,
            p: &ProjectId,
            d: &[String],
            v: bool,
        ) -> Result<HashMap<String, StoredRow>> {
            self.count("read_rows");
            self.inner.read_rows(p, d, v).await
        }
    }

    async fn object(store: &Arc<dyn Store>, p: &ProjectId, name: &str, val: Value) -> String {
        let digest = object_digest(&val);
        store
            .create_object(NewObject {
                project: p.clone(),
                object_id: name.to_owned(),
                digest: digest.clone(),
                val: val.to_string(),
                kind: "object",
                base_object_class: None,
                leaf_object_class: None,
                wb_user_id: None,
            })
            .await
            .unwrap();
        format!("weave:///{p}/object/{name}:{digest}")
    }

    fn planned(body: Value) -> (CallsQuery, ExpandPlan) {
        match heddle_domain::expansion::plan(serde_json::from_value::<CallsQueryReq>(body).unwrap())
            .unwrap()
        {
            Planned::Expand { candidates, plan } => (candidates, *plan),
            Planned::Sql(q) => panic!("not an expand plan: {q:?}"),
        }
    }

    async fn lines(chunks: Chunks) -> Vec<Value> {
        let bytes: Vec<Bytes> = chunks.map(|c| c.unwrap()).collect().await;
        bytes
            .iter()
            .flat_map(|b| b.split(|c| *c == b'\n').filter(|l| !l.is_empty()))
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    /// 1,200 calls over 40 dataset rows and one model: rows are read once per page (not per
    /// call), the dataset, the model and the row list once per request.
    #[tokio::test(flavor = "multi_thread")]
    async fn resolution_is_batched_per_page_and_cached_per_request() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let counting = Arc::new(Counting { inner: Arc::new(inner), reads: Mutex::default() });
        let store = counting.store();
        let p = ProjectId::parse("e/p").unwrap();
        let vals: Vec<Value> = (0..40).map(|i| json!({"i": i, "label": format!("l{i}")})).collect();
        let rows: Vec<Row> =
            vals.iter().map(|v| Row { digest: row_digest(v), val: v.to_string() }).collect();
        let digests: Vec<String> = rows.iter().map(|r| r.digest.clone()).collect();
        let table = table_digest(&digests);
        store
            .create_table(NewTable {
                project: p.clone(),
                digest: table.clone(),
                row_digests: digests.clone(),
                rows,
            })
            .await
            .unwrap();
        let ds =
            object(&store, &p, "ds", json!({"rows": format!("weave:///{p}/table/{table}")})).await;
        let model = object(&store, &p, "model", json!({"name": "m"})).await;
        let n = 1200;
        let parts = (0..n)
            .map(|i| {
                let start: StartedCall = serde_json::from_value(json!({
                    "project_id": "e/p", "id": format!("c{i:04}"), "op_name": "f",
                    "started_at": format!("2026-01-01T00:00:{:02}.{:06}Z", i / 1000, i % 1000),
                    "inputs": {"example": format!("{ds}/attr/rows/id/{}", digests[i % 40]),
                               "model": model},
                }))
                .unwrap();
                start.into_part(None).unwrap()
            })
            .collect();
        store.apply_call_parts(parts).await.unwrap();

        let body =
            json!({"project_id": "e/p", "expand_columns": ["inputs.example", "inputs.model"]});
        let (q, plan) = planned(body);
        let out = lines(stream(store.clone(), budget(), q, plan).await.unwrap()).await;
        assert_eq!(out.len(), n);
        for (i, call) in out.iter().enumerate() {
            let mut want = vals[i % 40].clone();
            want["_ref"] = json!(format!("{ds}/attr/rows/id/{}", digests[i % 40]));
            assert_eq!(call["inputs"]["example"], want, "{i}");
            assert_eq!(call["inputs"]["model"], json!({"name": "m", "_ref": model}));
        }
        // Rows are prefetched in one read per page, and later pages (n / PAGE = 3 of them) find
        // them all cached: one read in all instead of one per call.
        assert!(n > 2 * PAGE);
        assert_eq!(counting.reads("read_rows"), 1, "{:?}", counting.reads);
        assert_eq!(counting.reads("table_slice"), 1, "{:?}", counting.reads);
        assert_eq!(counting.reads("read_object"), 2, "{:?}", counting.reads);

        // An order through the expanded rows: the same reads, plus the pages by id.
        counting.reads.lock().unwrap().clear();
        let body = json!({"project_id": "e/p", "expand_columns": ["inputs.example"],
                          "sort_by": [{"field": "inputs.example.i", "direction": "desc"}],
                          "limit": 5, "offset": 1});
        let (q, plan) = planned(body);
        let out = lines(sorted(store.clone(), budget(), q, plan).await.unwrap()).await;
        // i = 39 belongs to calls 39, 79, ... (30 of them); skip the first.
        let want: Vec<String> = (1..6).map(|k| format!("c{:04}", 39 + 40 * k)).collect();
        assert_eq!(out.iter().map(|c| c["id"].as_str().unwrap()).collect::<Vec<_>>(), want);
        assert_eq!(out[0]["inputs"]["example"]["i"], 39);
        assert_eq!(counting.reads("query_calls"), 2, "{:?}", counting.reads);
        assert_eq!(counting.reads("read_rows"), 1, "{:?}", counting.reads);

        // Counting through the expanded rows.
        let body = json!({"project_id": "e/p", "expand_columns": ["inputs.example"],
                          "query": {"$expr": {"$eq": [{"$getField": "inputs.example.label"},
                                                      {"$literal": "l7"}]}}});
        let (q, plan) = planned(body.clone());
        assert_eq!(count(store.clone(), budget(), q, plan).await.unwrap(), 30);
        let mut capped = body;
        capped["limit"] = json!(4);
        let (q, plan) = planned(capped);
        assert_eq!(count(store.clone(), budget(), q, plan).await.unwrap(), 4);
    }
}
