//! Where the ingest endpoints put what they accepted (call parts, placeholder ops, OTLP log
//! records), and the embedded write path.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use heddle_proto::ProtoError;
use heddle_proto::calls::CallPart;
use heddle_proto::lazy_part::LazyPart;
use heddle_proto::otlp::logs::OtelLog;
use heddle_proto::otlp::op::OpWrites;
use heddle_store::{NewObject, Store};

use crate::SinkError;

/// Where the ingest endpoints put call parts, the placeholder ops OTLP spans need and OTLP log
/// records. Each
/// method returns only once its writes are durable: in the store (embedded mode) or
/// acknowledged by Kafka (distributed mode).
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), SinkError>;

    /// Where a caller on a blocking thread puts call parts as it makes them ([`Staged::push`]),
    /// for the work of writing them that needs no I/O to be done there and then, while each
    /// part is still in its core's cache (for Kafka: encoding it into its record). By default
    /// the parts are only collected.
    fn stager(&self) -> Staged {
        Staged::parts(Vec::new())
    }

    /// Writes what a [`Sink::stager`] took; returns once it is durable, as [`Sink::write`] does.
    async fn write_staged(&self, staged: Staged) -> Result<(), SinkError> {
        match staged.0 {
            Staging::Parts(parts) => self.write(parts).await,
            #[cfg(feature = "kafka")]
            Staging::Records(_) => {
                Err(SinkError::internal("writing staged records", "staged by another sink"))
            }
            #[cfg(feature = "kafka")]
            Staging::Failed(e) => Err(e),
        }
    }

    /// Stores the files, then the op objects (content-addressed: writing them again changes
    /// nothing).
    async fn write_ops(&self, ops: OpWrites) -> Result<(), SinkError>;

    /// Stores OTLP log records (idempotent: a record is stored once by its id).
    async fn write_logs(&self, logs: Vec<OtelLog>) -> Result<(), SinkError>;
}

/// Call parts on their way to a sink ([`Sink::stager`]).
pub struct Staged(pub(crate) Staging);

pub(crate) enum Staging {
    /// Collected as they are.
    Parts(Vec<CallPart>),
    /// Encoded into Kafka records.
    #[cfg(feature = "kafka")]
    Records(crate::plan::Planner),
    /// A part could not be encoded: the write fails with this.
    #[cfg(feature = "kafka")]
    Failed(SinkError),
}

impl Staged {
    pub(crate) fn parts(parts: Vec<CallPart>) -> Staged {
        Staged(Staging::Parts(parts))
    }

    pub fn push(&mut self, part: CallPart) {
        match &mut self.0 {
            Staging::Parts(parts) => parts.push(part),
            #[cfg(feature = "kafka")]
            Staging::Records(planner) => {
                if let Err(e) = planner.push(part) {
                    self.0 = Staging::Failed(e);
                }
            }
            #[cfg(feature = "kafka")]
            Staging::Failed(_) => {}
        }
    }

    /// [`Staged::push`] of a part whose members are not written yet: for Kafka, they are
    /// written straight into its record. An error is the part's own (a member nests too deep):
    /// nothing of it was staged.
    pub fn push_lazy(&mut self, part: &LazyPart) -> Result<(), ProtoError> {
        match &mut self.0 {
            Staging::Parts(parts) => parts.push(part.into_part()?),
            #[cfg(feature = "kafka")]
            Staging::Records(planner) => match planner.push_lazy(part) {
                Ok(()) => {}
                Err(crate::plan::Unplaced::Refused(e)) => return Err(e),
                Err(crate::plan::Unplaced::Failed(e)) => self.0 = Staging::Failed(e),
            },
            #[cfg(feature = "kafka")]
            Staging::Failed(_) => {}
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Staging::Parts(parts) => parts.is_empty(),
            #[cfg(feature = "kafka")]
            Staging::Records(planner) => planner.is_empty(),
            #[cfg(feature = "kafka")]
            Staging::Failed(_) => false,
        }
    }
}

/// The embedded write path: straight into the store.
pub struct StoreSink(pub Arc<dyn Store>);

#[async_trait]
impl Sink for StoreSink {
    async fn write(&self, parts: Vec<CallPart>) -> Result<(), SinkError> {
        Ok(self.0.apply_call_parts(parts).await?)
    }

    async fn write_ops(&self, ops: OpWrites) -> Result<(), SinkError> {
        Ok(apply_ops(&*self.0, &ops).await?)
    }

    async fn write_logs(&self, logs: Vec<OtelLog>) -> Result<(), SinkError> {
        Ok(self.0.put_otel_logs(logs).await?)
    }
}

/// Applies placeholder-op writes to a store: every file first, since an op names its file.
pub async fn apply_ops(store: &dyn Store, ops: &OpWrites) -> heddle_store::Result<()> {
    for f in &ops.files {
        store.create_file(&f.project, &f.digest, Bytes::from(f.content.clone())).await?;
    }
    for op in &ops.ops {
        store.create_object(new_op_object(op)).await?;
    }
    Ok(())
}

fn new_op_object(op: &heddle_proto::otlp::op::OpWrite) -> NewObject {
    NewObject {
        project: op.project.clone(),
        object_id: op.object_id.clone(),
        digest: op.digest.clone(),
        val: op.val.clone(),
        kind: "op",
        base_object_class: None,
        leaf_object_class: None,
        wb_user_id: op.wb_user_id.clone(),
    }
}
