"""The core write/read-back checks with WEAVE_USE_CALLS_COMPLETE=false, i.e. the SDK's legacy
ingestion path POST /call/upsert_batch (docs/api/calls.md#ingestion-paths,
docs/api/calls.md#upsert-batch).

How the setting applies: weave reads every setting from the environment on each access
(weave/trace/settings.py `_env_or_default`), and `use_calls_complete` is read exactly once per
client, in RemoteHTTPTraceServer.__init__ (created by weave.init). So setting the env var before
weave.init (the `weave_env_overrides` fixture, applied by the `client` fixture through
monkeypatch) is enough; the ingest spy then proves /call/upsert_batch was really used.
"""

from __future__ import annotations

from typing import Any

import pytest

from heddle_support import HeddleServer  # isort: skip  (sets SDK env before weave import)
from weave.trace_server_bindings.async_batch_processor import AsyncBatchProcessor  # noqa: E402

from sdk_scenarios import (  # noqa: E402
    scenario_attributes,
    scenario_exception,
    scenario_nested_ops,
)

INGEST = "upsert"


@pytest.fixture
def weave_env_overrides() -> dict[str, str]:
    return {"WEAVE_USE_CALLS_COMPLETE": "false"}


@pytest.fixture
def upsert_client(client: Any) -> Any:
    srv = client.server
    assert getattr(srv, "use_calls_complete", None) is False, (
        f"WEAVE_USE_CALLS_COMPLETE=false did not take effect ({type(srv).__name__})"
    )
    assert type(srv.call_processor) is AsyncBatchProcessor, type(srv.call_processor)
    return client


def test_upsert_nested_ops_read_back(upsert_client: Any, server: HeddleServer) -> None:
    scenario_nested_ops(upsert_client, server, INGEST)


def test_upsert_exception_and_descendant_error(upsert_client: Any, server: HeddleServer) -> None:
    scenario_exception(upsert_client, server, INGEST)


def test_upsert_attributes(upsert_client: Any, server: HeddleServer) -> None:
    scenario_attributes(upsert_client, server, INGEST)


def test_raw_upsert_batch_response_and_merge(server: HeddleServer) -> None:
    """/call/upsert_batch answers one entry per item ({"id","trace_id"} for starts, {} for ends)
    and merges start + end (end arriving first included) into one call (docs/api/calls.md,
    docs/api/calls.md#upsert-batch)."""
    import uuid

    pid = f"conformance/raw-upsert-{uuid.uuid4().hex[:8]}"
    cid, tid = str(uuid.uuid4()), str(uuid.uuid4())
    start = {
        "project_id": pid, "id": cid, "trace_id": tid, "op_name": "raw_op",
        "started_at": "2026-01-02T03:04:05.000001Z", "attributes": {"k": "v"},
        "inputs": {"a": 1}, "display_name": None, "parent_id": None, "thread_id": None,
        "turn_id": None, "wb_user_id": None, "wb_run_id": None, "wb_run_step": None,
    }  # fmt: skip
    end = {
        "project_id": pid, "id": cid, "ended_at": "2026-01-02T03:04:05.250001Z",
        "summary": {"status_counts": {"success": 1, "error": 0}}, "output": [1, 2],
        "exception": None, "trace_id": tid, "started_at": start["started_at"], "is_eval": False,
        "wb_run_step_end": None,
    }  # fmt: skip
    gen_start = {**start, "id": None, "trace_id": None, "op_name": "gen_op"}
    body = {
        "batch": [
            {"mode": "end", "req": {"end": end}},
            {"mode": "start", "req": {"start": start}},
            {"mode": "start", "req": {"start": gen_start}},
        ]
    }
    out = server.post_ok("/call/upsert_batch", body)
    res = out["res"]
    assert len(res) == 3, out
    assert res[0] == {}, f"an end item answers {{}} (docs/api/calls.md#upsert-batch): {out}"
    assert res[1]["id"] == cid and res[1]["trace_id"] == tid, out
    assert res[2]["id"] and res[2]["trace_id"], f"server must generate ids (docs/api/calls.md#start-a-call): {out}"

    rows = server.wait_for_calls(pid, 2)
    by_op = {r["op_name"]: r for r in rows}
    r = by_op["raw_op"]
    assert r["id"] == cid and r["trace_id"] == tid
    assert r["inputs"] == {"a": 1} and r["output"] == [1, 2] and r["attributes"] == {"k": "v"}
    assert r["ended_at"] is not None
    assert r["summary"]["weave"]["status"] == "success", r["summary"]
    assert r["summary"]["weave"]["latency_ms"] == 250, r["summary"]
    assert r["summary"]["weave"]["trace_name"] == "raw_op", r["summary"]
    g = by_op["gen_op"]
    assert g["id"] == res[2]["id"] and g["trace_id"] == res[2]["trace_id"]
    assert g["ended_at"] is None and g["summary"]["weave"]["status"] == "running", g
