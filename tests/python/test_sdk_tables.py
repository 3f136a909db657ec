"""Real weave 0.54.0 SDK against heddle: datasets (tables, docs/api/tables.md,
docs/api/tables.md#create-a-table-from-row-digests) and refs
(docs/api/refs.md#read-a-batch-of-refs). Small datasets go through /table/create; 5,000 rows take
the chunked path, which the tests check actually ran (spies on the SDK binding), both with
/table/create_from_digests and with the /table/update fallback. Everything published is read back
and compared.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402
from weave.trace.table_upload_chunking import TableChunkManager  # noqa: E402
from weave.trace_server_bindings import http_utils  # noqa: E402
from weave.trace_server_bindings.remote_http_trace_server import (  # noqa: E402
    RemoteHTTPTraceServer,
)

from sdk_scenarios import as_plain, project_id  # noqa: E402


class TableSpy:
    """Counts the table/ref requests the SDK binding makes (behaviour unchanged)."""

    METHODS = (
        "table_create",
        "table_update",
        "table_create_from_digests",
        "table_query",
        "table_query_stats",
        "refs_read_batch",
    )

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        self.from_digests_sizes: list[int] = []
        for name in self.METHODS:
            orig = getattr(RemoteHTTPTraceServer, name)

            def wrapper(self_: Any, req: Any, _orig: Any = orig, _name: str = name) -> Any:
                self.calls[_name] += 1
                if _name == "table_create_from_digests":
                    self.from_digests_sizes.append(len(_get(req, "row_digests")))
                return _orig(self_, req)

            mp.setattr(RemoteHTTPTraceServer, name, wrapper)


def _get(req: Any, key: str) -> Any:
    return req[key] if isinstance(req, dict) else getattr(req, key)


@pytest.fixture
def table_spy(monkeypatch: pytest.MonkeyPatch) -> TableSpy:
    return TableSpy(monkeypatch)


def _rows_of(ds: Any) -> list[Any]:
    return [as_plain(r) for r in ds.rows]


SMALL = [
    {"q": "what is 1/2?", "n": 1, "nested": {"x": [1, 2.5, None], "ok": True}},
    {"q": "é ü 😀", "n": 2, "nested": {"x": [], "ok": False}},
    {"q": "c:%/d", "n": 3, "nested": None},
]


def test_small_dataset_round_trip(client: Any, server: HeddleServer, table_spy: TableSpy) -> None:
    ref = weave.publish(weave.Dataset(name="small_ds", rows=SMALL))
    flush(client)
    assert table_spy.calls["table_create"] == 1, table_spy.calls
    assert table_spy.calls["table_create_from_digests"] == 0, table_spy.calls

    pid = project_id(client)
    for uri in (ref.uri, f"weave:///{pid}/object/small_ds:latest", f"weave:///{pid}/object/small_ds:v0"):
        ds = weave.ref(uri).get()
        assert _rows_of(ds) == SMALL, uri
        assert ds.name == "small_ds"
    assert table_spy.calls["table_query"] >= 1, table_spy.calls

    # The stored object points at the table by digest; the table holds the rows in order.
    obj = server.post_ok("/obj/read", {"project_id": pid, "object_id": "small_ds", "digest": "latest"})[
        "obj"
    ]
    table_uri = obj["val"]["rows"]
    assert table_uri.startswith(f"weave:///{pid}/table/"), obj
    table_digest = table_uri.rsplit("/", 1)[1]
    stats = server.post_ok("/table/query_stats", {"project_id": pid, "digest": table_digest})
    assert stats == {"count": 3}
    raw = server.post_ok("/table/query", {"project_id": pid, "digest": table_digest})["rows"]
    assert [r["val"] for r in raw] == SMALL
    assert [r["original_index"] for r in raw] == [0, 1, 2]

    # Row refs resolve through /refs/read_batch, by content digest and by `latest`.
    ds = ref.get()
    before = table_spy.calls["refs_read_batch"]
    for i, row in enumerate(ds.rows):
        row_uri = str(row.ref.uri)
        assert f"/attr/rows/id/{raw[i]['digest']}" in row_uri, row_uri
        assert as_plain(weave.ref(row_uri).get()) == SMALL[i]
        latest_uri = row_uri.replace(f"small_ds:{ref.digest}", "small_ds:latest")
        assert as_plain(weave.ref(latest_uri).get()) == SMALL[i]
        assert as_plain(weave.ref(f"{row_uri}/key/q").get()) == SMALL[i]["q"]
    assert table_spy.calls["refs_read_batch"] > before

    vals = server.post_ok("/refs/read_batch", {"refs": [f"{str(ds.rows[0].ref.uri)}/key/nested/key/x/index/1"]})
    assert vals == {"vals": [2.5]}


def test_dataset_versions(client: Any, server: HeddleServer) -> None:
    v0 = weave.publish(weave.Dataset(name="versioned", rows=[{"a": 1}]))
    v1 = weave.publish(weave.Dataset(name="versioned", rows=[{"a": 1}, {"a": 2}]))
    flush(client)
    assert v0.digest != v1.digest
    pid = project_id(client)
    assert _rows_of(weave.ref(f"weave:///{pid}/object/versioned:v0").get()) == [{"a": 1}]
    assert _rows_of(weave.ref(f"weave:///{pid}/object/versioned:v1").get()) == [{"a": 1}, {"a": 2}]
    assert _rows_of(weave.ref(f"weave:///{pid}/object/versioned:latest").get()) == [{"a": 1}, {"a": 2}]
    assert _rows_of(weave.ref("versioned:v0").get()) == [{"a": 1}]


BIG = [{"id": i, "question": f"What is {i} + {i}?", "answer": 2 * i, "tags": ["t", i % 7]} for i in range(5000)]


def _check_big(client: Any, server: HeddleServer, ref: Any, table_spy: TableSpy) -> None:
    pid = project_id(client)
    ds = weave.ref(f"weave:///{pid}/object/{ref.name}:latest").get()
    assert _rows_of(ds) == BIG
    # SDK paging: /table/query pages of 100 (≥ 50 of them).
    assert table_spy.calls["table_query"] >= 50, table_spy.calls
    some = ds.rows[4321]
    assert as_plain(weave.ref(str(some.ref.uri)).get()) == BIG[4321]
    obj = server.post_ok("/obj/read", {"project_id": pid, "object_id": ref.name, "digest": "latest"})["obj"]
    digest = obj["val"]["rows"].rsplit("/", 1)[1]
    assert server.post_ok("/table/query_stats", {"project_id": pid, "digest": digest}) == {"count": 5000}


# The SDK chunks 5,000 rows by size (~10 MiB per chunk): these small rows would be one chunk.
# Smaller chunks make the upload take several requests, as a large dataset's does.
CHUNK_BYTES = 100 * 1024


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    orig = TableChunkManager.__init__

    def init(self: Any, target_chunk_bytes: int = CHUNK_BYTES) -> None:
        orig(self, CHUNK_BYTES)

    monkeypatch.setattr(TableChunkManager, "__init__", init)


def test_large_dataset_chunked_from_digests(
    client: Any,
    server: HeddleServer,
    table_spy: TableSpy,
    small_chunks: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The SDK remembers a successful probe for the process: forget it, so this test sees one.
    monkeypatch.setattr(http_utils, "_ENDPOINT_CACHE", set())
    ref = weave.publish(weave.Dataset(name="big_ds", rows=BIG))
    flush(client)
    # The probe (empty list), chunks via /table/create, then their combination.
    assert table_spy.from_digests_sizes == [0, 5000], table_spy.from_digests_sizes
    assert table_spy.calls["table_create"] >= 3, table_spy.calls
    assert table_spy.calls["table_update"] == 0, table_spy.calls
    _check_big(client, server, ref, table_spy)


@pytest.fixture
def weave_env_overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    if request.node.name == "test_large_dataset_incremental_updates":
        return {"WEAVE_USE_PARALLEL_TABLE_UPLOAD": "false"}
    return {}


def test_large_dataset_incremental_updates(
    client: Any, server: HeddleServer, table_spy: TableSpy, small_chunks: None
) -> None:
    """WEAVE_USE_PARALLEL_TABLE_UPLOAD=false: the first chunk via /table/create, the rest
    appended with chained /table/update requests (the SDK's fallback for old servers)."""
    ref = weave.publish(weave.Dataset(name="big_ds_updates", rows=BIG))
    flush(client)
    assert table_spy.calls["table_create_from_digests"] == 0, table_spy.calls
    assert table_spy.calls["table_create"] == 1, table_spy.calls
    assert table_spy.calls["table_update"] >= 2, table_spy.calls
    _check_big(client, server, ref, table_spy)
