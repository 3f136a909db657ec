//! HTTP: the read/count calls on the server's API and the concurrent request sender.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) client: reqwest::Client,
    pub(crate) base: String,
    pub(crate) key: String,
}

pub(crate) struct StreamRead {
    pub(crate) wall: Duration,
    pub(crate) ttfb: Duration,
    pub(crate) lines: usize,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

impl Api {
    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<reqwest::Response> {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("POST {path} answered HTTP {status}: {}", clip(&text));
        }
        Ok(resp)
    }

    pub(crate) async fn version(&self) -> anyhow::Result<String> {
        let resp = self.client.get(format!("{}/version", self.base)).bearer_auth(&self.key);
        let v: Value = resp.send().await?.error_for_status()?.json().await?;
        Ok(v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
    }

    pub(crate) async fn count(&self, project: &str) -> anyhow::Result<u64> {
        let body = json!({"project_id": project, "filter": null, "query": null, "limit": null});
        let v: Value = self.post("/calls/query_stats", &body).await?.json().await?;
        let count = &v["count"];
        count
            .as_u64()
            .or_else(|| count.to_string().parse().ok())
            .with_context(|| format!("calls/query_stats answered without a count: {v}"))
    }

    /// The ids among `ids` that `calls/stream_query` returns now (filter by call ids, id column).
    pub(crate) async fn present(&self, project: &str, ids: &[&str]) -> anyhow::Result<Vec<String>> {
        let body = json!({"project_id": project, "filter": {"call_ids": ids}, "columns": ["id"],
                          "limit": null});
        let text = self.post("/calls/stream_query", &body).await?.text().await?;
        let mut found = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let row: Value = serde_json::from_str(line)
                .with_context(|| format!("calls/stream_query line {}", clip(line)))?;
            match row["id"].as_str() {
                Some(id) => found.push(id.to_owned()),
                None => bail!("calls/stream_query row without an id: {}", clip(line)),
            }
        }
        Ok(found)
    }

    /// The Prometheus text of `GET /metrics`.
    pub(crate) async fn metrics(&self) -> anyhow::Result<String> {
        let resp = self.client.get(format!("{}/metrics", self.base)).bearer_auth(&self.key);
        let resp = resp.send().await.context("GET /metrics")?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("GET /metrics answered HTTP {status}: {}", clip(&text));
        }
        Ok(text)
    }

    pub(crate) async fn stream_all(&self, project: &str) -> anyhow::Result<StreamRead> {
        let body = json!({"project_id": project, "limit": null});
        let t = Instant::now();
        let resp = self
            .client
            .post(format!("{}/calls/stream_query", self.base))
            .bearer_auth(&self.key)
            .header(ACCEPT, "application/jsonl")
            .json(&body)
            .send()
            .await
            .context("POST /calls/stream_query")?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("POST /calls/stream_query answered HTTP {status}: {}", clip(&text));
        }
        let content_type =
            resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let mut ttfb = None;
        let mut body = Vec::with_capacity(64 << 20);
        let mut newlines = 0;
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.context("reading the calls/stream_query body")?;
            ttfb.get_or_insert_with(|| t.elapsed());
            newlines += chunk.iter().filter(|&&b| b == b'\n').count();
            body.extend_from_slice(&chunk);
        }
        let wall = t.elapsed();
        let lines = newlines + usize::from(!body.is_empty() && body.last() != Some(&b'\n'));
        Ok(StreamRead { wall, ttfb: ttfb.unwrap_or(wall), lines, content_type, body })
    }
}

pub(crate) fn clip(s: &str) -> String {
    const MAX: usize = 500;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

pub(crate) struct Job {
    /// POST body; `None` sends a GET without auth.
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) calls: usize,
    /// One call id of the body, whose visibility lag is measured in distributed mode.
    pub(crate) probe: Option<String>,
}

/// Where `send_all` reports each acknowledged request's probe id and the moment of its answer.
pub(crate) type AckSink = tokio::sync::mpsc::UnboundedSender<(String, Instant)>;

#[derive(Default)]
pub(crate) struct Outcome {
    pub(crate) wall: Duration,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) ok_requests: usize,
    pub(crate) ok_calls: usize,
    pub(crate) bytes_sent: u64,
    pub(crate) failures: Vec<String>,
}

impl Outcome {
    /// An outcome that failed before sending anything.
    pub(crate) fn failed(reason: String) -> Outcome {
        Outcome { failures: vec![reason], ..Outcome::default() }
    }

    /// Counts one answered request carrying `items` calls or spans: its latency when it
    /// succeeded, the reason otherwise. Returns whether it succeeded.
    pub(crate) fn record(
        &mut self,
        res: Result<(), String>,
        elapsed: Duration,
        items: usize,
    ) -> bool {
        match res {
            Ok(()) => {
                self.latencies.push(elapsed);
                self.ok_requests += 1;
                self.ok_calls += items;
                true
            }
            Err(e) => {
                self.failures.push(e);
                false
            }
        }
    }

    /// The sender tasks' outcomes as one, timed from `start`, latencies sorted.
    pub(crate) async fn join(
        tasks: Vec<tokio::task::JoinHandle<Outcome>>,
        start: Instant,
    ) -> Outcome {
        let mut total = Outcome::default();
        for task in tasks {
            match task.await {
                Ok(out) => total.absorb(out),
                Err(e) => total.failures.push(format!("sender task died: {e}")),
            }
        }
        total.wall = start.elapsed();
        total.latencies.sort_unstable();
        total
    }

    /// Adds another run's requests to this one (wall time and sorting are left to the caller).
    pub(crate) fn absorb(&mut self, out: Outcome) {
        self.latencies.extend(out.latencies);
        self.ok_requests += out.ok_requests;
        self.ok_calls += out.ok_calls;
        self.bytes_sent += out.bytes_sent;
        self.failures.extend(out.failures);
    }

    pub(crate) fn check(&self, phase: &str, problems: &mut Vec<String>) {
        if self.failures.is_empty() {
            return;
        }
        let mut distinct: Vec<(&String, usize)> = Vec::new();
        for f in &self.failures {
            match distinct.iter_mut().find(|(d, _)| *d == f) {
                Some((_, n)) => *n += 1,
                None => distinct.push((f, 1)),
            }
        }
        for (f, n) in distinct.iter().take(10) {
            problems.push(format!("{phase}: {n} request(s) failed with {f}"));
        }
        if distinct.len() > 10 {
            problems.push(format!("{phase}: {} more distinct failures", distinct.len() - 10));
        }
    }
}

/// Judges the body of a 2xx answer; an `Err` counts the request as failed with that text.
pub(crate) type AnswerCheck = fn(&[u8]) -> Result<(), String>;

/// How `send_posts` sends its bodies and judges the answers.
pub(crate) struct Post {
    pub(crate) content_type: &'static str,
    pub(crate) accept: &'static str,
    /// Further headers on every request (e.g. `Content-Encoding`, `project_id`).
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) check: Option<AnswerCheck>,
}

impl Post {
    /// The call endpoints' JSON bodies.
    pub(crate) fn json() -> Post {
        Post {
            content_type: "application/json",
            accept: "application/json",
            headers: Vec::new(),
            check: None,
        }
    }
}

/// Sends every job to `url` from `concurrency` tasks pulling from one queue; no retries. With
/// `acks`, the probe id of every acknowledged job is sent there with the time its answer arrived.
pub(crate) async fn send_all(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    jobs: Vec<Job>,
    concurrency: usize,
    acks: Option<&AckSink>,
) -> Outcome {
    send_posts(client, url, key, &Post::json(), jobs, concurrency, acks).await
}

/// [`send_all`] with the body format and answer check of `post`.
pub(crate) async fn send_posts(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    post: &Post,
    jobs: Vec<Job>,
    concurrency: usize,
    acks: Option<&AckSink>,
) -> Outcome {
    let (tx, rx) = tokio::sync::mpsc::channel(jobs.len().max(1));
    for job in jobs {
        let _ = tx.try_send(job);
    }
    drop(tx);
    send_from(client, url, key, post, rx, concurrency, acks).await
}

/// [`send_posts`] of jobs that arrive on `jobs` while sending (e.g. generated on the fly), until
/// the channel closes.
pub(crate) async fn send_from(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    post: &Post,
    jobs: tokio::sync::mpsc::Receiver<Job>,
    concurrency: usize,
    acks: Option<&AckSink>,
) -> Outcome {
    let queue = Arc::new(tokio::sync::Mutex::new(jobs));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let queue = queue.clone();
            let client = client.clone();
            let url = url.to_owned();
            let key = key.map(str::to_owned);
            let acks = acks.cloned();
            let (content_type, accept, check) = (post.content_type, post.accept, post.check);
            let headers = post.headers.clone();
            tokio::spawn(async move {
                let mut out = Outcome::default();
                loop {
                    let next = queue.lock().await.recv().await;
                    let Some(job) = next else { break };
                    let t = Instant::now();
                    let req = match job.body {
                        Some(body) => {
                            out.bytes_sent += body.len() as u64;
                            let mut req = client
                                .post(&url)
                                .header(CONTENT_TYPE, content_type)
                                .header(ACCEPT, accept)
                                .body(body);
                            for (name, value) in &headers {
                                req = req.header(*name, value);
                            }
                            match &key {
                                Some(k) => req.bearer_auth(k),
                                None => req,
                            }
                        }
                        None => client.get(&url),
                    };
                    let res = async {
                        let resp = req.send().await?;
                        let status = resp.status();
                        let body = resp.bytes().await?;
                        Ok::<_, reqwest::Error>((status, body))
                    }
                    .await;
                    let elapsed = t.elapsed();
                    let res = match res {
                        Ok((status, body)) if status.is_success() => {
                            match check.map_or(Ok(()), |check| check(&body)) {
                                Ok(()) => Ok(()),
                                Err(e) => Err(format!("HTTP {status} but {e}")),
                            }
                        }
                        Ok((status, body)) => {
                            Err(format!("HTTP {status}: {}", clip(&String::from_utf8_lossy(&body))))
                        }
                        Err(e) => Err(format!("transport error: {e}")),
                    };
                    if out.record(res, elapsed, job.calls)
                        && let (Some(acks), Some(probe)) = (&acks, job.probe)
                    {
                        let _ = acks.send((probe, t + elapsed));
                    }
                }
                out
            })
        })
        .collect();
    Outcome::join(tasks, start).await
}

/// The bench's HTTP client: no proxy, no Nagle delay, `idle` keep-alive connections per host.
pub(crate) fn http_client(idle: usize, timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(idle)
        .timeout(timeout)
        .build()
}
