//! Pipeline metrics in the Prometheus text format, served at `/metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// Seconds from a record's produce timestamp to its batch being stored (visibility lag).
    pub visibility_lag: Histogram,
    /// Records not yet committed by the consumer group, per partition.
    pub consumer_lag: IntGaugeVec,
    /// Records and parts through the consumer, by outcome (stored, dead_lettered).
    pub consumed: IntCounterVec,
    /// Records produced by ingest, by outcome (acked, failed).
    pub produced: IntCounterVec,
    /// Records sent to the dead-letter topic, by reason class (undecodable, rejected,
    /// unresolvable, store_error).
    pub dead_lettered: IntCounterVec,
    /// Failed store operations of the consumer that it retried.
    pub store_retries: IntCounter,
    /// 1 while the store accepts the consumer's writes, 0 while its write probe fails (an
    /// outage: batches wait and retry, nothing is dead-lettered).
    pub store_up: IntGauge,
    /// Call parts ingest moved out of their Kafka record into a blob, and their bytes.
    pub offloaded_parts: IntCounter,
    pub offloaded_bytes: IntCounter,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("heddle".into()), None).expect("valid prefix");
        let visibility_lag = Histogram::with_opts(
            HistogramOpts::new(
                "visibility_lag_seconds",
                "Time from a record's produce timestamp until its batch is stored",
            )
            .buckets(vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]),
        )
        .expect("valid histogram");
        let consumer_lag = IntGaugeVec::new(
            Opts::new("consumer_lag_records", "High watermark minus committed offset"),
            &["topic", "partition"],
        )
        .expect("valid gauge");
        let consumed = IntCounterVec::new(
            Opts::new("consumed_records_total", "Kafka records handled by the consumer"),
            &["outcome"],
        )
        .expect("valid counter");
        let produced = IntCounterVec::new(
            Opts::new("produced_records_total", "Kafka records produced by ingest"),
            &["outcome"],
        )
        .expect("valid counter");
        let dead_lettered = IntCounterVec::new(
            Opts::new("dead_lettered_records_total", "Records sent to the dead-letter topic"),
            &["reason"],
        )
        .expect("valid counter");
        let store_retries = IntCounter::new(
            "consumer_store_retries_total",
            "Failed store operations of the consumer that were retried",
        )
        .expect("valid counter");
        let store_up = IntGauge::new(
            "consumer_store_up",
            "1 while the store accepts the consumer's writes, 0 while its write probe fails",
        )
        .expect("valid gauge");
        store_up.set(1);
        let offloaded_parts = IntCounter::new(
            "offloaded_parts_total",
            "Call parts too large for a Kafka record, stored as blobs by ingest",
        )
        .expect("valid counter");
        let offloaded_bytes =
            IntCounter::new("offloaded_bytes_total", "Bytes of the offloaded call parts")
                .expect("valid counter");
        for c in [
            Box::new(visibility_lag.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(consumer_lag.clone()),
            Box::new(consumed.clone()),
            Box::new(produced.clone()),
            Box::new(dead_lettered.clone()),
            Box::new(store_retries.clone()),
            Box::new(store_up.clone()),
            Box::new(offloaded_parts.clone()),
            Box::new(offloaded_bytes.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Metrics {
            registry,
            visibility_lag,
            consumer_lag,
            consumed,
            produced,
            dead_lettered,
            store_retries,
            store_up,
            offloaded_parts,
            offloaded_bytes,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("encoding to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
