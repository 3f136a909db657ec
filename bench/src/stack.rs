//! The distributed deployment the bench starts itself: a tansu broker (Kafka protocol, SQLite
//! storage) with the call topic and its dead-letter topic, a ClickHouse (the chdb-backed HTTP
//! adapter from `tests/support/clickhouse_http.py`, or a real server named by --clickhouse-url),
//! and `heddle serve --kafka … --clickhouse …` running ingest, consumer and query in one process.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use uuid::Uuid;

use crate::client::clip;

pub(crate) const TOPIC: &str = "heddle.calls";
pub(crate) const DLQ_TOPIC: &str = "heddle.calls.dlq";
pub(crate) const PARTITIONS: u32 = 3;

/// What to start.
pub(crate) struct StackConfig<'a> {
    pub(crate) heddle_bin: &'a Path,
    pub(crate) tansu_bin: &'a Path,
    pub(crate) python: &'a Path,
    pub(crate) adapter: &'a Path,
    /// A real ClickHouse instead of the adapter (heddle gets a fresh database on it).
    pub(crate) clickhouse_url: Option<&'a str>,
    /// With `clickhouse_url`: this database instead of a fresh one (then it is not dropped).
    pub(crate) clickhouse_database: Option<&'a str>,
    pub(crate) key: &'a str,
    pub(crate) batch_records: Option<u64>,
    pub(crate) batch_wait_ms: Option<u64>,
    pub(crate) keep: bool,
}

/// One child process, killed when dropped; its output goes to `log`.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) struct Stack {
    // Field order is drop order: heddle first, then ClickHouse, then the broker.
    heddle: Proc,
    clickhouse: Option<Proc>,
    tansu: Proc,
    pub(crate) url: String,
    /// heddle's OTLP/gRPC address (`None` if it did not print one).
    pub(crate) grpc_url: Option<String>,
    pub(crate) brokers: String,
    pub(crate) clickhouse_url: String,
    /// The database heddle uses on a real ClickHouse.
    pub(crate) database: Option<String>,
    /// Drop `database` at the end (a fresh one, without --keep-data).
    drop_database: bool,
    /// `SELECT version()` of the ClickHouse in use.
    pub(crate) clickhouse_version: String,
    pub(crate) tansu_version: String,
    // Last: removed after every process is gone (only its Drop matters).
    _dir: TempDir,
}

/// The deployment's directory (broker data, chdb data, logs), removed on drop unless kept.
struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept the deployment's data and logs in {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

impl Stack {
    pub(crate) fn start(cfg: &StackConfig) -> anyhow::Result<Stack> {
        for (bin, hint) in [
            (cfg.heddle_bin, "build it with `cargo build --release` or pass --heddle-bin"),
            (cfg.tansu_bin, "run `bash tests/run.sh` once (it installs tansu), or pass --tansu"),
        ] {
            if !bin.exists() {
                bail!("{} not found: {hint}", bin.display());
            }
        }
        let path =
            std::env::temp_dir().join(format!("heddle-bench-dist-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let guard = TempDir { path: path.clone(), keep: cfg.keep };
        let dir = path.as_path();

        let (tansu, brokers, tansu_version) = start_tansu(cfg.tansu_bin, dir)?;

        // ClickHouse.
        let (clickhouse, clickhouse_url, database) = match cfg.clickhouse_url {
            Some(url) => {
                let db = cfg.clickhouse_database.map_or_else(
                    || format!("heddle_bench_{}", &Uuid::new_v4().simple().to_string()[..12]),
                    str::to_owned,
                );
                (None, url.trim_end_matches('/').to_owned(), Some(db))
            }
            None => {
                if !cfg.adapter.exists() {
                    bail!(
                        "{} not found: run from the repository root or pass --clickhouse-adapter",
                        cfg.adapter.display()
                    );
                }
                let mut cmd = Command::new(cfg.python);
                cmd.arg(cfg.adapter).arg("--data-dir").arg(dir.join("chdb"));
                let (proc, url) =
                    spawn("ClickHouse adapter", cmd, &dir.join("clickhouse.log"), true)
                        .with_context(|| {
                            format!(
                                "starting the ClickHouse adapter with {} (needs chdb: set \
                         HEDDLE_TEST_PYTHON or --python to the test venv's python)",
                                cfg.python.display()
                            )
                        })?;
                let url = url.first().cloned().context("the adapter's URL")?;
                (Some(proc), url, None)
            }
        };
        let clickhouse_version = clickhouse_query(&clickhouse_url, "SELECT version()")
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|e| format!("unknown ({e:#})"));

        // heddle, every role in one process.
        let mut cmd = Command::new(cfg.heddle_bin);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--otlp-grpc-listen", "127.0.0.1:0"]);
        cmd.args(["--kafka", &brokers])
            .args(["--clickhouse", &clickhouse_url, "--api-key", cfg.key])
            .env("RUST_LOG", "info,tower_http=warn");
        if let Some(db) = &database {
            cmd.args(["--clickhouse-database", db]);
        }
        if let Some(n) = cfg.batch_records {
            cmd.args(["--batch-records", &n.to_string()]);
        }
        if let Some(n) = cfg.batch_wait_ms {
            cmd.args(["--batch-wait-ms", &n.to_string()]);
        }
        let (heddle, urls) = spawn("heddle", cmd, &dir.join("heddle.log"), true)?;
        let url = urls.first().cloned().context("heddle's URL")?;
        let grpc_url = urls.get(1).cloned();
        Ok(Stack {
            heddle,
            clickhouse,
            tansu,
            url,
            grpc_url,
            brokers,
            clickhouse_url,
            drop_database: database.is_some() && cfg.clickhouse_database.is_none() && !cfg.keep,
            database,
            clickhouse_version,
            tansu_version,
            _dir: guard,
        })
    }

    pub(crate) fn heddle_pid(&self) -> u32 {
        self.heddle.pid()
    }

    pub(crate) fn tansu_pid(&self) -> u32 {
        self.tansu.pid()
    }

    /// The adapter's pid; `None` with a real ClickHouse (its CPU is not measured).
    pub(crate) fn clickhouse_pid(&self) -> Option<u32> {
        self.clickhouse.as_ref().map(Proc::pid)
    }

    pub(crate) fn uses_adapter(&self) -> bool {
        self.clickhouse.is_some()
    }

    /// WARN/ERROR lines of heddle's log and Python tracebacks of the adapter (at most 20).
    pub(crate) fn log_problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .heddle
            .log_text()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .map(|l| format!("heddle: {l}"))
            .collect();
        if let Some(ch) = &self.clickhouse {
            out.extend(
                ch.log_text()
                    .lines()
                    .filter(|l| l.contains("Traceback") || l.contains("Error"))
                    .map(|l| format!("{}: {l}", ch.name)),
            );
        }
        out.truncate(20);
        out
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(db) = &self.database
            && self.drop_database
            && let Err(e) = clickhouse_query(&self.clickhouse_url, &format!("DROP DATABASE {db}"))
        {
            eprintln!("could not drop ClickHouse database {db}: {e:#}");
        }
        // The processes are killed as the fields drop, after this; the directory goes last.
    }
}

/// Starts a tansu broker with its data in `dir/tansu` and creates the call topic and its
/// dead-letter topic. Returns the process, the bootstrap address and tansu's version.
fn start_tansu(bin: &Path, dir: &Path) -> anyhow::Result<(Proc, String, String)> {
    std::fs::create_dir_all(dir.join("tansu"))
        .with_context(|| format!("creating {}", dir.display()))?;
    // tansu resolves the SQLite path against its working directory.
    let port = free_port()?;
    let broker_url = format!("tcp://127.0.0.1:{port}");
    let brokers = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(bin);
    cmd.arg("broker")
        .args(["--listener-url", &broker_url, "--advertised-listener-url", &broker_url])
        .args(["--storage-engine", "sqlite://tansu.db"])
        .current_dir(dir.join("tansu"));
    let tansu = spawn("tansu", cmd, &dir.join("tansu.log"), false)?.0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("tansu did not listen within 30 s; its log:\n{}", clip(&tansu.log_text()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (topic, partitions) in [(TOPIC, PARTITIONS), (DLQ_TOPIC, 1)] {
        let out = Command::new(bin)
            .args(["topic", "create", "--broker", &broker_url, topic])
            .args(["--partitions", &partitions.to_string()])
            .output()
            .context("running tansu topic create")?;
        if !out.status.success() {
            bail!(
                "tansu topic create {topic} failed: {}",
                clip(&String::from_utf8_lossy(&out.stderr))
            );
        }
    }
    let version = Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "tansu (version unknown)".into());
    Ok((tansu, brokers, version))
}

/// The tansu binary: `--tansu` / HEDDLE_TANSU, else where `tests/run.sh` installs it.
pub(crate) fn tansu_path(arg: Option<&Path>) -> PathBuf {
    match arg {
        Some(p) => p.to_owned(),
        None => Path::new(&std::env::var("HOME").unwrap_or_default())
            .join(".cache/heddle-test/tansu-0.6.0/bin/tansu"),
    }
}

/// The ingest role alone: a tansu broker and `heddle ingest --kafka` producing to it, with no
/// consumer (so nothing becomes visible; the role keeps keys and blobs in its own data dir).
pub(crate) struct IngestStack {
    // Field order is drop order: heddle first, then the broker, then the directory.
    heddle: Proc,
    tansu: Proc,
    pub(crate) url: String,
    pub(crate) brokers: String,
    pub(crate) tansu_version: String,
    _dir: TempDir,
}

impl IngestStack {
    pub(crate) fn start(
        heddle_bin: &Path,
        tansu_bin: &Path,
        key: &str,
        keep: bool,
    ) -> anyhow::Result<IngestStack> {
        for (bin, hint) in [
            (heddle_bin, "build it with `cargo build --release` or pass --heddle-bin"),
            (tansu_bin, "run `bash tests/run.sh` once (it installs tansu), or pass --tansu"),
        ] {
            if !bin.exists() {
                bail!("{} not found: {hint}", bin.display());
            }
        }
        let path =
            std::env::temp_dir().join(format!("heddle-bench-ingest-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let guard = TempDir { path: path.clone(), keep };
        let (tansu, brokers, tansu_version) = start_tansu(tansu_bin, &path)?;
        let mut cmd = Command::new(heddle_bin);
        cmd.args(["ingest", "--listen", "127.0.0.1:0", "--otlp-grpc-listen", "127.0.0.1:0"])
            .args(["--kafka", &brokers, "--api-key", key, "--data-dir"])
            .arg(path.join("data"))
            .env("RUST_LOG", "info,tower_http=warn");
        let (heddle, urls) = spawn("heddle", cmd, &path.join("heddle.log"), true)?;
        let url = urls.first().cloned().context("heddle's URL")?;
        Ok(IngestStack { heddle, tansu, url, brokers, tansu_version, _dir: guard })
    }

    pub(crate) fn heddle_pid(&self) -> u32 {
        self.heddle.pid()
    }

    pub(crate) fn tansu_pid(&self) -> u32 {
        self.tansu.pid()
    }

    /// WARN/ERROR lines of heddle's log (at most 20).
    pub(crate) fn log_problems(&self) -> Vec<String> {
        self.heddle
            .log_text()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .take(20)
            .map(str::to_owned)
            .collect()
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `cmd` with stderr (and stdout, unless `announce`) appended to `log`. With `announce`,
/// waits for a stdout line "... listening on URL" and returns its URL, followed by the URL of a
/// second such line if one comes within a second (heddle's OTLP/gRPC address); stdout keeps
/// being drained.
fn spawn(
    name: &'static str,
    mut cmd: Command,
    log: &Path,
    announce: bool,
) -> anyhow::Result<(Proc, Vec<String>)> {
    let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null()).stderr(file.try_clone()?);
    cmd.stdout(if announce { Stdio::piped() } else { Stdio::from(file) });
    let mut child = cmd.spawn().with_context(|| format!("starting {name}"))?;
    let stdout = if announce { child.stdout.take() } else { None };
    let proc = Proc { name, child, log: log.to_owned() };
    let Some(stdout) = stdout else { return Ok((proc, Vec::new())) };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some((_, rest)) = line.split_once(" listening on ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => {
            let mut urls = vec![url];
            urls.extend(rx.recv_timeout(Duration::from_secs(1)).ok());
            Ok((proc, urls))
        }
        Err(_) => bail!("{name} did not print its address within 60 s; its log:\n{}", {
            let text = proc.log_text();
            clip(&text[text.len().saturating_sub(2000)..])
        }),
    }
}

/// One statement over ClickHouse's HTTP interface (user and password from the same environment
/// variables heddle reads), answering the body text.
fn clickhouse_query(url: &str, sql: &str) -> anyhow::Result<String> {
    let user = std::env::var("HEDDLE_CLICKHOUSE_USER").unwrap_or_else(|_| "default".into());
    let password = std::env::var("HEDDLE_CLICKHOUSE_PASSWORD").unwrap_or_default();
    // A blocking call outside the runtime's async context: use a small runtime of its own.
    let url = url.to_owned();
    let sql = sql.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let resp = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(30))
                .build()?
                .post(format!("{url}/"))
                .basic_auth(user, Some(password))
                .body(sql)
                .send()
                .await?;
            let status = resp.status();
            let text = resp.text().await?;
            if !status.is_success() {
                bail!("HTTP {status}: {}", clip(&text));
            }
            Ok(text)
        })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the ClickHouse query thread panicked"))?
}
