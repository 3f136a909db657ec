//! Support for the HTTP integration tests: starts the real `heddle` binary on a free port with
//! a fresh data directory and a random admin key, and offers small authed request helpers.
//! Each test starts its own server (startup is a few milliseconds); it is killed on drop.
//!
//! `HEDDLE_TEST_STORE` picks the store every server runs on, so the same suites check every
//! backend:
//! - `sqlite` (default): the embedded store;
//! - `clickhouse`: each server gets its own ClickHouse (see [`clickhouse::ClickHouse`]), kept as
//!   long as the server;
//! - `distributed` (or `kafka`): the real distributed write path in one process — each server
//!   gets its own tansu broker and ClickHouse and runs `heddle serve --kafka --clickhouse`:
//!   ingest produces to Kafka, the in-process consumer batches into ClickHouse, queries read
//!   ClickHouse. Test clients wait after each acknowledged ingest request until the consumer
//!   has stored it (see [`visibility`]).

#![allow(dead_code)]

pub mod clickhouse;
pub mod kafka;
pub mod visibility;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_heddle");

/// The store the test servers run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Sqlite,
    ClickHouse,
    /// Kafka (tansu) for the calls' write path, ClickHouse for everything else and all reads.
    Distributed,
}

/// `HEDDLE_TEST_STORE`: `sqlite` (default), `clickhouse` or `distributed` (alias `kafka`).
pub fn store_mode() -> StoreMode {
    match std::env::var("HEDDLE_TEST_STORE").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => StoreMode::Sqlite,
        Ok("clickhouse") => StoreMode::ClickHouse,
        Ok("distributed") | Ok("kafka") => StoreMode::Distributed,
        Ok(other) => panic!(
            "HEDDLE_TEST_STORE={other:?}: expected \"sqlite\", \"clickhouse\" or \"distributed\""
        ),
    }
}

/// The consumer group of the test servers (passed explicitly; the visibility barrier reads its
/// offsets).
const CONSUMER_GROUP: &str = "heddle-consumer";
/// The consumer's batch time limit in the tests (default 250 ms): shorter, so the visibility
/// barrier after each write waits less. Row and byte limits stay at their defaults.
const TEST_BATCH_WAIT_MS: &str = "20";

pub struct Server {
    pub url: String,
    /// OTLP/gRPC endpoint (`http://127.0.0.1:PORT`).
    pub grpc_url: String,
    pub admin_key: String,
    pub dir: tempfile::TempDir,
    child: Child,
    mode: StoreMode,
    /// The store flags every `heddle` command of this server gets.
    store_args: Vec<String>,
    /// The flags only `heddle serve` gets (Kafka, and the test's extra arguments).
    serve_args: Vec<String>,
    /// The soft open-files limit the process starts with, when not inherited.
    open_files: Option<u64>,
    /// The server's ClickHouse (ClickHouse and distributed modes), dropped after the server.
    clickhouse: Option<clickhouse::ClickHouse>,
    /// The server's Kafka broker (distributed mode), dropped after the server.
    kafka: Option<kafka::Kafka>,
    /// Distributed mode: how clients of the running process wait for their writes to be stored.
    visibility: Option<Arc<visibility::Visibility>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn basic(key: &str) -> String {
    let pair = format!("api:{key}");
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts `heddle serve` with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_inner(extra, None)
    }

    /// Starts `heddle serve` with its soft open-files limit lowered to `soft` (the hard limit
    /// inherited), as a service manager with a low default would start it.
    pub fn start_with_open_files_limit(soft: u64, extra: &[&str]) -> Server {
        Server::start_inner(extra, Some(soft))
    }

    fn start_inner(extra: &[&str], open_files: Option<u64>) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let admin_key = format!("test-admin-{}", uuid::Uuid::new_v4());
        let mode = store_mode();
        let mut store_args = vec!["--data-dir".to_owned(), path_arg(&dir.path().join("data"))];
        let mut serve_args = Vec::new();
        let clickhouse = match mode {
            StoreMode::Sqlite => None,
            StoreMode::ClickHouse | StoreMode::Distributed => {
                let ch = clickhouse::ClickHouse::start();
                store_args.extend(["--clickhouse".to_owned(), ch.url.clone()]);
                if let Some(db) = &ch.database {
                    store_args.extend(["--clickhouse-database".to_owned(), db.clone()]);
                }
                Some(ch)
            }
        };
        let kafka = (mode == StoreMode::Distributed).then(|| {
            let k = kafka::Kafka::start();
            serve_args.extend(
                [
                    "--kafka",
                    &k.brokers,
                    "--consumer-group",
                    CONSUMER_GROUP,
                    "--batch-wait-ms",
                    TEST_BATCH_WAIT_MS,
                ]
                .map(str::to_owned),
            );
            k
        });
        serve_args.extend(extra.iter().map(|a| (*a).to_owned()));
        let (child, url, grpc_url) =
            spawn(dir.path(), &admin_key, &store_args, &serve_args, open_files);
        let mut server = Server {
            url,
            grpc_url,
            admin_key,
            dir,
            child,
            mode,
            store_args,
            serve_args,
            open_files,
            clickhouse,
            kafka,
            visibility: None,
        };
        server.visibility = server.new_visibility(false);
        server
    }

    pub fn store_mode(&self) -> StoreMode {
        self.mode
    }

    /// The server's ClickHouse (ClickHouse and distributed modes): its URL and database.
    pub fn clickhouse(&self) -> Option<(&str, &str)> {
        let ch = self.clickhouse.as_ref()?;
        Some((&ch.url, ch.database.as_deref().unwrap_or("default")))
    }

    /// The server's Kafka bootstrap servers (distributed mode).
    pub fn kafka_brokers(&self) -> Option<&str> {
        self.kafka.as_ref().map(|k| k.brokers.as_str())
    }

    /// The barrier for the current process (distributed mode only).
    fn new_visibility(&self, restarted: bool) -> Option<Arc<visibility::Visibility>> {
        let kafka = self.kafka.as_ref()?;
        Some(Arc::new(visibility::Visibility::new(
            &self.url,
            &self.admin_key,
            &kafka.brokers,
            CONSUMER_GROUP,
            restarted,
        )))
    }

    /// Kills the process with SIGKILL (no shutdown of any kind) and starts a new one on the same
    /// data directory with the same key and flags. In distributed mode this returns once the new
    /// process's consumer has stored every record in Kafka (including those the killed one had
    /// not committed), so what was acknowledged before the kill is readable.
    pub fn kill_and_restart(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaping the killed server");
        let (child, url, grpc_url) = spawn(
            self.dir.path(),
            &self.admin_key,
            &self.store_args,
            &self.serve_args,
            self.open_files,
        );
        self.child = child;
        self.url = url;
        self.grpc_url = grpc_url;
        self.visibility = self.new_visibility(true);
        if let Some(v) = &self.visibility {
            v.wait_caught_up_blocking();
        }
    }

    /// Waits until every write acknowledged so far is stored (a no-op outside distributed
    /// mode). Clients of this server do it after each acknowledged ingest request by themselves.
    pub async fn wait_visible(&self) {
        if let Some(v) = &self.visibility {
            v.wait().await;
        }
    }

    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A memory field of `/proc/<pid>/status` in KiB: `VmRSS` (resident now) or `VmHWM` (the
    /// peak so far).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("reading the server's /proc status");
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {field} in /proc status"));
        line.trim().trim_end_matches("kB").trim().parse().expect("a number of kB")
    }

    /// The server's `/proc/<pid>/limits`.
    pub fn proc_limits(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/limits", self.pid()))
            .expect("reading the server's /proc limits")
    }

    /// `heddle keys create --entity NAME` against this server's store; returns the key.
    pub fn create_entity_key(&self, entity: &str) -> String {
        create_entity_key(&self.store_args, entity)
    }

    /// `heddle keys ARGS...` against this server's store.
    pub fn keys(&self, args: &[&str]) -> std::process::Output {
        heddle_keys(&self.store_args, args)
    }

    /// A client authenticated with the admin key.
    pub fn admin(&self) -> Api {
        self.client(Some(&self.admin_key))
    }

    /// A client authenticated with `key` (Basic), or without credentials.
    pub fn client(&self, key: Option<&str>) -> Api {
        let mut api = Api::new(&self.url, key.map(basic));
        api.visibility = self.visibility.clone();
        api
    }

    /// A client that sends this exact `Authorization` header value.
    pub fn client_with_auth(&self, header: &str) -> Api {
        let mut api = self.client(None);
        api.auth = Some(header.to_owned());
        api
    }
}

/// Waits (up to 60 s) for the child to print `<prefix><url> ...` on stdout and returns the URL.
/// Stdout keeps being drained afterwards so the child never blocks on a full pipe.
pub fn announced_url(child: &mut Child, prefix: &'static str) -> Option<String> {
    announced_urls(child, &[prefix]).map(|mut urls| urls.remove(0))
}

/// [`announced_url`] for several lines: the URL after each prefix, in the order given.
pub fn announced_urls(child: &mut Child, prefixes: &[&'static str]) -> Option<Vec<String>> {
    let stdout = child.stdout.take().expect("piped stdout");
    let prefixes = prefixes.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut found: Vec<Option<String>> = vec![None; prefixes.len()];
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            for (i, prefix) in prefixes.iter().enumerate() {
                let url = line.strip_prefix(prefix).and_then(|rest| rest.split_whitespace().next());
                if let Some(url) = url {
                    found[i].get_or_insert_with(|| url.to_owned());
                }
            }
            if found.iter().all(Option::is_some)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(found.iter().flatten().cloned().collect::<Vec<_>>());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).ok()
}

fn path_arg(p: &Path) -> String {
    p.to_str().expect("UTF-8 temp path").to_owned()
}

/// Starts `heddle serve` on the store named by `store_args`, logging to `dir/server.log`;
/// returns the process, its URL and its OTLP/gRPC URL, read from the addresses it prints.
fn spawn(
    dir: &Path,
    admin_key: &str,
    store_args: &[String],
    extra: &[String],
    open_files: Option<u64>,
) -> (Child, String, String) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .expect("log file");
    let mut command = Command::new(BIN);
    if let Some(soft) = open_files {
        use std::os::unix::process::CommandExt;
        let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
        // SAFETY: setrlimit is async-signal-safe, and the closure allocates nothing.
        unsafe {
            command.pre_exec(move || rlimit::setrlimit(rlimit::Resource::NOFILE, soft, hard));
        }
    }
    let mut child = command
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--api-key", admin_key])
        .args(["--otlp-grpc-listen", "127.0.0.1:0"])
        .args(store_args)
        .args(extra)
        .env_remove("HEDDLE_API_KEY")
        .env_remove("HEDDLE_MAX_BODY_BYTES")
        .env_remove("HEDDLE_DATA_DIR")
        .env_remove("HEDDLE_LISTEN")
        .env_remove("HEDDLE_CLICKHOUSE_URL")
        .env_remove("HEDDLE_CLICKHOUSE_DATABASE")
        .env_remove("HEDDLE_KAFKA_BROKERS")
        .env_remove("HEDDLE_BATCH_WAIT_MS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawning heddle");
    let prefixes = ["heddle listening on ", "heddle OTLP/gRPC listening on "];
    let mut urls = announced_urls(&mut child, &prefixes).unwrap_or_else(|| {
        let _ = child.kill();
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        panic!("heddle did not print its listening addresses; log:\n{log}");
    });
    let (url, grpc_url) = (urls.remove(0), urls.remove(0));
    assert!(url.starts_with("http://127.0.0.1:"), "unexpected url {url}");
    (child, url, grpc_url)
}

/// `heddle keys ARGS...` with the given store flags.
pub fn heddle_keys(store_args: &[String], args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("keys")
        .args(args)
        .args(store_args)
        .env_remove("HEDDLE_DATA_DIR")
        .env_remove("HEDDLE_CLICKHOUSE_URL")
        .env_remove("HEDDLE_CLICKHOUSE_DATABASE")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("running heddle keys")
}

/// `heddle keys create --entity NAME` with the given store flags; returns the key.
pub fn create_entity_key(store_args: &[String], entity: &str) -> String {
    let out = heddle_keys(store_args, &["create", "--entity", entity]);
    assert!(out.status.success(), "keys create failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let key = stdout.lines().rev().find(|l| !l.trim().is_empty()).expect("a key line");
    key.trim().to_owned()
}

#[derive(Clone)]
pub struct Api {
    pub url: String,
    pub auth: Option<String>,
    pub http: reqwest::Client,
    /// Distributed mode: after an ingest request is acknowledged, `send` waits here until the
    /// write is stored, so the next read sees it.
    pub visibility: Option<Arc<visibility::Visibility>>,
}

/// A fully read response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body text if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {}: {}", self.status, self.text()))
    }

    /// Asserts a 2xx status and returns the JSON body.
    #[track_caller]
    pub fn ok(&self) -> Value {
        assert!(
            (200..300).contains(&self.status),
            "expected success, got {}: {}",
            self.status,
            self.text()
        );
        self.json()
    }

    /// Asserts `status` and a JSON error body with a non-empty string `reason`; returns it.
    #[track_caller]
    pub fn err(&self, status: u16) -> String {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text());
        assert!(
            self.content_type.starts_with("application/json"),
            "error content type {:?}: {}",
            self.content_type,
            self.text()
        );
        let body = self.json();
        let reason = body["reason"].as_str().unwrap_or_else(|| panic!("no reason: {body}"));
        assert!(!reason.is_empty(), "empty reason");
        reason.to_owned()
    }

    /// Parses a JSONL body strictly: LF-separated, no blank lines, every line a JSON object.
    #[track_caller]
    pub fn jsonl(&self) -> Vec<Value> {
        assert!(
            (200..300).contains(&self.status),
            "expected success, got {}: {}",
            self.status,
            self.text()
        );
        parse_jsonl(&self.body)
    }
}

#[track_caller]
pub fn parse_jsonl(body: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(body).expect("JSONL is UTF-8");
    assert!(!text.contains('\r'), "JSONL must use LF line ends");
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return Vec::new();
    }
    text.split('\n')
        .map(|line| {
            assert!(!line.trim().is_empty(), "blank line in JSONL body: {text:?}");
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("bad JSONL line {line:?}: {e}"));
            assert!(v.is_object(), "JSONL row is not an object: {line}");
            v
        })
        .collect()
}

impl Api {
    /// A client of `url` sending `auth` as the `Authorization` header, with no visibility
    /// barrier.
    pub fn new(url: &str, auth: Option<String>) -> Api {
        Api {
            url: url.to_owned(),
            auth,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
            visibility: None,
        }
    }

    /// The same endpoint without credentials.
    pub fn client_without_auth(&self) -> Api {
        Api { auth: None, ..self.clone() }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if let Some(auth) = &self.auth {
            r = r.header(reqwest::header::AUTHORIZATION, auth);
        }
        r
    }

    /// Sends a request and reads the answer; panics when that fails. An acknowledged ingest
    /// request returns only once its write is visible (distributed mode).
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let (http, req) = req.build_split();
        let req = req.unwrap_or_else(|e| panic!("building the request: {e:?}"));
        let ingest = visibility::is_ingest_path(req.url().path());
        let resp =
            self.execute(&http, req).await.unwrap_or_else(|e| panic!("request failed: {e:?}"));
        if ingest
            && resp.status == 200
            && let Some(v) = &self.visibility
        {
            v.wait().await;
        }
        resp
    }

    /// Like `send`, but an error when the request or its answer was cut off (server killed),
    /// and without the visibility barrier: it is for requests racing a kill, whose server may
    /// be gone before the write is stored ([`Server::kill_and_restart`] waits for the new
    /// process to store everything acknowledged).
    pub async fn try_send(&self, req: reqwest::RequestBuilder) -> Result<Resp, reqwest::Error> {
        let (http, req) = req.build_split();
        self.execute(&http, req?).await
    }

    async fn execute(
        &self,
        http: &reqwest::Client,
        req: reqwest::Request,
    ) -> Result<Resp, reqwest::Error> {
        let resp = http.execute(req).await?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = resp.bytes().await?.to_vec();
        Ok(Resp { status, content_type, body })
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.send(self.req(reqwest::Method::POST, path).json(body)).await
    }

    pub async fn try_post(&self, path: &str, body: &Value) -> Result<Resp, reqwest::Error> {
        self.try_send(self.req(reqwest::Method::POST, path).json(body)).await
    }

    /// POSTs raw bytes as `application/json` (for malformed bodies).
    pub async fn post_raw(&self, path: &str, body: impl Into<Vec<u8>>) -> Resp {
        let r = self
            .req(reqwest::Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.into());
        self.send(r).await
    }

    pub async fn post_with(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<Vec<u8>>,
    ) -> Resp {
        let r = self
            .req(reqwest::Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.into());
        self.send(r).await
    }

    /// POSTs raw bytes with extra headers (content type, encoding, ...).
    pub async fn post_headers(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Resp {
        let mut r = self.req(reqwest::Method::POST, path).body(body.into());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        self.send(r).await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Resp {
        self.send(self.req(reqwest::Method::PUT, path).json(body)).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(self.req(reqwest::Method::DELETE, path)).await
    }

    /// `/calls/stream_query`, strictly parsed.
    pub async fn stream(&self, body: &Value) -> Vec<Value> {
        self.post("/calls/stream_query", body).await.jsonl()
    }

    pub async fn count(&self, body: &Value) -> u64 {
        let v = self.post("/calls/query_stats", body).await.ok();
        v["count"].as_u64().unwrap_or_else(|| panic!("no count in {v}"))
    }

    /// `/call/read` → the `call` member (possibly null).
    pub async fn read_call(&self, project: &str, id: &str) -> Value {
        let v = self
            .post("/call/read", &serde_json::json!({"project_id": project, "id": id}))
            .await
            .ok();
        assert!(v.as_object().is_some_and(|o| o.contains_key("call")), "no call member: {v}");
        v["call"].clone()
    }

    /// Uploads a file through `/file/create` with a hand-built multipart body.
    pub async fn file_create(
        &self,
        project: &str,
        name: &str,
        content: &[u8],
        expected_digest: Option<&str>,
    ) -> Resp {
        let (ct, body) = multipart(project, name, content, expected_digest);
        self.post_with("/file/create", &ct, body).await
    }
}

/// A `multipart/form-data` body as the SDK sends it: text fields then the `file` part.
pub fn multipart(
    project: &str,
    name: &str,
    content: &[u8],
    expected_digest: Option<&str>,
) -> (String, Vec<u8>) {
    let boundary = format!("heddle-test-{}", uuid::Uuid::new_v4().simple());
    let mut body = Vec::new();
    let mut field = |n: &str, v: &str| {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{n}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    };
    field("project_id", project);
    if let Some(d) = expected_digest {
        field("expected_digest", d);
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A fresh UUID-ish id, unique per test run.
pub fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The ids of rows, in order.
pub fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter().map(|r| r["id"].as_str().expect("row id").to_owned()).collect()
}

/// Unix seconds of [`T0`].
pub const T0_UNIX: i64 = 1_772_366_400;
/// The time every test call is placed relative to.
pub const T0: &str = "2026-03-01T12:00:00Z";

/// `T0` plus `secs` (< 1 hour), as the SDK writes timestamps (microseconds, `Z`).
pub fn t(secs: f64) -> String {
    let us = (secs * 1e6).round() as i64;
    let (m, s, frac) = (us / 60_000_000, (us % 60_000_000) / 1_000_000, us % 1_000_000);
    format!("2026-03-01T12:{m:02}:{s:02}.{frac:06}Z")
}

/// `base` with the keys of `over` replaced.
pub fn merge(mut base: Value, over: Value) -> Value {
    if let Value::Object(o) = over {
        for (k, v) in o {
            base[k] = v;
        }
    }
    base
}

/// A StartedCall with every key present (nullable ones null), as the SDK sends it.
pub fn started(project: &str, id: &str, over: Value) -> Value {
    merge(
        json!({
            "project_id": project, "id": id, "trace_id": format!("trace-{id}"),
            "op_name": "plain_op", "display_name": null, "parent_id": null, "thread_id": null,
            "turn_id": null, "started_at": t(0.0), "attributes": {}, "inputs": {},
            "otel_dump": null, "wb_user_id": null, "wb_run_id": null, "wb_run_step": null,
        }),
        over,
    )
}

/// An EndedCall with every key present.
pub fn ended(project: &str, id: &str, over: Value) -> Value {
    merge(
        json!({
            "project_id": project, "id": id, "ended_at": t(1.0), "summary": {}, "output": null,
            "exception": null, "trace_id": null, "started_at": null, "is_eval": null,
            "wb_run_step_end": null,
        }),
        over,
    )
}

/// A CompleteCall (start and end flattened) for `/v2/{entity}/{project}/calls/complete`.
pub fn complete(project: &str, id: &str, over: Value) -> Value {
    let mut c = started(project, id, json!({}));
    for (k, v) in ended(project, id, json!({})).as_object().unwrap() {
        if !c.as_object().unwrap().contains_key(k) {
            c[k] = v.clone();
        }
    }
    c.as_object_mut().unwrap().remove("is_eval");
    merge(c, over)
}

impl Api {
    /// Sends CompleteCalls through `/v2/{entity}/{project}/calls/complete` and checks success.
    pub async fn complete_calls(&self, project: &str, batch: Vec<Value>) -> Value {
        self.post(&format!("/v2/{project}/calls/complete"), &json!({ "batch": batch })).await.ok()
    }

    pub async fn call_start(&self, start: Value) -> Value {
        self.post("/call/start", &json!({ "start": start })).await.ok()
    }

    pub async fn call_end(&self, end: Value) -> Value {
        self.post("/call/end", &json!({ "end": end })).await.ok()
    }
}
