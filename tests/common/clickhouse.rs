//! Real backing services for tests: the ClickHouse engine behind its HTTP interface (chdb and
//! `tests/support/clickhouse_http.py`, or a real server named by `CLICKHOUSE_URL`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The Python that has chdb (the test runner's venv): `HEDDLE_TEST_PYTHON`.
fn test_python() -> String {
    std::env::var("HEDDLE_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "HEDDLE_TEST_PYTHON is not set: run the suite with `bash tests/run.sh`, which creates \
             the venv with chdb, or set CLICKHOUSE_URL to a ClickHouse server"
        )
    })
}

/// A ClickHouse HTTP endpoint for one test: a fresh chdb-backed adapter on a free port, or the
/// server named by `CLICKHOUSE_URL` (then the test must use its own database names;
/// `database` is a fresh one to use).
pub struct ClickHouse {
    pub url: String,
    /// With `CLICKHOUSE_URL`: a database name unique to this test (heddle creates it).
    pub database: Option<String>,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

impl ClickHouse {
    pub fn start() -> ClickHouse {
        if let Ok(url) = std::env::var("CLICKHOUSE_URL") {
            let database = format!("heddle_test_{}", uuid::Uuid::new_v4().simple());
            return ClickHouse { url, database: Some(database), child: None, _dir: None };
        }
        ClickHouse::start_local()
    }

    /// Always the local chdb adapter (fault tests stop and restart it).
    pub fn start_local() -> ClickHouse {
        let dir = tempfile::tempdir().expect("tempdir");
        let (child, url) = spawn_adapter(dir.path(), 0);
        ClickHouse { url, database: None, child: Some(child), _dir: Some(dir) }
    }

    /// Stops the local adapter (SIGKILL); its data stays on disk.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts a stopped local adapter on the same port and data.
    pub fn resume(&mut self) {
        let dir = self._dir.as_ref().expect("only a local adapter can be resumed").path();
        let port = self.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
        let (child, url) = spawn_adapter(dir, port);
        assert_eq!(url, self.url, "the adapter came back on another address");
        self.child = Some(child);
    }
}

/// Starts the adapter on `dir/chdb` (port 0 = any free port); returns it and its URL.
fn spawn_adapter(dir: &std::path::Path, port: u16) -> (Child, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/clickhouse_http.py");
    let mut child = Command::new(test_python())
        .arg(script)
        .arg("--data-dir")
        .arg(dir.join("chdb"))
        .args(["--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the ClickHouse HTTP adapter");
    let url =
        super::announced_url(&mut child, "clickhouse-http listening on ").unwrap_or_else(|| {
            let _ = child.kill();
            panic!("the ClickHouse HTTP adapter did not start")
        });
    (child, url)
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
