//! Kafka settings shared by the producer and the consumer (docs/distributed.md, "Kafka client
//! options"). Plain data, so the flags can be parsed whether or not the `kafka` feature is on.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct KafkaConfig {
    pub brokers: String,
    pub topic: String,
    pub dlq_topic: String,
    /// How long a produce may wait for acknowledgement before the write fails as unavailable.
    pub delivery_timeout: Duration,
    /// Records are cut at about this size; a part larger than it is offloaded to a blob.
    pub max_record_bytes: usize,
    /// Extra librdkafka properties for every client (TLS/SASL, session timeout, ...), applied
    /// after heddle's own; see [`KafkaConfig::parse_option`].
    pub options: Vec<(String, String)>,
}

/// Properties heddle's promises rest on: acknowledged means replicated, offsets move only after
/// the store acknowledged. A user option may not change them.
const FIXED_PROPERTIES: &[&str] =
    &["acks", "enable.idempotence", "enable.auto.commit", "enable.auto.offset.store"];

impl KafkaConfig {
    /// Parses one `key=value` librdkafka property, refusing those heddle fixes.
    pub fn parse_option(kv: &str) -> Result<(String, String), String> {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("{kv:?} is not KEY=VALUE"))?;
        let k = k.trim();
        if FIXED_PROPERTIES.contains(&k) {
            return Err(format!("{k} is fixed by heddle (its durability promises depend on it)"));
        }
        Ok((k.to_owned(), v.trim().to_owned()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn cfg(options: &[&str]) -> Result<KafkaConfig, String> {
        Ok(KafkaConfig {
            brokers: "b:9092".into(),
            topic: "t".into(),
            dlq_topic: "d".into(),
            delivery_timeout: Duration::from_secs(5),
            max_record_bytes: 1000,
            options: options
                .iter()
                .map(|o| KafkaConfig::parse_option(o))
                .collect::<Result<_, _>>()?,
        })
    }

    #[test]
    fn durability_properties_and_malformed_options_are_refused() {
        for bad in ["acks=1", "enable.idempotence=false", "enable.auto.commit=true"] {
            let Err(err) = cfg(&[bad]) else { panic!("{bad} was accepted") };
            assert!(err.contains("fixed by heddle"), "{bad}: {err}");
        }
        let Err(err) = cfg(&["session.timeout.ms"]) else { panic!("a bare key was accepted") };
        assert!(err.contains("not KEY=VALUE"), "{err}");
    }
}
