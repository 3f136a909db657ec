//! The Kafka topics heddle writes to and reads from (docs/distributed.md, "Topics"): the calls
//! topic, keyed by trace so that a trace stays on one partition, and the dead-letter topic.
//! [`ensure_topics`] creates the missing ones with their partitions and settings and, when
//! asked, brings the settings of existing ones up to date; it is what `heddle migrate --kafka`
//! runs, and what the roles that use Kafka run at startup (creating only), so that a fresh
//! broker works without topics made by hand. Running it again changes nothing.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::KafkaConfig;

/// How the topics are laid out: partitions of the calls topic (the DLQ has one), replication
/// of both, and the settings every topic carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLayout {
    pub partitions: i32,
    /// `None`: the broker's `default.replication.factor`.
    pub replication: Option<i32>,
    /// The topics' `max.message.bytes`: records are cut at about `max_record_bytes`, and may
    /// exceed it somewhat, so this is at least twice that (see [`TopicLayout::check`]).
    pub max_message_bytes: u64,
    /// The DLQ's `retention.ms`: dead letters are kept for someone to look at.
    pub dlq_retention_ms: u64,
}

/// What [`ensure_topics`] did to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicOutcome {
    Created {
        partitions: i32,
    },
    /// It existed with this many partitions (never changed: more partitions would move traces
    /// to other partitions, and fewer is impossible). `settings_updated`: its settings were
    /// set (false when not asked to, or when the broker cannot alter topic settings).
    Exists {
        partitions: i32,
        settings_updated: bool,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("invalid topic layout: {0}")]
    Layout(String),
    #[error("Kafka admin client: {0}")]
    Client(#[source] rdkafka::error::KafkaError),
    #[error("reading the metadata of topic {topic}: {source}")]
    Metadata {
        topic: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error("creating topic {topic}: {reason}")]
    Create { topic: String, reason: String },
    #[error("updating the settings of topic {topic}: {reason}")]
    Alter { topic: String, reason: String },
    #[error("topic {topic} exists but has no partitions")]
    NoPartitions { topic: String },
}

/// A topic's settings, as (name, value).
type Settings = Vec<(&'static str, String)>;

/// How long one admin request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

impl TopicLayout {
    /// Refuses a layout the pipeline could not work with.
    pub fn check(&self, cfg: &KafkaConfig) -> Result<(), TopicError> {
        if self.partitions < 1 {
            return Err(TopicError::Layout(format!(
                "partitions must be at least 1, got {}",
                self.partitions
            )));
        }
        if let Some(r) = self.replication
            && r < 1
        {
            return Err(TopicError::Layout(format!(
                "replication factor must be at least 1, got {r}"
            )));
        }
        let needed = 2 * cfg.max_record_bytes as u64;
        if self.max_message_bytes < needed {
            return Err(TopicError::Layout(format!(
                "max.message.bytes {} is below twice the record size ({needed})",
                self.max_message_bytes
            )));
        }
        Ok(())
    }

    /// Each topic with its partitions and settings.
    fn topics<'a>(&self, cfg: &'a KafkaConfig) -> [(&'a str, i32, Settings); 2] {
        let max = ("max.message.bytes", self.max_message_bytes.to_string());
        [
            (cfg.topic.as_str(), self.partitions, vec![max.clone()]),
            (
                cfg.dlq_topic.as_str(),
                1,
                vec![max, ("retention.ms", self.dlq_retention_ms.to_string())],
            ),
        ]
    }
}

/// Creates the topics of `cfg` that are missing; with `update_settings`, also sets the settings
/// of those that exist. Returns what happened to each (calls topic first).
pub async fn ensure_topics(
    cfg: &KafkaConfig,
    layout: &TopicLayout,
    update_settings: bool,
) -> Result<Vec<(String, TopicOutcome)>, TopicError> {
    layout.check(cfg)?;
    let admin: Arc<AdminClient<DefaultClientContext>> =
        Arc::new(cfg.finish(cfg.client()).create().map_err(TopicError::Client)?);
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let mut out = Vec::new();
    for (name, partitions, settings) in layout.topics(cfg) {
        let outcome = match partition_count(&admin, name).await? {
            Some(n) => {
                let settings_updated =
                    update_settings && alter(&admin, &opts, name, &settings).await?;
                TopicOutcome::Exists { partitions: n, settings_updated }
            }
            None => {
                create(&admin, &opts, name, partitions, layout.replication, &settings).await?;
                TopicOutcome::Created { partitions }
            }
        };
        out.push((name.to_owned(), outcome));
    }
    Ok(out)
}

/// The topic's partition count, `None` when the broker does not know the topic.
async fn partition_count(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    topic: &str,
) -> Result<Option<i32>, TopicError> {
    let admin = admin.clone();
    let name = topic.to_owned();
    // Metadata requests block: run them off the async workers.
    let md = tokio::task::spawn_blocking(move || {
        admin.inner().fetch_metadata(Some(&name), ADMIN_TIMEOUT).map(|md| {
            md.topics().first().map(|t| (t.error(), t.partitions().len() as i32)).unwrap_or((
                Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART),
                0,
            ))
        })
    })
    .await
    .expect("the metadata task does not panic")
    .map_err(|source| TopicError::Metadata { topic: topic.to_owned(), source })?;
    match md {
        (Some(err), _)
            if RDKafkaErrorCode::from(err) == RDKafkaErrorCode::UnknownTopicOrPartition =>
        {
            Ok(None)
        }
        (Some(err), _) => Err(TopicError::Metadata {
            topic: topic.to_owned(),
            source: rdkafka::error::KafkaError::MetadataFetch(err.into()),
        }),
        (None, 0) => Ok(None),
        (None, n) => Ok(Some(n)),
    }
}

async fn create(
    admin: &AdminClient<DefaultClientContext>,
    opts: &AdminOptions,
    topic: &str,
    partitions: i32,
    replication: Option<i32>,
    settings: &[(&'static str, String)],
) -> Result<(), TopicError> {
    let mut new =
        NewTopic::new(topic, partitions, TopicReplication::Fixed(replication.unwrap_or(-1)));
    for (k, v) in settings {
        new = new.set(k, v);
    }
    let results = admin
        .create_topics([&new], opts)
        .await
        .map_err(|e| TopicError::Create { topic: topic.to_owned(), reason: e.to_string() })?;
    for r in results {
        match r {
            Ok(_) => {}
            // Another process created it meanwhile: what we wanted.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(TopicError::Create {
                    topic: topic.to_owned(),
                    reason: code.to_string(),
                });
            }
        }
    }
    Ok(())
}

async fn alter(
    admin: &AdminClient<DefaultClientContext>,
    opts: &AdminOptions,
    topic: &str,
    settings: &[(&'static str, String)],
) -> Result<bool, TopicError> {
    let mut change = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in settings {
        change = change.set(k, v);
    }
    let fail = |reason: String| TopicError::Alter { topic: topic.to_owned(), reason };
    let results = match admin.alter_configs([&change], opts).await {
        Ok(results) => results,
        // Some Kafka-protocol brokers (tansu) have no AlterConfigs: the topic was created with
        // its settings, which is what matters on them.
        Err(KafkaError::AdminOp(
            RDKafkaErrorCode::UnsupportedFeature | RDKafkaErrorCode::UnsupportedVersion,
        )) => return Ok(false),
        Err(e) => return Err(fail(e.to_string())),
    };
    for r in results {
        r.map_err(|(_, code)| fail(code.to_string()))?;
    }
    Ok(true)
}
