//! HTTP: the read/count calls on the server's API and the concurrent request sender.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

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
}

#[derive(Default)]
pub(crate) struct Outcome {
    pub(crate) wall: Duration,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) ok_requests: usize,
    pub(crate) ok_calls: usize,
    pub(crate) bytes_sent: u64,
    failures: Vec<String>,
}

impl Outcome {
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

/// Sends every job to `url` from `concurrency` tasks pulling from one queue; no retries.
pub(crate) async fn send_all(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    jobs: Vec<Job>,
    concurrency: usize,
) -> Outcome {
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let queue = queue.clone();
            let client = client.clone();
            let url = url.to_owned();
            let key = key.map(str::to_owned);
            tokio::spawn(async move {
                let mut out = Outcome::default();
                loop {
                    let next = queue.lock().expect("job queue").next();
                    let Some(job) = next else { break };
                    let t = Instant::now();
                    let req = match job.body {
                        Some(body) => {
                            out.bytes_sent += body.len() as u64;
                            let req = client
                                .post(&url)
                                .header(CONTENT_TYPE, "application/json")
                                .header(ACCEPT, "application/json")
                                .body(body);
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
                    match res {
                        Ok((status, _)) if status.is_success() => {
                            out.latencies.push(elapsed);
                            out.ok_requests += 1;
                            out.ok_calls += job.calls;
                        }
                        Ok((status, body)) => out.failures.push(format!(
                            "HTTP {status}: {}",
                            clip(&String::from_utf8_lossy(&body))
                        )),
                        Err(e) => out.failures.push(format!("transport error: {e}")),
                    }
                }
                out
            })
        })
        .collect();
    let mut total = Outcome::default();
    for task in tasks {
        match task.await {
            Ok(out) => {
                total.latencies.extend(out.latencies);
                total.ok_requests += out.ok_requests;
                total.ok_calls += out.ok_calls;
                total.bytes_sent += out.bytes_sent;
                total.failures.extend(out.failures);
            }
            Err(e) => total.failures.push(format!("sender task died: {e}")),
        }
    }
    total.wall = start.elapsed();
    total.latencies.sort_unstable();
    total
}
