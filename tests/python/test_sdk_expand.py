"""Real weave 0.54.0 SDK against heddle: `client.get_calls(expand_columns=...)`
(docs/api/calls.md#count-calls, docs/api/calls.md#stream-calls). An op is called with dataset rows
(the SDK stores them in `inputs` as row refs) and a published object; the calls are read back with
those refs resolved, filtered and sorted through the resolved values, and `len()` (→
/calls/query_stats) agrees with the rows iterated.
"""

from __future__ import annotations

from typing import Any

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402

from sdk_scenarios import as_plain, project_id  # noqa: E402

ROWS = [
    {"question": "one", "label": "b", "score": 2},
    {"question": "two", "label": "a", "score": 10},
    {"question": "three", "label": "c", "score": 1},
]


def _setup(client: Any) -> tuple[Any, list[str], str]:
    ds_ref = weave.publish(weave.Dataset(name="expand_ds", rows=ROWS))
    cfg_ref = weave.publish({"temperature": 0.5, "name": "cfg"}, name="cfg")
    ds = ds_ref.get()
    cfg = cfg_ref.get()

    @weave.op
    def predict(example: Any, config: Any) -> str:
        return str(example["label"]) + str(config["name"])

    row_refs = []
    for row in ds.rows:
        row_refs.append(str(row.ref.uri))
        predict(row, cfg)
    flush(client)
    return predict, row_refs, str(cfg_ref.uri)


def _op_filter(client: Any) -> dict[str, Any]:
    return {"op_names": [f"weave:///{project_id(client)}/op/predict:*"]}


def test_get_calls_expand_columns(client: Any, server: HeddleServer) -> None:
    _, row_refs, cfg_ref = _setup(client)
    flt = _op_filter(client)

    # As stored: the inputs hold refs (the row refs the SDK built from the dataset).
    pid = project_id(client)
    assert server.query_stats(pid, filter=flt)["count"] == 3
    plain = server.stream_calls(pid, filter=flt)
    assert [c["inputs"]["example"] for c in plain] == row_refs
    assert {c["inputs"]["config"] for c in plain} == {cfg_ref}
    # The raw wire form of the expanded rows.
    wire = server.stream_calls(pid, filter=flt, expand_columns=["inputs.example"])
    assert [c["inputs"]["example"] for c in wire] == [
        {**row, "_ref": ref} for row, ref in zip(ROWS, row_refs)
    ]
    assert {c["inputs"]["config"] for c in wire} == {cfg_ref}

    calls = list(client.get_calls(filter=flt, expand_columns=["inputs.example", "inputs.config"]))
    assert len(calls) == 3
    for call, row in zip(calls, ROWS):
        # The SDK turns the `_ref` string back into a (lazily read) ref: it reads as the row.
        example = as_plain(call.inputs["example"])
        assert example == {**row, "_ref": row}, example
        config = as_plain(call.inputs["config"])
        cfg = {"temperature": 0.5, "name": "cfg"}
        assert config == {**cfg, "_ref": cfg}, config
        assert call.output == row["label"] + "cfg"


def test_get_calls_filter_and_sort_through_expanded_refs(client: Any, server: HeddleServer) -> None:
    _, row_refs, _ = _setup(client)
    flt = _op_filter(client)
    ex = ["inputs.example"]

    q = {"$expr": {"$eq": [{"$getField": "inputs.example.label"}, {"$literal": "a"}]}}
    it = client.get_calls(filter=flt, query=q, expand_columns=ex)
    assert len(it) == 1
    got = list(it)
    assert [as_plain(c.inputs["example"])["question"] for c in got] == ["two"]
    # Without expanding, the path reads into a ref string and nothing matches.
    assert len(client.get_calls(filter=flt, query=q)) == 0
    assert list(client.get_calls(filter=flt, query=q)) == []

    # Numeric comparison through the ref.
    q = {
        "$expr": {
            "$gt": [
                {"$convert": {"input": {"$getField": "inputs.example.score"}, "to": "double"}},
                {"$literal": 1.5},
            ]
        }
    }
    it = client.get_calls(filter=flt, query=q, expand_columns=ex)
    assert len(it) == 2
    assert sorted(as_plain(c.inputs["example"])["question"] for c in it) == ["one", "two"]

    # Sorting through the ref, in pages as the SDK fetches them.
    for field, direction, want in [
        ("inputs.example.label", "asc", ["two", "one", "three"]),
        ("inputs.example.score", "desc", ["two", "one", "three"]),
        ("inputs.example.score", "asc", ["three", "one", "two"]),
    ]:
        it = client.get_calls(
            filter=flt,
            sort_by=[{"field": field, "direction": direction}],
            expand_columns=ex,
            page_size=2,
        )
        assert len(it) == 3
        assert [as_plain(c.inputs["example"])["question"] for c in it] == want, (field, direction)

    # return_expanded_column_values=False: sorted by the resolved values, refs returned as stored.
    it = client.get_calls(
        filter=flt,
        sort_by=[{"field": "inputs.example.label", "direction": "desc"}],
        expand_columns=ex,
        return_expanded_column_values=False,
    )
    got = list(it)
    assert len(got) == 3
    order = [row_refs.index(_uri(c.inputs["example"])) for c in got]
    assert order == [2, 0, 1], order


def _uri(v: Any) -> str:
    """A ref input as the SDK hands it back: a ref string, a Ref, or a lazily resolved object."""
    if isinstance(v, str):
        return v
    ref = getattr(v, "ref", None) or v
    return str(getattr(ref, "uri", ref))
