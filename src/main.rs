//! `heddle`: one binary, one subcommand per role.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use heddle_api::auth::{generate_key, hash_key};
use heddle_store::Store;
use heddle_store::sqlite::{SqliteOptions, SqliteStore};

mod server;

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
        store: StoreArgs,
    },
    /// Run the query role alone: every read endpoint and the low-volume writes.
    Query {
        #[command(flatten)]
        http: HttpArgs,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Create or upgrade the schema of the configured store, then exit.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
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
    /// A GeoIP database (MaxMind DB format, e.g. GeoLite2-City.mmdb) for `/geolocate`.
    #[arg(long, env = "HEDDLE_GEOIP_DB")]
    geoip_db: Option<PathBuf>,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key that may only use projects `<ENTITY>/<project>`; prints the key.
    Create {
        #[arg(long)]
        entity: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve { http, store } => {
            serve(http, open_store(&store).await?, server::Roles::ALL).await
        }
        Command::Query { http, store } => {
            serve(http, open_store(&store).await?, server::Roles::QUERY).await
        }
        Command::Migrate { store } => {
            open_store(&store).await?;
            eprintln!("schema is up to date");
            Ok(())
        }
        Command::Keys { command: KeysCommand::Create { entity, store } } => {
            if entity.is_empty() || entity.contains('/') {
                anyhow::bail!("--entity must be a non-empty name without '/'");
            }
            let store = open_store(&store).await?;
            let key = generate_key();
            store.create_key(&hash_key(&key), Some(&entity)).await?;
            eprintln!("API key for entity {entity:?} (shown once, store it safely):");
            println!("{key}");
            Ok(())
        }
    }
}

/// Opens the configured store and brings its schema up to date.
async fn open_store(args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(url) = &args.clickhouse {
        anyhow::bail!("the ClickHouse store ({url}) is not available in this build yet");
    }
    let store = SqliteStore::open(&args.data_dir, SqliteOptions::default())
        .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
    Ok(Arc::new(store))
}

async fn serve(args: HttpArgs, store: Arc<dyn Store>, roles: server::Roles) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let url = format!("http://{}", listener.local_addr()?);
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
    let app = server::app(store, admin_key.as_deref(), args.max_body_bytes, geoip, roles);
    println!("heddle listening on {url}");
    server::run(listener, app).await
}
