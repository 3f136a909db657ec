"""Support code for the real-client conformance tests (imported by conftest.py and the test
modules). Importing it sets the SDK environment BEFORE weave is imported.

SDK environment: see the API reference docs/api/README.md#what-the-weave-sdk-needs,
docs/api/README.md#client-caches, docs/api/service.md#graphql.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests

# ---------------------------------------------------------------------------------------------
# SDK environment. Must be in place BEFORE `import weave`: the Sentry wrapper decides at import
# time whether it is enabled (WANDB_ERROR_REPORTING), and settings are read from the env on
# every access (WEAVE_* override the settings snapshot).
# ---------------------------------------------------------------------------------------------
_TMP_ROOT = Path(tempfile.mkdtemp(prefix="heddle-pytest-"))
_SDK_ENV = {
    # docs/api/README.md#client-caches: never let the persistent response cache hide /obj/create,
    # /file/create, ...
    "WEAVE_USE_SERVER_CACHE": "false",
    "WEAVE_SERVER_CACHE_DIR": str(_TMP_ROOT / "weave-cache"),
    "WANDB_SILENT": "true",
    "WEAVE_PRINT_CALL_LINK": "false",
    # Sentry (weave/telemetry/trace_sentry.py honours WANDB_ERROR_REPORTING).
    "WANDB_ERROR_REPORTING": "false",
    # Don't read the user's ~/.config/wandb settings / netrc-side config.
    "WANDB_CONFIG_DIR": str(_TMP_ROOT / "wandb-config"),
    # No integration patching; nothing here uses integrations.
    "WEAVE_IMPLICITLY_PATCH_INTEGRATIONS": "false",
    # Dropped batches must not be persisted to disk and replayed by a later run.
    "WEAVE_ENABLE_DISK_FALLBACK": "false",
    # A misbehaving server must not make flush() back off for minutes (default max 300 s).
    "WEAVE_RETRY_MAX_INTERVAL": "2",
    "WEAVE_RETRY_MAX_ATTEMPTS": "3",
}
os.environ.update(_SDK_ENV)
for _k in (
    "WEAVE_DISABLED",
    "WANDB_DISABLE_WEAVE",
    "WANDB_ENTITY",
    "WANDB_IDENTITY_TOKEN_FILE",
    "WEAVE_TRACE_CUSTOM_HEADERS",
    "WEAVE_USE_CALLS_COMPLETE",
    "WEAVE_ENABLE_WAL",
    "WEAVE_ENABLE_CLIENT_SIDE_DIGESTS",
    "WEAVE_CLIENT_PARALLELISM",
):
    os.environ.pop(_k, None)

import weave  # noqa: E402,F401  (imported here, after the env is set)
import weave.trace.init_message as _init_message  # noqa: E402
from weave.trace_server_bindings.remote_http_trace_server import (  # noqa: E402
    RemoteHTTPTraceServer,
)

# weave.init() asks pypi.org for the latest weave version (init_message._print_version_check).
# There is no env switch for it; it is pure cosmetics, so neutralise it for the test process.
_init_message._print_version_check = lambda: None  # type: ignore[assignment]

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent.parent
DEFAULT_ENTITY = "conformance"

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Helpers shared by conftest.py and the test modules.
# ---------------------------------------------------------------------------------------------
def describe_response(r: requests.Response, limit: int = 2000) -> str:
    """Human-readable request/response dump for assertion messages (server bug reports)."""
    req = r.request
    body = req.body
    if isinstance(body, bytes):
        body = body[:limit].decode("utf-8", "replace")
    elif isinstance(body, str):
        body = body[:limit]
    try:
        text = r.text[:limit]
    except Exception:  # pragma: no cover
        text = repr(r.content[:limit])
    return (
        f"\n  request:  {req.method} {req.url}\n  req body: {body}\n"
        f"  status:   {r.status_code}\n  ctype:    {r.headers.get('content-type')}\n"
        f"  response: {text}"
    )


def eventually(fn: Callable[[], T], timeout: float = 5.0, interval: float = 0.05) -> T:
    """Re-run `fn` until it stops raising AssertionError (tolerates the contract's bounded
    visibility lag, DESIGN 'promise 3'); re-raises the last failure after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)


def flush(client: Any, timeout: float = 60.0) -> None:
    """client.flush() with a watchdog, so a server that keeps failing can't hang the suite."""
    err: list[BaseException] = []

    def run() -> None:
        try:
            client.flush()
        except BaseException as e:  # pragma: no cover
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"client.flush() did not finish within {timeout}s (server rejecting sends?)")
    if err:
        raise err[0]
    # Distributed mode: what the SDK sent is acknowledged (in Kafka), now wait until it is stored.
    for srv in list(_RUNNING):
        srv.wait_visible()


def fast_batching(client: Any, interval: float = 0.05) -> None:
    """Shorten the SDK batch processors' idle sleep (default 1 s) for this client.

    client.flush() joins the processor threads, which sleep `min_batch_interval` between
    batches, so every flush costs up to 1 s per processor. Only the polling cadence changes
    (batches get smaller); what is sent and to which endpoints is unchanged."""
    srv = client.server
    for name in ("call_processor", "feedback_processor"):
        proc = getattr(srv, name, None)
        if proc is not None and hasattr(proc, "min_batch_interval"):
            proc.min_batch_interval = interval


def basic_auth(key: str) -> str:
    return "Basic " + base64.b64encode(f"api:{key}".encode()).decode()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The server process
def stop_process(proc: subprocess.Popen[bytes] | None, log: Any = None) -> None:
    """SIGTERM, then SIGKILL after 10 s; closes the process's log file."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if log is not None:
        log.close()


def heddle_bin() -> Path:
    """The server binary: $HEDDLE_BIN, else the debug build in this checkout."""
    env = os.environ.get("HEDDLE_BIN")
    return Path(env) if env else REPO_ROOT / "target" / "debug" / "heddle"


# ---------------------------------------------------------------------------------------------
# The store under the server: HEDDLE_TEST_STORE=sqlite (default), clickhouse, or distributed
# (alias kafka: `heddle serve --kafka --clickhouse`, calls written through a tansu broker and
# stored by the in-process consumer).
def store_mode() -> str:
    mode = os.environ.get("HEDDLE_TEST_STORE") or "sqlite"
    if mode == "kafka":
        mode = "distributed"
    if mode not in ("sqlite", "clickhouse", "distributed"):
        raise RuntimeError(
            f"HEDDLE_TEST_STORE={mode!r}: expected 'sqlite', 'clickhouse' or 'distributed'"
        )
    return mode


# The ingest endpoints: a 200 from one of them means "in Kafka" in distributed mode, not yet
# "stored" (see HeddleServer.wait_visible).
_INGEST_PATHS = (
    "/call/start",
    "/call/end",
    "/call/upsert_batch",
    "/otel/v1/traces",
    "/agents/otel/v1/traces",
    "/otel/v1/logs",
)


def is_ingest_path(path: str) -> bool:
    path = path.split("?", 1)[0]
    if path in _INGEST_PATHS:
        return True
    seg = path.strip("/").split("/")
    return len(seg) == 5 and seg[0] == "v2" and (
        seg[3:] == ["calls", "complete"] or (seg[3] == "call" and seg[4] in ("start", "end"))
    )


# Servers started and not yet stopped: flush() waits for each of them to store what it acked.
_RUNNING: list[HeddleServer] = []

# The consumer group of the test servers and their batch time limit (default 250 ms; shorter so
# the visibility barrier after each write waits less).
CONSUMER_GROUP = "heddle-consumer"
TEST_BATCH_WAIT_MS = "20"
VISIBILITY_TIMEOUT = 30.0


class Kafka:
    """A real Kafka-protocol broker for one server: tansu ($HEDDLE_TANSU, installed by
    tests/run.sh) on a free loopback port with SQLite storage, with the call topic and its
    dead-letter topic (as tests/common/kafka.rs)."""

    TOPICS = (("heddle.calls", 3), ("heddle.calls.dlq", 1))

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = 0
        self.brokers = ""
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def tansu() -> str:
        path = os.environ.get("HEDDLE_TANSU")
        if not path:
            raise RuntimeError(
                "HEDDLE_TANSU is not set: run the suite with `bash tests/run.sh`, which installs tansu"
            )
        return path

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.brokers = f"127.0.0.1:{self.port}"
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.tansu(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             # tansu resolves the SQLite path against its working directory.
             "--storage-engine", "sqlite://tansu.db"],
            cwd=self.data_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = self.log_path.read_text(errors="replace")
                    raise RuntimeError(f"tansu did not listen within {timeout}s:\n{log}")
                time.sleep(0.05)
        for topic, partitions in self.TOPICS:
            out = subprocess.run(
                [self.tansu(), "topic", "create", "--broker", url, topic,
                 "--partitions", str(partitions)],
                capture_output=True,
                text=True,
                timeout=60,
            )  # fmt: skip
            if out.returncode != 0:
                self.stop()
                raise RuntimeError(f"tansu topic create {topic}: {out.stdout}\n{out.stderr}")

    def serve_args(self) -> list[str]:
        return ["--kafka", self.brokers, "--consumer-group", CONSUMER_GROUP,
                "--batch-wait-ms", TEST_BATCH_WAIT_MS]  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()


class ClickHouse:
    """A ClickHouse HTTP endpoint for one server: chdb behind tests/support/clickhouse_http.py
    (run with $HEDDLE_TEST_PYTHON, else this Python, which must have chdb), or the server named
    by $CLICKHOUSE_URL with a fresh database."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.url = ""
        self.database: str | None = None
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 60.0) -> None:
        if os.environ.get("CLICKHOUSE_URL"):
            self.url = os.environ["CLICKHOUSE_URL"]
            self.database = "heddle_test_" + uuid.uuid4().hex
            return
        python = os.environ.get("HEDDLE_TEST_PYTHON") or sys.executable
        script = REPO_ROOT / "tests" / "support" / "clickhouse_http.py"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [python, str(script), "--data-dir", str(self.data_dir)],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        found: list[str] = []

        def read() -> None:  # keeps draining stdout so the adapter never blocks on it
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                prefix = "clickhouse-http listening on "
                if line.startswith(prefix) and not found:
                    found.append(line[len(prefix) :].split()[0])

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"the ClickHouse HTTP adapter did not start:\n{log}")
            time.sleep(0.05)
        self.url = found[0]

    def store_args(self) -> list[str]:
        args = ["--clickhouse", self.url]
        if self.database:
            args += ["--clickhouse-database", self.database]
        return args

    def stop(self) -> None:
        stop_process(self.proc, getattr(self, "_log", None))


class HeddleServer:
    def __init__(
        self, binary: Path, data_dir: Path, log_path: Path, extra_args: list[str] | None = None
    ) -> None:
        self.binary = binary
        self.extra_args = extra_args or []
        self.data_dir = data_dir
        self.log_path = log_path
        # HEDDLE_TEST_STORE=clickhouse: a ClickHouse of its own, started with the server;
        # distributed: a tansu broker of its own as well.
        self.clickhouse: ClickHouse | None = None
        self.kafka: Kafka | None = None
        if store_mode() in ("clickhouse", "distributed"):
            chdb_dir = data_dir.parent / (data_dir.name + "-chdb")
            self.clickhouse = ClickHouse(chdb_dir, log_path.with_name(log_path.name + ".chdb"))
        if store_mode() == "distributed":
            self.kafka = Kafka(
                data_dir.parent / (data_dir.name + "-tansu"),
                log_path.with_name(log_path.name + ".tansu"),
            )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # OTLP/gRPC (TraceService/Export) of the same server.
        self.grpc_port = _free_port()
        self.grpc_endpoint = f"127.0.0.1:{self.grpc_port}"
        self.api_key = "admin-" + uuid.uuid4().hex
        self.proc: subprocess.Popen[bytes] | None = None
        self.session = requests.Session()

    # -- lifecycle --------------------------------------------------------------------------
    def store_args(self) -> list[str]:
        """The store flags every heddle command of this server gets."""
        args = ["--data-dir", str(self.data_dir)]
        if self.clickhouse is not None:
            args += self.clickhouse.store_args()
        return args

    def start(self, timeout: float = 60.0) -> None:
        if self.clickhouse is not None and not self.clickhouse.url:
            self.clickhouse.start()
        if self.kafka is not None and not self.kafka.brokers:
            self.kafka.start()
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "serve",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--otlp-grpc-listen",
                self.grpc_endpoint,
                *self.store_args(),
                *(self.kafka.serve_args() if self.kafka is not None else []),
                "--api-key",
                self.api_key,
                *self.extra_args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_BACKTRACE": "1"},
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        last: Exception | str | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"heddle serve exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                r = requests.get(self.url + "/health", timeout=1)
                if r.status_code == 200 and r.json() == {"status": "ok"}:
                    _RUNNING.append(self)
                    return
                last = describe_response(r)
            except requests.RequestException as e:
                last = e
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"heddle serve not healthy after {timeout}s: {last}\n{self.log_tail()}")

    def stop(self) -> None:
        if self in _RUNNING:
            _RUNNING.remove(self)
        stop_process(self.proc, getattr(self, "_log", None))
        if self.clickhouse is not None:
            self.clickhouse.stop()
        if self.kafka is not None:
            self.kafka.stop()

    # -- visibility barrier (distributed mode) ----------------------------------------------
    def pipeline_counters(self) -> dict[str, float]:
        """The pipeline counters from the server's /metrics (Prometheus text; a counter's label
        value appears only once used, so absent means 0)."""
        r = self.session.get(self.url + "/metrics", headers=self.headers(), timeout=10)
        assert r.status_code == 200, "GET /metrics failed" + describe_response(r)
        samples = {
            'heddle_produced_records_total{outcome="acked"}': "produced",
            'heddle_consumed_records_total{outcome="stored"}': "stored",
            'heddle_consumed_records_total{outcome="dead_lettered"}': "dead_lettered",
        }
        out = dict.fromkeys(samples.values(), 0.0)
        for line in r.text.splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, value = line.rsplit(" ", 1)
            if name in samples:
                out[samples[name]] = float(value)
        return out

    def wait_visible(self, timeout: float = VISIBILITY_TIMEOUT) -> None:
        """Distributed mode: wait until every record this server acknowledged to a writer is
        stored — its consumer has handled (stored or dead-lettered, counted after the store's
        acknowledgement and the offset commit) at least as many records as its producer had
        acknowledged. Producer and consumer are one process; a no-op in the other modes."""
        if self.kafka is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            c = self.pipeline_counters()
            if c["stored"] + c["dead_lettered"] >= c["produced"]:
                return
            if time.monotonic() > deadline:
                pytest.fail(
                    f"acknowledged writes not stored within {timeout}s: {c}\n{self.log_tail()}"
                )
            time.sleep(0.005)

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "<no server log>"
        return "\n".join(lines[-n:])

    # -- raw HTTP ---------------------------------------------------------------------------
    def headers(self, key: str | None = None, bearer: bool = False) -> dict[str, str]:
        key = self.api_key if key is None else key
        auth = f"Bearer {key}" if bearer else basic_auth(key)
        return {"Authorization": auth}

    def post(
        self,
        path: str,
        json_body: Any = None,
        *,
        key: str | None = None,
        bearer: bool = False,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        **kw: Any,
    ) -> requests.Response:
        h = self.headers(key, bearer) if auth else {}
        h.update(headers or {})
        r = self.session.post(self.url + path, json=json_body, headers=h, timeout=30, **kw)
        if r.status_code == 200 and is_ingest_path(path):
            self.wait_visible()
        return r

    def get(self, path: str, *, key: str | None = None, auth: bool = True) -> requests.Response:
        h = self.headers(key) if auth else {}
        return self.session.get(self.url + path, headers=h, timeout=30)

    def post_ok(self, path: str, json_body: Any = None, **kw: Any) -> Any:
        r = self.post(path, json_body, **kw)
        assert r.status_code == 200, f"expected 200 from {path}" + describe_response(r)
        return r.json()

    def stream_calls(self, project: str, *, key: str | None = None, **body: Any) -> list[dict]:
        """POST /calls/stream_query and parse the JSONL body
        (docs/api/README.md#streaming-responses-jsonl). Fails on blank lines / CRLF."""
        req = {"project_id": project, **body}
        r = self.post(
            "/calls/stream_query", req, key=key, headers={"Accept": "application/jsonl"}
        )
        assert r.status_code == 200, "stream_query failed" + describe_response(r)
        text = r.content.decode("utf-8")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        rows = []
        for i, line in enumerate(lines):
            assert line != "", f"blank line {i} in JSONL stream (docs/api/README.md#streaming-responses-jsonl)" + describe_response(r)
            assert not line.endswith("\r"), "CRLF line ending in JSONL stream (docs/api/README.md#streaming-responses-jsonl)"
            rows.append(json.loads(line))
        return rows

    def query_stats(self, project: str, *, key: str | None = None, **body: Any) -> dict:
        return self.post_ok("/calls/query_stats", {"project_id": project, **body}, key=key)

    def read_call(self, project: str, call_id: str) -> dict | None:
        return self.post_ok("/call/read", {"project_id": project, "id": call_id})["call"]

    def wait_for_calls(self, project: str, n: int, timeout: float = 5.0, **body: Any) -> list[dict]:
        """Wait (bounded) until stream_query returns at least n calls; returns the rows."""

        def check() -> list[dict]:
            rows = self.stream_calls(project, **body)
            assert len(rows) >= n, f"expected >= {n} calls in {project}, got {len(rows)}"
            return rows

        return eventually(check, timeout=timeout)

    def create_key(self, entity: str) -> str:
        out = subprocess.run(
            [str(self.binary), "keys", "create", "--entity", entity, *self.store_args()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, f"heddle keys create failed: {out.stdout}\n{out.stderr}"
        lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        assert lines, f"heddle keys create printed nothing: {out.stderr}"
        return lines[-1]


class IngestSpy:
    """Records which call-ingestion path the SDK actually used (and any send errors).

    Wraps RemoteHTTPTraceServer._upsert_calls_batch (→ POST /call/upsert_batch) and
    _send_calls_complete_to_server (→ POST /v2/{entity}/{project}/calls/complete) without
    changing their behaviour."""

    def __init__(self) -> None:
        self.upsert_items: list[tuple[str, str]] = []  # (mode, call id)
        self.complete_ids: list[str] = []
        self.errors: list[str] = []

    def install(self, mp: pytest.MonkeyPatch) -> None:
        orig_upsert = RemoteHTTPTraceServer._upsert_calls_batch
        orig_complete = RemoteHTTPTraceServer._send_calls_complete_to_server
        spy = self

        def upsert(self_: Any, batch: list[Any]) -> Any:
            for item in batch:
                mode = item.get("mode")
                req = item.get("req") or {}
                part = req.get("start") or req.get("end") or {}
                spy.upsert_items.append((mode, part.get("id")))
            try:
                return orig_upsert(self_, batch)
            except Exception as e:
                spy.errors.append(f"/call/upsert_batch: {e!r}")
                raise

        def complete(self_: Any, entity: str, project: str, encoded: bytes) -> None:
            spy.complete_ids.extend(c.get("id") for c in json.loads(encoded)["batch"])
            try:
                return orig_complete(self_, entity, project, encoded)
            except Exception as e:
                spy.errors.append(f"/v2/{entity}/{project}/calls/complete: {e!r}")
                raise

        mp.setattr(RemoteHTTPTraceServer, "_upsert_calls_batch", upsert)
        mp.setattr(RemoteHTTPTraceServer, "_send_calls_complete_to_server", complete)


