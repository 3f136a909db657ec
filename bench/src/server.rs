//! The server the bench starts itself.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use uuid::Uuid;

use crate::Args;
use crate::client::clip;

pub(crate) struct Server {
    child: Child,
    dir: PathBuf,
    keep: bool,
    /// Where the server's OTLP/gRPC listens (`None` if it did not say within a few seconds).
    pub(crate) grpc_url: Option<String>,
}

impl Server {
    pub(crate) fn start(bin: &Path, key: &str, keep: bool) -> anyhow::Result<(Server, String)> {
        if !bin.exists() {
            bail!(
                "{} not found: build it with `cargo build --release`, pass --heddle-bin, or \
                 point --url at a running server",
                bin.display()
            );
        }
        let dir = std::env::temp_dir().join(format!("heddle-bench-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = File::create(dir.join("server.log"))?;
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--otlp-grpc-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .arg("--api-key")
            .arg(key)
            .env("RUST_LOG", "info,tower_http=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut server = Server { child, dir, keep, grpc_url: None };
        let (tx, rx) = std::sync::mpsc::channel();
        let (grpc_tx, grpc_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Keeps draining stdout so the server never blocks on a full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let url =
                    |rest: &str| rest.split_whitespace().next().unwrap_or_default().to_owned();
                if let Some(rest) = line.strip_prefix("heddle listening on ") {
                    let _ = tx.send(url(rest));
                } else if let Some(rest) = line.strip_prefix("heddle OTLP/gRPC listening on ") {
                    let _ = grpc_tx.send(url(rest));
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => {
                // Printed right after the HTTP address by servers that have OTLP/gRPC.
                server.grpc_url = grpc_rx.recv_timeout(Duration::from_secs(5)).ok();
                Ok((server, url))
            }
            Err(_) => {
                let log =
                    std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default();
                bail!(
                    "{} did not print its address within 30 s; its log:\n{}",
                    bin.display(),
                    clip(&log)
                )
            }
        }
    }

    /// The server a mode measures: `--url` (with `--api-key`) when given, else one started from
    /// `bin` on a fresh data dir. Returns it (if started), its base URL and the API key.
    pub(crate) fn start_or_connect(
        args: &Args,
        bin: &Path,
    ) -> anyhow::Result<(Option<Server>, String, String)> {
        if let Some(url) = &args.url {
            let key = args.api_key.clone().context("--url needs --api-key (or HEDDLE_API_KEY)")?;
            return Ok((None, url.trim_end_matches('/').to_owned(), key));
        }
        let key =
            args.api_key.clone().unwrap_or_else(|| format!("bench-{}", Uuid::new_v4().simple()));
        let (server, url) = Server::start(bin, &key, args.keep_data)?;
        eprintln!(
            "started {} at {url}, OTLP/gRPC at {} (pid {})",
            bin.display(),
            server.grpc_url.as_deref().unwrap_or("(none announced)"),
            server.pid()
        );
        Ok((Some(server), url, key))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// WARN and ERROR lines of the server's log (at most 20).
    pub(crate) fn log_problems(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .take(20)
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.keep {
            eprintln!("kept the server's data and log in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
