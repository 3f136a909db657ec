//! A [`Store`] assembled from one implementation per resource. Tests use it to replace one
//! resource of a real store (to count or fail its calls) and keep the others: the replacement
//! implements that resource's trait only.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProjectId;
use heddle_proto::annotation_queues::{
    ItemsQuery, NewItem, NewQueue, Queue, QueueChanges, QueueItem, QueueStats, QueuesQuery,
};
use heddle_proto::calls::{CallPart, CallsQuery};
use heddle_proto::costs::CostRecord;
use heddle_proto::feedback::{FeedbackQuery, NewFeedback, StoredFeedback};
use heddle_proto::objects::{DeletedVersion, ObjSchema, ObjectsDelete, ObjectsQuery, VersionSel};
use heddle_proto::otlp::logs::{LogsQuery, OtelLog};
use heddle_proto::project_settings::{ProjectSetting, ProjectSettings};
use heddle_proto::threads::{Thread, ThreadsQuery};
use heddle_proto::time::Micros;

use crate::prelude::*;
use crate::{
    Added, CallStream, KeyInfo, KeyRecord, Labels, NewObject, NewTable, Progress, ProjectInfo,
    Purged, Result, StoredRow, TableSlice, VersionKey,
};

/// Each resource served by its own implementation.
#[derive(Clone)]
pub struct Composite {
    pub calls: Arc<dyn CallStore>,
    pub objects: Arc<dyn ObjectStore>,
    pub tags: Arc<dyn TagStore>,
    pub queues: Arc<dyn AnnotationQueueStore>,
    pub files: Arc<dyn FileStore>,
    pub tables: Arc<dyn TableStore>,
    pub feedback: Arc<dyn FeedbackStore>,
    pub costs: Arc<dyn CostStore>,
    pub threads: Arc<dyn ThreadStore>,
    pub projects: Arc<dyn ProjectStore>,
    pub project_settings: Arc<dyn ProjectSettingsStore>,
    pub keys: Arc<dyn KeyStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub otel_logs: Arc<dyn OtelLogStore>,
    pub health: Arc<dyn Health>,
}

impl Composite {
    /// Every resource served by `store`; replace fields to serve some by another.
    pub fn of<S: Store>(store: Arc<S>) -> Composite {
        Composite {
            calls: store.clone(),
            objects: store.clone(),
            tags: store.clone(),
            queues: store.clone(),
            files: store.clone(),
            tables: store.clone(),
            feedback: store.clone(),
            costs: store.clone(),
            threads: store.clone(),
            projects: store.clone(),
            project_settings: store.clone(),
            keys: store.clone(),
            blobs: store.clone(),
            otel_logs: store.clone(),
            health: store,
        }
    }
}

#[async_trait]
impl CallStore for Composite {
    async fn apply_call_parts(&self, parts: Vec<CallPart>) -> Result<()> {
        self.calls.apply_call_parts(parts).await
    }
    async fn apply_call_parts_once(&self, parts: Vec<CallPart>, token: &str) -> Result<()> {
        self.calls.apply_call_parts_once(parts, token).await
    }
    async fn set_call_display_name(&self, project: &ProjectId, id: &str, name: &str) -> Result<()> {
        self.calls.set_call_display_name(project, id, name).await
    }
    async fn delete_calls(&self, project: &ProjectId, ids: &[String]) -> Result<u64> {
        self.calls.delete_calls(project, ids).await
    }
    async fn query_calls(&self, q: CallsQuery) -> Result<CallStream> {
        self.calls.query_calls(q).await
    }
    async fn count_calls(&self, q: CallsQuery) -> Result<u64> {
        self.calls.count_calls(q).await
    }
}

#[async_trait]
impl ObjectStore for Composite {
    async fn create_object(&self, obj: NewObject) -> Result<()> {
        self.objects.create_object(obj).await
    }
    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema> {
        self.objects.read_object(project, object_id, version, metadata_only).await
    }
    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>> {
        self.objects.query_objects(q).await
    }
    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>> {
        self.objects.delete_objects(d).await
    }
}

#[async_trait]
impl TagStore for Composite {
    async fn add_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
        wb_user_id: &str,
    ) -> Result<()> {
        self.tags.add_tags(project, object_id, digest, tags, wb_user_id).await
    }
    async fn remove_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
    ) -> Result<()> {
        self.tags.remove_tags(project, object_id, digest, tags).await
    }
    async fn set_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        aliases: &[String],
        wb_user_id: &str,
    ) -> Result<()> {
        self.tags.set_aliases(project, object_id, digest, aliases, wb_user_id).await
    }
    async fn remove_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        aliases: &[String],
    ) -> Result<()> {
        self.tags.remove_aliases(project, object_id, aliases).await
    }
    async fn list_tags(&self, project: &ProjectId) -> Result<Vec<String>> {
        self.tags.list_tags(project).await
    }
    async fn list_aliases(&self, project: &ProjectId) -> Result<Vec<String>> {
        self.tags.list_aliases(project).await
    }
    async fn labels(
        &self,
        project: &ProjectId,
        versions: &[VersionKey],
    ) -> Result<HashMap<VersionKey, Labels>> {
        self.tags.labels(project, versions).await
    }
    async fn resolve_alias(
        &self,
        project: &ProjectId,
        object_id: &str,
        alias: &str,
    ) -> Result<Option<String>> {
        self.tags.resolve_alias(project, object_id, alias).await
    }
}

#[async_trait]
impl AnnotationQueueStore for Composite {
    async fn create_queue(&self, q: NewQueue) -> Result<()> {
        self.queues.create_queue(q).await
    }
    async fn read_queue(&self, project: &ProjectId, id: &str) -> Result<Option<Queue>> {
        self.queues.read_queue(project, id).await
    }
    async fn query_queues(&self, q: QueuesQuery) -> Result<Vec<Queue>> {
        self.queues.query_queues(q).await
    }
    async fn update_queue(
        &self,
        project: &ProjectId,
        id: &str,
        changes: QueueChanges,
        now: Micros,
    ) -> Result<Option<Queue>> {
        self.queues.update_queue(project, id, changes, now).await
    }
    async fn delete_queue(
        &self,
        project: &ProjectId,
        id: &str,
        now: Micros,
    ) -> Result<Option<Queue>> {
        self.queues.delete_queue(project, id, now).await
    }
    async fn add_items(
        &self,
        project: &ProjectId,
        queue_id: &str,
        items: Vec<NewItem>,
        display_fields: &[String],
        added_by: &str,
        now: Micros,
    ) -> Result<Added> {
        self.queues.add_items(project, queue_id, items, display_fields, added_by, now).await
    }
    async fn queue_items(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<QueueItem>> {
        self.queues.queue_items(project, queue_id).await
    }
    async fn queue_progress(&self, project: &ProjectId, queue_id: &str) -> Result<Vec<Progress>> {
        self.queues.queue_progress(project, queue_id).await
    }
    async fn queue_stats(
        &self,
        project: &ProjectId,
        queue_ids: &[String],
    ) -> Result<Vec<QueueStats>> {
        self.queues.queue_stats(project, queue_ids).await
    }
    async fn set_progress(
        &self,
        project: &ProjectId,
        queue_id: &str,
        item_id: &str,
        annotator: &str,
        state: &str,
        now: Micros,
    ) -> Result<()> {
        self.queues.set_progress(project, queue_id, item_id, annotator, state, now).await
    }
    async fn query_items(&self, q: ItemsQuery) -> Result<Vec<QueueItem>> {
        self.queues.query_items(q).await
    }
}

#[async_trait]
impl FileStore for Composite {
    async fn create_file(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        self.files.create_file(project, digest, content).await
    }
    async fn read_file(&self, project: &ProjectId, digest: &str) -> Result<Bytes> {
        self.files.read_file(project, digest).await
    }
    async fn files_size(&self, project: &ProjectId) -> Result<u64> {
        self.files.files_size(project).await
    }
}

#[async_trait]
impl TableStore for Composite {
    async fn create_table(&self, table: NewTable) -> Result<()> {
        self.tables.create_table(table).await
    }
    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>> {
        self.tables.table_slice(project, digest, offset, limit).await
    }
    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>> {
        self.tables.read_rows(project, digests, with_val).await
    }
}

#[async_trait]
impl FeedbackStore for Composite {
    async fn create_feedback(&self, items: Vec<NewFeedback>) -> Result<Vec<StoredFeedback>> {
        self.feedback.create_feedback(items).await
    }
    async fn query_feedback(&self, q: FeedbackQuery) -> Result<(Vec<StoredFeedback>, u64)> {
        self.feedback.query_feedback(q).await
    }
    async fn purge_feedback(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        self.feedback.purge_feedback(project, ids).await
    }
    async fn feedback_for_refs(
        &self,
        project: &ProjectId,
        refs: &[String],
    ) -> Result<Vec<StoredFeedback>> {
        self.feedback.feedback_for_refs(project, refs).await
    }
}

#[async_trait]
impl CostStore for Composite {
    async fn create_costs(&self, costs: Vec<CostRecord>) -> Result<()> {
        self.costs.create_costs(costs).await
    }
    async fn project_costs(&self, project: &ProjectId) -> Result<Vec<CostRecord>> {
        self.costs.project_costs(project).await
    }
    async fn purge_costs(&self, project: &ProjectId, ids: &[String]) -> Result<()> {
        self.costs.purge_costs(project, ids).await
    }
}

#[async_trait]
impl ThreadStore for Composite {
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>> {
        self.threads.query_threads(q).await
    }
}

#[async_trait]
impl ProjectStore for Composite {
    async fn storage_sizes(&self, project: &ProjectId) -> Result<crate::StorageSizes> {
        self.projects.storage_sizes(project).await
    }
    async fn list_projects(&self, entity: Option<&str>, limit: u64) -> Result<Vec<ProjectInfo>> {
        self.projects.list_projects(entity, limit).await
    }
}

#[async_trait]
impl ProjectSettingsStore for Composite {
    async fn project_settings(&self, project: &ProjectId) -> Result<ProjectSettings> {
        self.project_settings.project_settings(project).await
    }
    async fn set_project_setting(
        &self,
        project: &ProjectId,
        setting: ProjectSetting,
    ) -> Result<()> {
        self.project_settings.set_project_setting(project, setting).await
    }
    async fn retention_projects(&self) -> Result<Vec<(ProjectId, i64)>> {
        self.project_settings.retention_projects().await
    }
    async fn purge_expired(
        &self,
        project: &ProjectId,
        cutoff: Micros,
        limit: u64,
    ) -> Result<Purged> {
        self.project_settings.purge_expired(project, cutoff, limit).await
    }
}

#[async_trait]
impl KeyStore for Composite {
    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()> {
        self.keys.create_key(key_hash, entity).await
    }
    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        self.keys.lookup_key(key_hash).await
    }
    async fn has_admin_key(&self) -> Result<bool> {
        self.keys.has_admin_key().await
    }
    async fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        self.keys.list_keys().await
    }
    async fn revoke_key(&self, id: &str) -> Result<KeyInfo> {
        self.keys.revoke_key(id).await
    }
}

#[async_trait]
impl BlobStore for Composite {
    async fn put_blob(&self, project: &ProjectId, digest: &str, content: Bytes) -> Result<()> {
        self.blobs.put_blob(project, digest, content).await
    }
    async fn read_blob(&self, project: &ProjectId, digest: &str, size: u64) -> Result<Bytes> {
        self.blobs.read_blob(project, digest, size).await
    }
}

#[async_trait]
impl OtelLogStore for Composite {
    async fn put_otel_logs(&self, logs: Vec<OtelLog>) -> Result<()> {
        self.otel_logs.put_otel_logs(logs).await
    }
    async fn put_otel_logs_once(&self, logs: Vec<OtelLog>, token: &str) -> Result<()> {
        self.otel_logs.put_otel_logs_once(logs, token).await
    }
    async fn query_otel_logs(&self, q: LogsQuery) -> Result<Vec<OtelLog>> {
        self.otel_logs.query_otel_logs(q).await
    }
}

#[async_trait]
impl Health for Composite {
    async fn probe_write(&self) -> Result<()> {
        self.health.probe_write().await
    }
}
