//! The roles that run the distributed write path through Kafka: `serve --kafka`, `ingest` and
//! `consume` (docs/distributed.md). A binary built without the `kafka` feature keeps their
//! flags, so one command line works for every build, and refuses to start them.

use std::sync::Arc;

use heddle_store::Store;

use crate::{ConsumerArgs, HttpArgs, KafkaArgs, MetricsArgs, OtlpArgs};

#[cfg(feature = "kafka")]
pub use with_kafka::{consume, ingest, migrate_topics, serve_through_kafka};

#[cfg(feature = "kafka")]
mod with_kafka {
    use anyhow::Context;
    use heddle_pipeline::Sink;
    use heddle_pipeline::consumer::Pipeline;
    use heddle_pipeline::metrics::Metrics;
    use heddle_pipeline::producer::KafkaSink;
    use heddle_pipeline::topics::{TopicOutcome, ensure_topics};

    use super::*;
    use crate::{serve, server};

    /// `serve --kafka`: every role in one process, calls going through Kafka.
    pub async fn serve_through_kafka(
        http: HttpArgs,
        otlp: OtlpArgs,
        store: Arc<dyn Store>,
        kafka: KafkaArgs,
        consumer: ConsumerArgs,
        ui: Option<heddle_ui::UiConfig>,
    ) -> anyhow::Result<()> {
        create_missing_topics(&kafka)?;
        let metrics = Arc::new(Metrics::new());
        let pipeline = consumer_pipeline(&kafka, &consumer, store.clone(), metrics.clone())?;
        let sink = kafka_sink(&kafka, store.clone(), metrics.clone())?;
        let consuming = tokio::spawn(pipeline.run(std::future::pending()));
        let roles = server::Roles { metrics: Some(metrics), ui, ..server::Roles::ALL };
        tokio::select! {
            served = serve(http, Some(otlp), store, Some(sink), roles) => served,
            consumed = consuming => Err(anyhow::anyhow!("the consumer stopped: {consumed:?}")),
        }
    }

    /// The ingest role alone: the write endpoints, producing to Kafka.
    pub async fn ingest(
        http: HttpArgs,
        otlp: OtlpArgs,
        store: Arc<dyn Store>,
        kafka: KafkaArgs,
    ) -> anyhow::Result<()> {
        create_missing_topics(&kafka)?;
        let metrics = Arc::new(Metrics::new());
        let sink = kafka_sink(&kafka, store.clone(), metrics.clone())?;
        let roles = server::Roles { metrics: Some(metrics), ..server::Roles::INGEST };
        serve(http, Some(otlp), store, Some(sink), roles).await
    }

    /// The consumer alone: Kafka → store in batches; serves /health and /metrics.
    pub async fn consume(
        store: Arc<dyn Store>,
        kafka: KafkaArgs,
        consumer: ConsumerArgs,
        http: MetricsArgs,
    ) -> anyhow::Result<()> {
        create_missing_topics(&kafka)?;
        let metrics = Arc::new(Metrics::new());
        let pipeline = consumer_pipeline(&kafka, &consumer, store.clone(), metrics.clone())?;
        let (app, _) = server::app(
            store,
            None,
            http.api_key.as_deref(),
            heddle_api::BodyLimits::new(usize::MAX),
            heddle_query::GeoIp::default(),
            server::Roles { metrics: Some(metrics), ..server::Roles::NONE },
        );
        let listener = crate::net::bind(http.metrics_listen)
            .with_context(|| format!("binding {}", http.metrics_listen))?;
        println!("heddle consumer metrics on http://{}", listener.local_addr()?);
        tokio::select! {
            consumed = pipeline.run(server::shutdown_signal()) => Ok(consumed?),
            () = server::run(listener, app, server::HttpLimits::defaults()) => Ok(()),
        }
    }

    /// `migrate --kafka`: creates the missing topics and sets the settings of existing ones.
    pub async fn migrate_topics(kafka: &KafkaArgs) -> anyhow::Result<()> {
        let cfg = kafka.config()?;
        let done = ensure_topics(&cfg, &kafka.topic_layout(), true)
            .await
            .context("creating the Kafka topics")?;
        for (topic, outcome) in done {
            match outcome {
                TopicOutcome::Created { partitions } => {
                    eprintln!("created topic {topic} ({partitions} partitions)")
                }
                TopicOutcome::Exists { partitions, settings_updated: true } => {
                    eprintln!("topic {topic} exists ({partitions} partitions), settings updated")
                }
                TopicOutcome::Exists { partitions, settings_updated: false } => eprintln!(
                    "topic {topic} exists ({partitions} partitions); the broker cannot alter \
                     topic settings, they were left as they are"
                ),
            }
        }
        Ok(())
    }

    /// At the start of a Kafka role: creates the topics a fresh broker lacks, in the background
    /// so a broker still starting delays nothing. A failure (no permission to create, say) is
    /// logged; writes then answer 503 until the topics exist.
    fn create_missing_topics(kafka: &KafkaArgs) -> anyhow::Result<()> {
        let (cfg, layout) = (kafka.config()?, kafka.topic_layout());
        tokio::spawn(async move {
            match ensure_topics(&cfg, &layout, false).await {
                Ok(done) => {
                    for (topic, outcome) in done {
                        if let TopicOutcome::Created { partitions } = outcome {
                            tracing::info!(%topic, partitions, "created Kafka topic");
                        }
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "could not check or create the Kafka topics; create them with \
                     `heddle migrate --kafka`"
                ),
            }
        });
        Ok(())
    }

    /// The Kafka producer; large call parts go to `store` as blobs (docs/distributed.md).
    fn kafka_sink(
        kafka: &KafkaArgs,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Arc<dyn Sink>> {
        let sink = KafkaSink::new(kafka.config()?, store, metrics)
            .context("creating the Kafka producer")?;
        Ok(Arc::new(sink))
    }

    fn consumer_pipeline(
        kafka: &KafkaArgs,
        consumer: &ConsumerArgs,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Pipeline> {
        Pipeline::new(
            kafka.config()?,
            &consumer.consumer_group,
            consumer.limits(),
            consumer.retry(),
            store,
            metrics,
        )
        .context("creating the Kafka consumer")
    }
}

#[cfg(not(feature = "kafka"))]
pub async fn serve_through_kafka(
    _: HttpArgs,
    _: OtlpArgs,
    _: Arc<dyn Store>,
    _: KafkaArgs,
    _: ConsumerArgs,
    _: Option<heddle_ui::UiConfig>,
) -> anyhow::Result<()> {
    Err(crate::not_built("kafka", "--kafka"))
}

#[cfg(not(feature = "kafka"))]
pub async fn migrate_topics(_: &KafkaArgs) -> anyhow::Result<()> {
    Err(crate::not_built("kafka", "migrate --kafka"))
}

#[cfg(not(feature = "kafka"))]
pub async fn ingest(
    _: HttpArgs,
    _: OtlpArgs,
    _: Arc<dyn Store>,
    _: KafkaArgs,
) -> anyhow::Result<()> {
    Err(crate::not_built("kafka", "the ingest role"))
}

#[cfg(not(feature = "kafka"))]
pub async fn consume(
    _: Arc<dyn Store>,
    _: KafkaArgs,
    _: ConsumerArgs,
    _: MetricsArgs,
) -> anyhow::Result<()> {
    Err(crate::not_built("kafka", "the consumer role"))
}
