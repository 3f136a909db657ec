"""Write-then-read-back scenarios shared by test_sdk_calls.py (default /v2/.../calls/complete
ingestion) and test_sdk_upsert_batch.py (legacy /call/upsert_batch ingestion).

Every scenario drives the real weave SDK, flushes, and then verifies what the server stored by
reading it back through the SDK (client.get_calls / get_call → /calls/query_stats +
/calls/stream_query) and through raw HTTP.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

import weave
from heddle_support import HeddleServer, flush

# docs/api/calls.md#call-object: every Call field must be present in stream_query rows.
CALL_FIELDS = {
    "id", "project_id", "op_name", "display_name", "trace_id", "parent_id", "thread_id",
    "turn_id", "started_at", "attributes", "inputs", "ended_at", "exception", "output",
    "summary", "wb_user_id", "wb_run_id", "wb_run_step", "wb_run_step_end", "deleted_at",
}  # fmt: skip
RFC3339_WITH_OFFSET = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")


def project_id(client: Any) -> str:
    return f"{client.entity}/{client.project}"


def op_ref_pattern(client: Any, name: str) -> re.Pattern[str]:
    return re.compile(rf"^weave:///{re.escape(project_id(client))}/op/{re.escape(name)}:([^/:]+)$")


def as_plain(v: Any) -> Any:
    """WeaveDict/WeaveList/boxed values → plain JSON values."""
    return json.loads(json.dumps(v, default=str))


def status_counts(c: Any) -> dict[str, int]:
    """summary.status_counts with TraceStatus keys (the SDK parses them) → plain str keys."""
    sc = c.summary["status_counts"]
    return {getattr(k, "value", k): v for k, v in sc.items()}


def close_time(a: dt.datetime, b: dt.datetime, tol_ms: float = 1.0) -> bool:
    """Timestamps may be stored at ms precision (the reference server uses DateTime64(3))."""
    return abs((a - b).total_seconds()) * 1000 <= tol_ms


def check_raw_row_shape(row: dict, pid: str) -> None:
    missing = CALL_FIELDS - row.keys()
    assert not missing, f"stream_query row lacks Call fields {sorted(missing)} (docs/api/calls.md#call-object): {row}"
    assert row["project_id"] == pid, f"project_id must be the external form (docs/api/README.md#identifiers): {row}"
    for k in ("started_at", "ended_at"):
        if row[k] is not None:
            assert RFC3339_WITH_OFFSET.match(row[k]), f"{k} must be RFC-3339 with offset: {row[k]}"


def check_ingest_path(client: Any, expect: str, call_ids: list[str]) -> None:
    """expect: 'complete' (/v2/.../calls/complete) or 'upsert' (/call/upsert_batch)."""
    spy = client._heddle_spy
    assert not spy.errors, f"SDK call sends failed: {spy.errors}"
    if expect == "complete":
        assert set(call_ids) <= set(spy.complete_ids), (
            f"calls not sent via /v2/.../calls/complete: {spy.complete_ids}"
        )
        assert not spy.upsert_items, f"unexpected /call/upsert_batch use: {spy.upsert_items}"
    else:
        starts = {i for m, i in spy.upsert_items if m == "start"}
        ends = {i for m, i in spy.upsert_items if m == "end"}
        assert set(call_ids) <= starts and set(call_ids) <= ends, (
            f"calls not sent via /call/upsert_batch start+end: {spy.upsert_items}"
        )
        assert not spy.complete_ids, (
            "SDK switched to /v2/.../calls/complete (server answered CALLS_COMPLETE_MODE_REQUIRED?)"
            f": {spy.complete_ids}"
        )


# ---------------------------------------------------------------------------------------------
def scenario_nested_ops(client: Any, server: HeddleServer, ingest: str) -> None:
    @weave.op
    def inner(y: int) -> int:
        return y * 2

    @weave.op
    def outer(x: int) -> dict:
        return {"doubled": inner(x + 1), "x": x}

    result, live = outer.call(3)
    assert result == {"doubled": 8, "x": 3}
    live_child = live._children[0]
    flush(client)
    pid = project_id(client)

    rows = server.wait_for_calls(pid, 2)
    assert len(rows) == 2, f"expected exactly 2 calls, got {rows}"
    check_ingest_path(client, ingest, [live.id, live_child.id])
    for row in rows:
        check_raw_row_shape(row, pid)

    # --- via the SDK (query_stats + stream_query) ----------------------------------------
    calls_iter = client.get_calls()
    assert len(calls_iter) == 2
    calls = {c.id: c for c in calls_iter}
    # (parent and child usually start in the same millisecond, so no order assertion here)
    assert set(calls) == {live.id, live_child.id}
    o, i = calls[live.id], calls[live_child.id]

    assert o.parent_id is None
    assert i.parent_id == o.id
    assert o.trace_id == live.trace_id and i.trace_id == o.trace_id
    assert as_plain(o.inputs) == {"x": 3}
    assert as_plain(i.inputs) == {"y": 4}
    assert as_plain(o.output) == {"doubled": 8, "x": 3}
    assert i.output == 8
    assert o.exception is None and i.exception is None
    assert o.project_id == pid

    for c, name, lc in ((o, "outer", live), (i, "inner", live_child)):
        m = op_ref_pattern(client, name).match(c.op_name)
        assert m, f"op_name must be an op ref for {name}: {c.op_name!r}"
        assert c.op_name == lc.op_name, "op_name read back differs from what the SDK sent"
        # The op ref must point at the op object the SDK created (docs/api/objects.md,
        # docs/api/README.md#typical-request-sequences).
        obj = server.post_ok(
            "/obj/read", {"project_id": pid, "object_id": name, "digest": m.group(1)}
        )["obj"]
        assert obj["kind"] == "op" and obj["digest"] == m.group(1), obj
        assert isinstance(c.started_at, dt.datetime) and c.started_at.tzinfo is not None
        assert isinstance(c.ended_at, dt.datetime) and c.ended_at.tzinfo is not None
        assert close_time(c.started_at, lc.started_at), (c.started_at, lc.started_at)
        assert close_time(c.ended_at, lc.ended_at), (c.ended_at, lc.ended_at)
        assert c.ended_at >= c.started_at
        w = c.summary["weave"]
        assert w["status"] == "success", c.summary
        assert w["trace_name"] == name, c.summary
        assert isinstance(w["latency_ms"], int) and w["latency_ms"] >= 0, c.summary
        expected_latency = (c.ended_at - c.started_at).total_seconds() * 1000
        assert abs(w["latency_ms"] - expected_latency) <= 2, (w, expected_latency)
        # client-side rollup is stored verbatim
        assert status_counts(c) == {"success": 1 if c is i else 2, "error": 0}, c.summary

    # --- get_call (stream_query with filter.call_ids, limit/offset null) -------------------
    got = client.get_call(i.id)
    assert got.id == i.id and got.parent_id == o.id and got.output == 8

    # --- raw filters on the linkage ---------------------------------------------------------
    assert [r["id"] for r in server.stream_calls(pid, filter={"parent_ids": [o.id]})] == [i.id]
    assert [r["id"] for r in server.stream_calls(pid, filter={"trace_roots_only": True})] == [o.id]
    assert {r["id"] for r in server.stream_calls(pid, filter={"trace_ids": [o.trace_id]})} == {
        o.id,
        i.id,
    }
    is_null = {"$expr": {"$eq": [{"$getField": "parent_id"}, {"$literal": None}]}}
    assert [r["id"] for r in server.stream_calls(pid, query=is_null)] == [o.id]
    assert server.query_stats(pid, query=is_null)["count"] == 1
    # /call/read
    raw = server.read_call(pid, i.id)
    assert raw is not None and raw["id"] == i.id and raw["parent_id"] == o.id
    assert raw["inputs"] == {"y": 4} and raw["output"] == 8


# ---------------------------------------------------------------------------------------------
def scenario_exception(client: Any, server: HeddleServer, ingest: str) -> None:
    @weave.op
    def boom(n: int) -> int:
        raise ValueError(f"bad value {n}")

    @weave.op
    def guarded() -> str:
        try:
            boom(1)
        except ValueError:
            pass
        return "handled"

    res, live_parent = guarded.call()
    assert res == "handled"
    live_child = live_parent._children[0]
    time.sleep(0.003)  # distinct started_at (ms) for the two roots
    try:
        boom(2)
        raise AssertionError("boom should raise")
    except ValueError:
        pass
    flush(client)
    pid = project_id(client)
    rows = server.wait_for_calls(pid, 3)
    assert len(rows) == 3, rows
    for row in rows:
        check_raw_row_shape(row, pid)

    it = client.get_calls()
    assert len(it) == 3
    calls = list(it)
    assert calls[2].id not in (live_parent.id, live_child.id), "default order is started_at asc"
    by_id = {c.id: c for c in calls}
    parent, child, root_err = by_id[live_parent.id], by_id[live_child.id], calls[2]
    check_ingest_path(client, ingest, [parent.id, child.id, root_err.id])

    for c, n in ((child, 1), (root_err, 2)):
        assert c.exception, f"exception not recorded: {c}"
        exc = json.loads(c.exception)
        assert exc["type"] == "ValueError" and exc["message"] == f"bad value {n}", exc
        assert isinstance(exc.get("traceback"), list)
        assert c.summary["weave"]["status"] == "error", c.summary
        assert c.output is None
        assert c.ended_at is not None
    assert child.parent_id == parent.id
    assert root_err.parent_id is None

    assert parent.exception is None
    assert parent.output == "handled"
    assert status_counts(parent) == {"success": 1, "error": 1}, parent.summary
    assert parent.summary["weave"]["status"] == "descendant_error", parent.summary

    # derived status is queryable (docs/api/query.md#calls-fields)
    def status_q(s: str) -> dict:
        return {"$expr": {"$eq": [{"$getField": "summary.weave.status"}, {"$literal": s}]}}

    err = client.get_calls(query=status_q("error"))
    assert len(err) == 2
    assert {c.id for c in err} == {child.id, root_err.id}
    assert [r["id"] for r in server.stream_calls(pid, query=status_q("descendant_error"))] == [
        parent.id
    ]
    assert server.stream_calls(pid, query=status_q("success")) == []


# ---------------------------------------------------------------------------------------------
def scenario_attributes(client: Any, server: HeddleServer, ingest: str) -> None:
    @weave.op
    def leaf(v: str) -> str:
        return v.upper()

    @weave.op
    def tagged(v: str) -> str:
        return leaf(v) + "!"

    attrs = {"env": "test", "n": 5, "nested": {"k": "v", "list": [1, 2]}}
    with weave.attributes(attrs):
        res, live = tagged.call("hi")
    _, plain = leaf.call("x")  # outside the context: no user attributes
    assert res == "HI!"
    flush(client)
    pid = project_id(client)
    rows = server.wait_for_calls(pid, 3)
    assert len(rows) == 3, rows

    calls = {c.id: c for c in client.get_calls()}
    assert len(calls) == 3
    check_ingest_path(client, ingest, list(calls))
    t = calls[live.id]
    child = calls[live._children[0].id]
    for c in (t, child):
        a = as_plain(c.attributes)
        for k, v in attrs.items():
            assert a.get(k) == v, f"attribute {k!r} not read back: {a}"
        # SDK-provided weave.* attributes are stored verbatim
        assert a["weave"]["client_version"] == weave.__version__, a
    # exact round trip of everything the SDK sent
    assert as_plain(t.attributes) == as_plain(dict(live.attributes))
    p = as_plain(calls[plain.id].attributes)
    assert "env" not in p and "nested" not in p, p

    q = {"$expr": {"$eq": [{"$getField": "attributes.env"}, {"$literal": "test"}]}}
    it = client.get_calls(query=q)
    assert len(it) == 2
    assert {c.id for c in it} == {t.id, child.id}
    q2 = {"$expr": {"$eq": [{"$getField": "attributes.nested.k"}, {"$literal": "v"}]}}
    assert {r["id"] for r in server.stream_calls(pid, query=q2)} == {t.id, child.id}
    assert server.query_stats(pid, query=q2)["count"] == 2
    raw = server.read_call(pid, t.id)
    assert raw["attributes"]["nested"] == {"k": "v", "list": [1, 2]}, raw
