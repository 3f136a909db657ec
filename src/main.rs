//! `heddle`: one binary, one subcommand per role.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use heddle_api::auth::{generate_key, hash_key};
use heddle_pipeline::Sink;
use heddle_store::Store;

#[cfg(not(any(feature = "sqlite", feature = "clickhouse")))]
compile_error!("heddle needs a store: build with the feature `sqlite`, `clickhouse` or both");

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod keys;
mod memory;
mod net;
mod retention;
mod roles;
mod server;

fn main() -> anyhow::Result<()> {
    let memory = memory::Settings::apply();
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(memory))
}

#[derive(Parser)]
#[command(
    name = "heddle",
    version,
    about = "Tracing and evaluation backend for the Weave SDK and OpenTelemetry"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every role in one process: on the embedded SQLite store by default, or against
    /// ClickHouse with `--clickhouse`.
    Serve {
        #[command(flatten)]
        http: HttpArgs,
        #[command(flatten)]
        otlp: OtlpArgs,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        consumer: ConsumerArgs,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Run the ingest role alone: the call write endpoints, producing to Kafka.
    Ingest {
        #[command(flatten)]
        http: HttpArgs,
        #[command(flatten)]
        otlp: OtlpArgs,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// Run the consumer alone: Kafka → store in batches; serves /health and /metrics.
    Consume {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        consumer: ConsumerArgs,
        #[command(flatten)]
        http: MetricsArgs,
    },
    /// Run the query role alone: every read endpoint and the low-volume writes.
    Query {
        #[command(flatten)]
        http: HttpArgs,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Create or upgrade the schema of the configured store, then exit; with `--kafka`, also
    /// create the Kafka topics (or bring their settings up to date).
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
}

/// Where data lives: SQLite in `--data-dir`, or ClickHouse when `--clickhouse` is given.
#[derive(Args, Clone)]
struct StoreArgs {
    /// Where the embedded store keeps its data.
    #[arg(long, env = "HEDDLE_DATA_DIR", default_value = "./heddle-data")]
    data_dir: PathBuf,
    /// ClickHouse HTTP URL (e.g. http://clickhouse:8123); selects the ClickHouse store.
    #[arg(long, env = "HEDDLE_CLICKHOUSE_URL")]
    clickhouse: Option<String>,
    #[arg(long, env = "HEDDLE_CLICKHOUSE_USER", default_value = "default")]
    clickhouse_user: String,
    #[arg(long, env = "HEDDLE_CLICKHOUSE_PASSWORD", default_value = "", hide_env_values = true)]
    clickhouse_password: String,
    #[arg(long, env = "HEDDLE_CLICKHOUSE_DATABASE", default_value = "default")]
    clickhouse_database: String,
}

/// Kafka, for the distributed write path.
#[derive(Args, Clone)]
struct KafkaArgs {
    /// Kafka bootstrap servers (host:port,...); with `serve`, switches calls to go through Kafka.
    #[arg(long = "kafka", env = "HEDDLE_KAFKA_BROKERS")]
    brokers: Option<String>,
    #[arg(long, env = "HEDDLE_KAFKA_TOPIC", default_value = "heddle.calls")]
    kafka_topic: String,
    /// Where records the store rejects as bad data go, with the reason in a header.
    #[arg(long, env = "HEDDLE_KAFKA_DLQ_TOPIC", default_value = "heddle.calls.dlq")]
    kafka_dlq_topic: String,
    /// How long a write may wait for Kafka's acknowledgement before it fails with 503.
    #[arg(long, env = "HEDDLE_KAFKA_DELIVERY_TIMEOUT_MS", default_value_t = 5000)]
    kafka_delivery_timeout_ms: u64,
    /// Records are cut at about this many bytes (the broker's message.max.bytes must allow it);
    /// a call part larger than this is stored as a blob and travels as a reference.
    #[arg(long, env = "HEDDLE_KAFKA_MAX_RECORD_BYTES", default_value_t = 900_000)]
    kafka_max_record_bytes: usize,
    /// A librdkafka property KEY=VALUE for every Kafka client (TLS/SASL, session.timeout.ms,
    /// ...); repeatable, comma-separated in the environment.
    #[arg(long = "kafka-option", env = "HEDDLE_KAFKA_OPTIONS", value_delimiter = ',',
          value_parser = heddle_pipeline::KafkaConfig::parse_option)]
    kafka_options: Vec<(String, String)>,
    /// Partitions of the calls topic when heddle creates it (`migrate --kafka`, or at the start
    /// of a Kafka role); an existing topic keeps its count.
    #[arg(long, env = "HEDDLE_KAFKA_PARTITIONS", default_value_t = 6)]
    kafka_partitions: i32,
    /// Replication factor of the topics heddle creates; without it, the broker's
    /// `default.replication.factor`.
    #[arg(long, env = "HEDDLE_KAFKA_REPLICATION_FACTOR")]
    kafka_replication_factor: Option<i32>,
    /// `max.message.bytes` of the topics: at least twice --kafka-max-record-bytes.
    #[arg(long, env = "HEDDLE_KAFKA_TOPIC_MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    kafka_topic_max_message_bytes: u64,
    /// `retention.ms` of the dead-letter topic (default 30 days).
    #[arg(long, env = "HEDDLE_KAFKA_DLQ_RETENTION_MS", default_value_t = 30 * 24 * 3600 * 1000)]
    kafka_dlq_retention_ms: u64,
}

#[cfg(feature = "kafka")]
impl KafkaArgs {
    fn config(&self) -> anyhow::Result<heddle_pipeline::KafkaConfig> {
        let brokers = self.brokers.clone().context("--kafka (HEDDLE_KAFKA_BROKERS) is required")?;
        Ok(heddle_pipeline::KafkaConfig {
            brokers,
            topic: self.kafka_topic.clone(),
            dlq_topic: self.kafka_dlq_topic.clone(),
            delivery_timeout: Duration::from_millis(self.kafka_delivery_timeout_ms),
            max_record_bytes: self.kafka_max_record_bytes,
            options: self.kafka_options.clone(),
        })
    }

    fn topic_layout(&self) -> heddle_pipeline::topics::TopicLayout {
        heddle_pipeline::topics::TopicLayout {
            partitions: self.kafka_partitions,
            replication: self.kafka_replication_factor,
            max_message_bytes: self.kafka_topic_max_message_bytes,
            dlq_retention_ms: self.kafka_dlq_retention_ms,
        }
    }
}

/// The consumer: its group and when it flushes a batch (whichever limit comes first).
#[derive(Args, Clone)]
struct ConsumerArgs {
    #[arg(long, env = "HEDDLE_CONSUMER_GROUP", default_value = "heddle-consumer")]
    consumer_group: String,
    /// Flush after this many Kafka records.
    #[arg(long, env = "HEDDLE_BATCH_RECORDS", default_value_t = 500)]
    batch_records: usize,
    /// Flush after this many payload bytes.
    #[arg(long, env = "HEDDLE_BATCH_BYTES", default_value_t = 16 * 1024 * 1024)]
    batch_bytes: usize,
    /// Flush this long after a batch's first record, at the latest.
    #[arg(long, env = "HEDDLE_BATCH_WAIT_MS", default_value_t = 250)]
    batch_wait_ms: u64,
    /// Tries of a failing store write (backoff 100 ms, doubling) before the consumer probes the
    /// store: down → keep retrying (capped at 10 s); healthy → bisect and dead-letter the records
    /// that still fail alone.
    #[arg(long, env = "HEDDLE_CONSUMER_MAX_ATTEMPTS", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..))]
    consumer_max_attempts: u32,
}

/// The `consume` role's own small HTTP server.
#[derive(Args, Clone)]
struct MetricsArgs {
    /// Where `consume` serves /health and /metrics.
    #[arg(long, env = "HEDDLE_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    metrics_listen: SocketAddr,
    /// The admin key, for /metrics (other keys come from the store).
    #[arg(long, env = "HEDDLE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

#[cfg(feature = "kafka")]
impl ConsumerArgs {
    fn limits(&self) -> heddle_pipeline::consumer::BatchLimits {
        heddle_pipeline::consumer::BatchLimits {
            max_records: self.batch_records.max(1),
            max_bytes: self.batch_bytes.max(1),
            max_wait: Duration::from_millis(self.batch_wait_ms),
        }
    }

    fn retry(&self) -> heddle_pipeline::batch_store::RetryPolicy {
        heddle_pipeline::batch_store::RetryPolicy {
            max_attempts: self.consumer_max_attempts,
            ..Default::default()
        }
    }
}

/// The web UI, served by the roles that serve the query API (docs/ui.md).
#[derive(Args, Clone)]
struct UiArgs {
    /// The secret that signs the UI's session cookies (at least 32 characters); every query
    /// replica behind one address must have the same. Default: generated once and kept in
    /// `<data-dir>/ui-secret` on SQLite; a new one per process on ClickHouse.
    #[arg(long, env = "HEDDLE_UI_SECRET", hide_env_values = true)]
    ui_secret: Option<String>,
    /// Mark session cookies `Secure` even for plain-HTTP requests (set it when a TLS proxy in
    /// front does not send `X-Forwarded-Proto: https`).
    #[arg(long, env = "HEDDLE_UI_SECURE_COOKIES")]
    ui_secure_cookies: bool,
}

impl UiArgs {
    fn config(&self, store: &StoreArgs) -> anyhow::Result<heddle_ui::UiConfig> {
        let secret = match self.ui_secret.as_deref().filter(|s| !s.is_empty()) {
            Some(text) => heddle_ui::Secret::from_text(text).context("--ui-secret")?,
            None if store.clickhouse.is_none() => {
                heddle_ui::Secret::load_or_create(&store.data_dir.join("ui-secret"))?
            }
            None => {
                tracing::warn!(
                    "no --ui-secret (HEDDLE_UI_SECRET): UI sessions end when this process \
                     stops, and other query replicas do not accept them"
                );
                heddle_ui::Secret::random()
            }
        };
        Ok(heddle_ui::UiConfig { secret, secure_cookies: self.ui_secure_cookies })
    }
}

/// The HTTP front shared by the roles that serve the API.
#[derive(Args)]
struct HttpArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, env = "HEDDLE_LISTEN", default_value = "127.0.0.1:6345")]
    listen: SocketAddr,
    /// The instance's admin key (may use any entity). Without it, the first start generates one
    /// and prints it once.
    #[arg(long, env = "HEDDLE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest accepted request body, in bytes (413 above).
    #[arg(long, env = "HEDDLE_MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Memory that decoding request bodies and building answers from stored values may take at
    /// once (each charged for what it becomes); past it requests wait up to 5 s, then get 503
    /// (docs/limits.md).
    #[arg(long, env = "HEDDLE_MEMORY_BUDGET_BYTES",
          default_value_t = heddle_api::state::DEFAULT_MEMORY_BUDGET_BYTES)]
    memory_budget_bytes: usize,
    /// A GeoIP database (MaxMind DB format, e.g. GeoLite2-City.mmdb) for `/geolocate`.
    #[arg(long, env = "HEDDLE_GEOIP_DB")]
    geoip_db: Option<PathBuf>,
    /// Open HTTP connections at most; at the cap a new one evicts the longest-idle one
    /// [default: 4096, or half the open-files limit less 256 if that is lower].
    #[arg(long, env = "HEDDLE_HTTP_MAX_CONNECTIONS")]
    http_max_connections: Option<usize>,
    /// Seconds a client has to send a request's headers: the first after connecting, and on
    /// HTTP/1.1 each next one on a kept-alive connection.
    #[arg(long, env = "HEDDLE_HTTP_HEADER_TIMEOUT_SECS", default_value = "30", value_parser = secs)]
    http_header_timeout_secs: Duration,
    /// Seconds a request's body has to arrive in full after its headers (408 otherwise).
    #[arg(long, env = "HEDDLE_HTTP_BODY_TIMEOUT_SECS", default_value = "60", value_parser = secs)]
    http_body_timeout_secs: Duration,
    /// Seconds a connection with no request in progress stays open.
    #[arg(long, env = "HEDDLE_HTTP_IDLE_TIMEOUT_SECS", default_value = "60", value_parser = secs)]
    http_idle_timeout_secs: Duration,
    /// Seconds between two runs of the retention purge, which deletes what projects' retention
    /// settings expire (docs/storage.md#retention); run by the roles that serve queries, and
    /// once at start. 0: never.
    #[arg(long, env = "HEDDLE_RETENTION_INTERVAL_SECS", default_value = "3600",
          value_parser = secs_or_zero)]
    retention_interval_secs: Duration,
}

impl HttpArgs {
    fn limits(&self) -> server::HttpLimits {
        let defaults = server::HttpLimits::defaults();
        server::HttpLimits {
            conn: net::ConnLimits {
                max_connections: self.http_max_connections.unwrap_or(defaults.conn.max_connections),
                header_timeout: self.http_header_timeout_secs,
                idle_timeout: self.http_idle_timeout_secs,
                ..defaults.conn
            },
            body_timeout: self.http_body_timeout_secs,
        }
    }
}

/// A positive number of seconds, fractions allowed.
fn secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{s:?} is not a number of seconds: {e}"))?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("{s:?}: expected a positive number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// Like [`secs`], with 0 (for "never") allowed.
fn secs_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim().parse::<f64>() == Ok(0.0) { Ok(Duration::ZERO) } else { secs(s) }
}

/// OTLP/gRPC, served by the roles that ingest (OTLP/HTTP is on the main port).
#[derive(Args)]
struct OtlpArgs {
    /// Where OTLP/gRPC `TraceService/Export` and `LogsService/Export` listen (port 0 picks a
    /// free port; printed).
    #[arg(long, env = "HEDDLE_OTLP_GRPC_LISTEN", default_value = "127.0.0.1:4317")]
    otlp_grpc_listen: SocketAddr,
    /// Largest accepted OTLP/gRPC message, in bytes, after decompression.
    #[arg(long, env = "HEDDLE_OTLP_GRPC_MAX_MESSAGE_BYTES", default_value_t = 64 * 1024 * 1024)]
    otlp_grpc_max_message_bytes: usize,
    /// Open OTLP/gRPC connections at most; at the cap a new one evicts the longest-idle one
    /// [default: 1024, or a quarter of the open-files limit less 256 if that is lower].
    #[arg(long, env = "HEDDLE_OTLP_GRPC_MAX_CONNECTIONS")]
    otlp_grpc_max_connections: Option<usize>,
    /// Seconds a new OTLP/gRPC connection has to send its first request's headers.
    #[arg(long, env = "HEDDLE_OTLP_GRPC_HEADER_TIMEOUT_SECS", default_value = "30", value_parser = secs)]
    otlp_grpc_header_timeout_secs: Duration,
    /// Seconds an OTLP/gRPC connection with no export in progress stays open.
    #[arg(long, env = "HEDDLE_OTLP_GRPC_IDLE_TIMEOUT_SECS", default_value = "60", value_parser = secs)]
    otlp_grpc_idle_timeout_secs: Duration,
    /// Seconds one export may take, receiving included (DEADLINE_EXCEEDED after).
    #[arg(long, env = "HEDDLE_OTLP_GRPC_TIMEOUT_SECS", default_value = "30", value_parser = secs)]
    otlp_grpc_timeout_secs: Duration,
    /// Exports one connection may have in progress at once; more wait for their turn.
    #[arg(long, env = "HEDDLE_OTLP_GRPC_CONCURRENCY_PER_CONNECTION", default_value_t = 32)]
    otlp_grpc_concurrency_per_connection: usize,
    /// HTTP/2 streams one connection may have open at once.
    #[arg(long, env = "HEDDLE_OTLP_GRPC_MAX_CONCURRENT_STREAMS", default_value_t = 100)]
    otlp_grpc_max_concurrent_streams: u32,
    /// Seconds between HTTP/2 keep-alive pings on a connection (0: no pings).
    #[arg(long, env = "HEDDLE_OTLP_GRPC_KEEPALIVE_INTERVAL_SECS", default_value = "30",
          value_parser = secs_or_zero)]
    otlp_grpc_keepalive_interval_secs: Duration,
    /// Seconds a keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, env = "HEDDLE_OTLP_GRPC_KEEPALIVE_TIMEOUT_SECS", default_value = "20",
          value_parser = secs)]
    otlp_grpc_keepalive_timeout_secs: Duration,
}

impl OtlpArgs {
    fn limits(&self) -> server::GrpcLimits {
        let max_connections = self
            .otlp_grpc_max_connections
            .unwrap_or_else(|| net::default_max_connections(1024, 0.25));
        server::GrpcLimits {
            conn: net::ConnLimits {
                max_connections,
                header_timeout: self.otlp_grpc_header_timeout_secs,
                idle_timeout: self.otlp_grpc_idle_timeout_secs,
                http2_only: true,
                max_concurrent_streams: self.otlp_grpc_max_concurrent_streams.max(1),
                keepalive_interval: Some(self.otlp_grpc_keepalive_interval_secs)
                    .filter(|interval| !interval.is_zero()),
                keepalive_timeout: self.otlp_grpc_keepalive_timeout_secs,
            },
            request_timeout: self.otlp_grpc_timeout_secs,
            concurrency_per_connection: self.otlp_grpc_concurrency_per_connection.max(1),
        }
    }
}

async fn run(memory: memory::Settings) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    memory.log();
    let open_files = net::raise_open_files_limit();
    tracing::debug!(open_files, "open-files limit");
    match Cli::parse().command {
        Command::Serve { http, otlp, store: store_args, kafka, consumer, ui } => {
            let store = open_store(&store_args).await?;
            let ui = Some(ui.config(&store_args)?);
            if kafka.brokers.is_none() {
                let roles = server::Roles { ui, ..server::Roles::ALL };
                return serve(http, Some(otlp), store, None, roles).await;
            }
            roles::serve_through_kafka(http, otlp, store, kafka, consumer, ui).await
        }
        Command::Ingest { http, otlp, store, kafka } => {
            roles::ingest(http, otlp, open_store(&store).await?, kafka).await
        }
        Command::Consume { store, kafka, consumer, http } => {
            roles::consume(open_store(&store).await?, kafka, consumer, http).await
        }
        Command::Query { http, store: store_args, ui } => {
            let store = open_store(&store_args).await?;
            let roles = server::Roles { ui: Some(ui.config(&store_args)?), ..server::Roles::QUERY };
            serve(http, None, store, None, roles).await
        }
        Command::Migrate { store, kafka } => {
            open_store(&store).await?;
            eprintln!("schema is up to date");
            if kafka.brokers.is_some() {
                roles::migrate_topics(&kafka).await?;
            }
            Ok(())
        }
        Command::Keys { command } => keys::run(command).await,
    }
}

/// Opens the configured store and brings its schema up to date.
async fn open_store(args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    match &args.clickhouse {
        Some(url) => open_clickhouse(url, args).await,
        None => open_sqlite(args),
    }
}

#[cfg(feature = "clickhouse")]
async fn open_clickhouse(url: &str, args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    let store = heddle_store::clickhouse::ClickHouseStore::connect(
        url,
        &args.clickhouse_user,
        &args.clickhouse_password,
        &args.clickhouse_database,
    )
    .await
    .with_context(|| format!("opening the ClickHouse store at {url}"))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "clickhouse"))]
async fn open_clickhouse(_url: &str, _args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    Err(not_built("clickhouse", "--clickhouse"))
}

#[cfg(feature = "sqlite")]
fn open_sqlite(args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    use heddle_store::sqlite::{SqliteOptions, SqliteStore};
    let store = SqliteStore::open(&args.data_dir, SqliteOptions::default())
        .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "sqlite"))]
fn open_sqlite(_args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    Err(not_built("sqlite", "the embedded store (without --clickhouse)"))
}

/// The error for a flag whose backend this binary was built without (README, "Build features").
#[cfg(not(all(feature = "sqlite", feature = "clickhouse", feature = "kafka")))]
fn not_built(feature: &str, what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} needs the cargo feature `{feature}`, which this heddle binary was built without"
    )
}

async fn serve(
    args: HttpArgs,
    otlp: Option<OtlpArgs>,
    store: Arc<dyn Store>,
    sink: Option<Arc<dyn Sink>>,
    roles: server::Roles,
) -> anyhow::Result<()> {
    let listener = net::bind(args.listen).with_context(|| format!("binding {}", args.listen))?;
    let url = format!("http://{}", listener.local_addr()?);
    let limits = args.limits();
    let admin_key = args.api_key.filter(|k| !k.is_empty());
    if admin_key.is_none() && !store.has_admin_key().await? {
        let key = generate_key();
        store.create_key(&hash_key(&key), None).await?;
        println!(
            "\nGenerated this instance's admin API key. It is stored hashed and shown only once:\n\n    \
             {key}\n\nPoint the weave SDK at heddle with:\n\n    \
             export WANDB_BASE_URL={url}\n    export WF_TRACE_SERVER_URL={url}\n    \
             export WANDB_API_KEY={key}\n"
        );
    }
    let geoip = match &args.geoip_db {
        Some(path) => heddle_query::GeoIp::open(path)
            .with_context(|| format!("opening the GeoIP database {}", path.display()))?,
        None => heddle_query::GeoIp::default(),
    };
    let body_limits = heddle_api::BodyLimits {
        max_body_bytes: args.max_body_bytes,
        memory_budget_bytes: args.memory_budget_bytes,
    };
    if roles.query && !args.retention_interval_secs.is_zero() {
        tokio::spawn(retention::run(store.clone(), args.retention_interval_secs));
    }
    let (app, otlp_ingest) =
        server::app(store, sink, admin_key.as_deref(), body_limits, geoip, roles);
    println!("heddle listening on {url}");
    let (Some(otlp), Some(ingest)) = (otlp, otlp_ingest) else {
        server::run(listener, app, limits).await;
        return Ok(());
    };
    let grpc_listener = net::bind(otlp.otlp_grpc_listen)
        .with_context(|| format!("binding {} for OTLP/gRPC", otlp.otlp_grpc_listen))?;
    println!("heddle OTLP/gRPC listening on http://{}", grpc_listener.local_addr()?);
    let routes = ingest.grpc_service(otlp.otlp_grpc_max_message_bytes);
    tokio::join!(
        server::run(listener, app, limits),
        server::run_grpc(grpc_listener, routes, otlp.limits()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Catches duplicate flags and other definition errors, which clap reports only at run time.
    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
