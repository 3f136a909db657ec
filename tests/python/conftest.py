"""Real-client conformance harness: starts `heddle serve` and points the unmodified
weave 0.54.0 SDK at it (see heddle_support.py for the environment).

  HEDDLE_BIN       path of the heddle binary (default: <repo>/target/debug/heddle)
  HEDDLE_KEEP_TMP  keep the temp dir (server log, data dir) after the run
  HEDDLE_TEST_STORE  `sqlite` (default), `clickhouse`: each server then runs on its own
                   ClickHouse (chdb behind tests/support/clickhouse_http.py, started with
                   $HEDDLE_TEST_PYTHON or this Python; or $CLICKHOUSE_URL with a fresh database),
                   or `distributed` (alias `kafka`): a ClickHouse and a tansu broker
                   ($HEDDLE_TANSU) of its own, `heddle serve --kafka --clickhouse`; flush() and
                   raw ingest posts then wait until the consumer has stored what was acked

Run:  bash tests/run.sh   (creates the venv with the pinned SDK, then runs pytest here)
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# heddle_support must be imported before weave (it sets the SDK env at import time).
from heddle_support import (  # isort: skip
    _TMP_ROOT,
    DEFAULT_ENTITY,
    REPO_ROOT,
    HeddleServer,
    heddle_bin,
    IngestSpy,
    fast_batching,
    flush,
)
import weave  # noqa: E402
from weave.trace.context import weave_client_context  # noqa: E402


@pytest.fixture(scope="session")
def server() -> Iterator[HeddleServer]:
    binary = heddle_bin()
    if not binary.exists():
        pytest.fail(f"heddle binary not found at {binary} (set HEDDLE_BIN)", pytrace=False)
    data_dir = _TMP_ROOT / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    srv = HeddleServer(binary, data_dir, _TMP_ROOT / "server.log")
    srv.start()
    mp = pytest.MonkeyPatch()
    # docs/api/service.md#graphql: one process serves the trace API at the root and GraphQL at
    # /graphql.
    mp.setenv("WF_TRACE_SERVER_URL", srv.url)
    mp.setenv("WANDB_BASE_URL", srv.url)
    mp.setenv("WANDB_API_KEY", srv.api_key)
    try:
        yield srv
    finally:
        try:
            if weave_client_context.get_weave_client() is not None:
                weave.finish()
        finally:
            mp.undo()
            srv.stop()
            if os.environ.get("HEDDLE_KEEP_TMP"):
                print(f"\n[heddle] kept temp dir {_TMP_ROOT}")
            else:
                shutil.rmtree(_TMP_ROOT, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# SDK fixtures
# ---------------------------------------------------------------------------------------------
def _project_for(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    return f"{name[:40]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def entity() -> str:
    return DEFAULT_ENTITY


@pytest.fixture
def project(request: pytest.FixtureRequest) -> str:
    return _project_for(request)


@pytest.fixture
def weave_env_overrides() -> dict[str, str]:
    """Extra WEAVE_* env applied before weave.init (override per module)."""
    return {}


@pytest.fixture
def ingest_spy(monkeypatch: pytest.MonkeyPatch) -> IngestSpy:
    spy = IngestSpy()
    spy.install(monkeypatch)
    return spy


@pytest.fixture
def client(
    server: HeddleServer,
    monkeypatch: pytest.MonkeyPatch,
    weave_env_overrides: dict[str, str],
    ingest_spy: IngestSpy,
    entity: str,
    project: str,
) -> Iterator[Any]:
    """weave.init(f"{entity}/{project}") with a fresh project per test."""
    monkeypatch.setenv("WANDB_API_KEY", server.api_key)
    for k, v in weave_env_overrides.items():
        monkeypatch.setenv(k, v)
    # A previous test's client (if any) is flushed and dropped by weave.init itself, but be
    # explicit so every test starts from a clean global state.
    if weave_client_context.get_weave_client() is not None:
        weave.finish()
    c = weave.init(f"{entity}/{project}")
    fast_batching(c)
    c._heddle_spy = ingest_spy  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        try:
            flush(c)
        finally:
            weave.finish()


@pytest.fixture(autouse=True)
def _no_sdk_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail a test whose SDK background work logged an ERROR (dropped batch, failed
    /obj/create or /file/create, ...) — such failures otherwise only show up as missing data."""
    yield
    records = caplog.get_records("setup") + caplog.get_records("call") + caplog.records
    errors = [
        f"{r.name}: {r.getMessage()}"
        for r in records
        if r.levelno >= logging.ERROR and r.name.startswith("weave")
    ]
    assert not errors, "weave SDK logged errors:\n" + "\n".join(dict.fromkeys(errors))
