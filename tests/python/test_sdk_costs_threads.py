"""Real weave 0.54.0 SDK against heddle: costs (docs/api/costs.md, docs/api/calls.md#call-object)
and threads (docs/api/threads.md).

Prices are added, queried and purged through `client.add_cost` / `query_costs` / `purge_costs`;
an op returning an OpenAI-like response (model + usage) gets `summary.usage` from the SDK and
`summary.weave.costs` from the server (`get_calls(include_costs=True)`), from the project's
price or from the built-in table. Calls made inside `weave.thread(...)` carry thread and turn
ids; `/threads/stream_query` (through the SDK's own binding) aggregates them.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402

from sdk_scenarios import project_id  # noqa: E402


@weave.op()
def fake_llm(prompt: str, model: str) -> dict[str, Any]:
    """An OpenAI-like chat completion: the SDK turns `usage` into summary.usage[model]."""
    return {
        "model": model,
        "choices": [{"message": {"role": "assistant", "content": prompt.upper()}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
    }


def _costs(call: Any) -> dict[str, Any]:
    summary = call.summary or {}
    return dict((summary.get("weave") or {}).get("costs") or {})


def test_add_query_purge_costs(client: Any) -> None:
    past = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    res = client.add_cost(
        llm_id="heddle-model",
        prompt_token_cost=0.001,
        completion_token_cost=0.002,
        effective_date=past,
        provider_id="heddle",
        cache_read_input_token_cost=0.0001,
    )
    [(llm_id, first_id)] = [tuple(pair) for pair in res.ids]
    assert llm_id == "heddle-model"
    second = client.add_cost(llm_id="other-model", prompt_token_cost=1, completion_token_cost=2)
    second_id = second.ids[0][1]

    everything = client.query_costs()
    assert {c.id for c in everything} == {first_id, second_id}
    [mine] = client.query_costs(llm_ids=["heddle-model"])
    assert mine.id == first_id
    assert mine.llm_id == "heddle-model"
    assert mine.provider_id == "heddle"
    assert mine.prompt_token_cost == pytest.approx(0.001)
    assert mine.completion_token_cost == pytest.approx(0.002)
    assert mine.prompt_token_cost_unit == "USD"
    assert str(mine.effective_date).startswith("2024-01-01")
    assert [c.id for c in client.query_costs(first_id)] == [first_id]
    assert [c.id for c in client.query_costs(limit=1, offset=1)] != [c.id for c in client.query_costs(limit=1)]

    client.purge_costs(first_id)
    assert [c.id for c in client.query_costs()] == [second_id]
    client.purge_costs([second_id])
    assert client.query_costs() == []


def test_call_costs_from_project_and_default_prices(client: Any) -> None:
    client.add_cost(
        llm_id="heddle-model",
        prompt_token_cost=0.001,
        completion_token_cost=0.002,
        effective_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    )
    fake_llm("hello", "heddle-model")
    fake_llm("hi", "gpt-4o-mini")  # priced by the built-in table
    fake_llm("hey", "nobody-prices-this")
    flush(client)

    calls = list(client.get_calls(include_costs=True))
    by_model = {c.inputs["model"]: c for c in calls}
    assert set(by_model) == {"heddle-model", "gpt-4o-mini", "nobody-prices-this"}

    mine = _costs(by_model["heddle-model"])["heddle-model"]
    assert mine["prompt_tokens"] == 1000
    assert mine["completion_tokens"] == 500
    assert mine["requests"] == 1
    assert mine["prompt_tokens_total_cost"] == pytest.approx(1.0)
    assert mine["completion_tokens_total_cost"] == pytest.approx(1.0)
    assert mine["pricing_level"] == "project"
    assert mine["effective_date"].startswith("2024-01-01")

    default = _costs(by_model["gpt-4o-mini"])["gpt-4o-mini"]
    assert default["pricing_level"] == "default"
    assert default["provider_id"] == "openai"
    assert default["prompt_tokens_total_cost"] == pytest.approx(1000 * 0.15e-6)
    assert default["completion_tokens_total_cost"] == pytest.approx(500 * 0.6e-6)

    assert _costs(by_model["nobody-prices-this"]) == {}
    # The SDK's usage is intact, and costs only come when asked for.
    assert by_model["nobody-prices-this"].summary["usage"]["nobody-prices-this"]["prompt_tokens"] == 1000
    assert all(_costs(c) == {} for c in client.get_calls())


@weave.op()
def chat_turn(message: str) -> str:
    return inner_step(message) + "!"


@weave.op()
def inner_step(message: str) -> str:
    time.sleep(0.01)
    return message[::-1]


def test_threads_from_weave_thread(client: Any, server: HeddleServer) -> None:
    with weave.thread("support-chat") as t:
        assert t.thread_id == "support-chat"
        for msg in ("one", "two", "three"):
            chat_turn(msg)
    with weave.thread("other-chat"):
        chat_turn("solo")
    chat_turn("no thread")
    flush(client)

    calls = list(client.get_calls())
    turns = [c for c in calls if "chat_turn" in c.op_name]
    threaded = [c for c in turns if c.thread_id == "support-chat"]
    assert len(threaded) == 3
    assert all(c.turn_id == c.id for c in threaded)
    children = [c for c in calls if "inner_step" in c.op_name and c.thread_id == "support-chat"]
    assert len(children) == 3 and all(c.turn_id != c.id for c in children)

    rows = [
        r.model_dump() if hasattr(r, "model_dump") else dict(r)
        for r in client.server.threads_query_stream(
            {"project_id": project_id(client), "sort_by": [{"field": "turn_count", "direction": "desc"}]}
        )
    ]
    assert [r["thread_id"] for r in rows] == ["support-chat", "other-chat"], rows
    support = rows[0]
    assert support["turn_count"] == 3
    first = min(threaded, key=lambda c: c.started_at)
    last = max(threaded, key=lambda c: c.ended_at)
    assert support["first_turn_id"] == first.id
    assert support["last_turn_id"] == last.id
    assert support["p50_turn_duration_ms"] >= 10
    assert support["p99_turn_duration_ms"] >= support["p50_turn_duration_ms"]

    # Raw endpoint: filter by id; an unknown sort field is a 400.
    pid = project_id(client)
    r = server.post("/threads/stream_query", {"project_id": pid, "filter": {"thread_ids": ["other-chat"]}})
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [row["thread_id"] for row in lines] == ["other-chat"]
    assert lines[0]["turn_count"] == 1
    bad = server.post("/threads/stream_query", {"project_id": pid, "sort_by": [{"field": "op_name", "direction": "asc"}]})
    assert bad.status_code == 400, bad.text
