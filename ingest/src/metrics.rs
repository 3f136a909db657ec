//! Pipeline metrics in the Prometheus text format, served at `/metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
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
        for c in [
            Box::new(visibility_lag.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(consumer_lag.clone()),
            Box::new(consumed.clone()),
            Box::new(produced.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Metrics { registry, visibility_lag, consumer_lag, consumed, produced }
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
