//! Producing a record without librdkafka copying it (docs/benchmarks.md, "Records lent to
//! librdkafka").
//!
//! rust-rdkafka's producers always pass `RD_KAFKA_MSG_F_COPY`: librdkafka copies each payload
//! into a buffer of its own before queueing it. A record is up to `max_record_bytes` of
//! encoded calls, so that copy was a twentieth of the ingest role's CPU. Here the record is
//! *lent* instead: the payload's buffer goes into the message's delivery opaque, librdkafka
//! reads it in place, and the delivery report hands the record back with its result.
//!
//! Why this is sound: librdkafka reads a payload produced without `RD_KAFKA_MSG_F_COPY` (and
//! without `RD_KAFKA_MSG_F_FREE`) until the message's delivery report, and never frees it.
//! The buffer is owned by the boxed [`Lent`] behind the opaque, which only two places take
//! back: [`Lender::delivery`], called once per message after librdkafka is done with it, and
//! [`produce`] when `rd_kafka_producev` refused the message (then librdkafka kept nothing). A
//! `Vec`'s heap buffer does not move while the `Vec` is boxed. A producer dropped with messages
//! in flight purges and flushes them, which delivers their reports; one that still missed a
//! report at `rd_kafka_destroy` leaks that record rather than freeing memory librdkafka reads.

use std::ffi::{CStr, c_int, c_void};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};
use rdkafka::util::IntoOpaque;
use rdkafka::{ClientConfig, ClientContext};
use rdkafka_sys as rdsys;
use rdkafka_sys::rd_kafka_vtype_t::*;
use tokio::sync::oneshot;

use crate::plan::Record;

/// The producer context whose delivery opaque owns the record it reports on.
pub(crate) struct Lender;

/// A record while librdkafka holds it, and where its result goes.
pub(crate) struct Lent {
    record: Record,
    done: oneshot::Sender<(Record, Result<(), KafkaError>)>,
}

impl ClientContext for Lender {}

impl ProducerContext for Lender {
    type DeliveryOpaque = Box<Lent>;

    fn delivery(&self, result: &DeliveryResult<'_>, lent: Box<Lent>) {
        let result = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.clone()),
        };
        let Lent { record, done } = *lent;
        // A writer that gave up waiting dropped its receiver: the record is dropped here.
        let _ = done.send((record, result));
    }
}

pub(crate) type LendingProducer = ThreadedProducer<Lender>;

pub(crate) fn create(config: &ClientConfig) -> Result<LendingProducer, KafkaError> {
    config.create_with_context(Lender)
}

/// How long a full local queue is waited on before trying again.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(20);

/// Produces `record` to `topic`, retrying while librdkafka's queue is full for up to
/// `queue_timeout`; resolves with the record once its delivery is reported.
pub(crate) async fn produce(
    producer: &LendingProducer,
    topic: &CStr,
    mut record: Record,
    queue_timeout: Duration,
) -> (Record, Result<(), KafkaError>) {
    let started = Instant::now();
    let partition = record.partition;
    loop {
        let (done, delivered) = oneshot::channel();
        match enqueue(producer, topic, Box::new(Lent { record, done })) {
            Ok(()) => {
                // Every message taken is reported, also when its producer is dropped (purged),
                // and the caller holds the producer: a lost report would be librdkafka's bug,
                // answered as a failed write.
                return delivered.await.unwrap_or_else(|_| {
                    let lost = Record { partition, key: String::new(), payload: Vec::new() };
                    (lost, Err(KafkaError::Canceled))
                });
            }
            Err((code, lent)) => {
                record = lent.record;
                if code != RDKafkaErrorCode::QueueFull || started.elapsed() >= queue_timeout {
                    return (record, Err(KafkaError::MessageProduction(code)));
                }
                tokio::time::sleep(QUEUE_FULL_PAUSE).await;
            }
        }
    }
}

/// Hands `lent` to librdkafka without a copy; on refusal, takes it back.
fn enqueue(
    producer: &LendingProducer,
    topic: &CStr,
    lent: Box<Lent>,
) -> Result<(), (RDKafkaErrorCode, Box<Lent>)> {
    let payload = lent.record.payload.as_ptr() as *mut c_void;
    let payload_len = lent.record.payload.len();
    let key = lent.record.key.as_ptr() as *mut c_void;
    let key_len = lent.record.key.len();
    let partition = lent.record.partition;
    let opaque = lent.into_ptr();
    // SAFETY: the pointers are valid for the call (the topic, the key, which librdkafka copies)
    // and, for the payload, until the delivery report that gives `opaque` back (module docs).
    let error = unsafe {
        rdsys::rd_kafka_producev(
            producer.client().native_ptr(),
            RD_KAFKA_VTYPE_TOPIC,
            topic.as_ptr(),
            RD_KAFKA_VTYPE_PARTITION,
            partition,
            RD_KAFKA_VTYPE_MSGFLAGS,
            0 as c_int,
            RD_KAFKA_VTYPE_VALUE,
            payload,
            payload_len,
            RD_KAFKA_VTYPE_KEY,
            key,
            key_len,
            RD_KAFKA_VTYPE_OPAQUE,
            opaque,
            RD_KAFKA_VTYPE_END,
        )
    };
    if error == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        // SAFETY: librdkafka refused the message, so it holds no reference to `opaque`.
        Err((error.into(), unsafe { Box::<Lent>::from_ptr(opaque) }))
    }
}
