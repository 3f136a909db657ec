"""The agents API (docs/api/agents.md) driven by the weave SDK's agent methods
(`get_agents`, `get_agent_versions`, `get_agent_spans`, `get_agent_turn(s)`,
`get_agent_span_stats`, `get_agent_custom_attributes`, `search_agents`) and its server client
where the SDK has no method (`agent_spans_query` with `group_by`, `agent_conversation_spans`).

The spans are real OpenTelemetry GenAI agent spans, recorded with the OpenTelemetry SDK and
sent with its unmodified OTLP/HTTP exporter: three turns of one agent across two
conversations, each an `invoke_agent` span with two `chat` spans and an `execute_tool` span
under it, plus spans that are not agent spans (a plain OTel span, a weave op). Every answer is
compared with what was recorded.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
import requests

from heddle_support import DEFAULT_ENTITY, HeddleServer, basic_auth  # isort: skip
import weave  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: E402
    OTLPSpanExporter,
)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.trace import Status, StatusCode  # noqa: E402

AGENT = "weather-bot"
CONV_A, CONV_B = "conv-a", "conv-b"
MS = 1_000_000  # nanoseconds

# (conversation, version, city, question, answer, tool error)
TURNS = [
    (CONV_A, "v1", "Paris", "What's the weather in Paris?", "It is sunny in Paris.", False),
    (CONV_A, "v1", "Berlin", "And in Berlin?", "It is cloudy in Berlin.", False),
    (CONV_B, "v2", "Tokyo", "Weather in Tokyo?", "Sorry, the weather service timed out.", True),
]
CHECKING = "Let me check the weather."


def msgs(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


@pytest.fixture(scope="module")
def project() -> str:
    return f"agents-{dt.datetime.now().strftime('%H%M%S%f')}"


class Seed:
    def __init__(self) -> None:
        self.start = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(
            minutes=30
        )
        self.traces: list[str] = []  # per turn
        self.spans: list[dict[str, str]] = []  # per turn: invoke, chat1, tool, chat2 -> span id


def _hex(span: Any) -> tuple[str, str]:
    c = span.get_span_context()
    return format(c.trace_id, "032x"), format(c.span_id, "016x")


@pytest.fixture(scope="module")
def seed(server: HeddleServer, project: str) -> Seed:
    pid = f"{DEFAULT_ENTITY}/{project}"
    provider = TracerProvider(resource=Resource.create({"service.name": "agents-test"}))
    exporter = OTLPSpanExporter(
        endpoint=server.url + "/otel/v1/traces",
        headers={"Authorization": basic_auth(server.api_key), "project_id": pid},
        timeout=10,
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    tracer = provider.get_tracer("agents-test")
    s = Seed()
    base_ns = int(s.start.timestamp()) * 1_000_000_000
    for n, (conv, version, city, question, answer, tool_error) in enumerate(TURNS):
        t0 = base_ns + n * 60_000 * MS
        agent_attrs = {"gen_ai.agent.name": AGENT, "gen_ai.agent.version": version,
                       "gen_ai.provider.name": "openai"}
        invoke = tracer.start_span(
            f"invoke_agent {AGENT}",
            start_time=t0,
            attributes={
                **agent_attrs,
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": "agent-1",
                "gen_ai.agent.description": "Answers weather questions",
                "gen_ai.agent.version": version,
                "gen_ai.conversation.id": conv,
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": msgs("user", question),
                "gen_ai.output.messages": msgs("assistant", answer),
                "customer.tier": "gold",
                "retries": 2,
            },
        )
        ctx = trace.set_span_in_context(invoke)

        def child(name: str, start: int, end: int, attrs: dict[str, Any], error: bool = False):
            sp = tracer.start_span(name, context=ctx, start_time=t0 + start * MS, attributes={
                **agent_attrs, **attrs})
            if error:
                sp.set_status(Status(StatusCode.ERROR, "tool timed out"))
            sp.end(end_time=t0 + end * MS)
            return sp

        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.input.messages": msgs("user", question)}
        c1 = child("chat gpt-4o", 100, 400, {**chat, "gen_ai.usage.input_tokens": 10,
                   "gen_ai.usage.output_tokens": 5,
                   "gen_ai.output.messages": msgs("assistant", CHECKING)})
        tool_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                      "gen_ai.tool.call.id": f"call-{n}",
                      "gen_ai.tool.call.arguments": json.dumps({"city": city})}
        if tool_error:
            tool_attrs["error.type"] = "TimeoutError"
        else:
            tool_attrs["gen_ai.tool.call.result"] = "sunny" if n == 0 else "cloudy"
        tool = child("execute_tool get_weather", 400, 600, tool_attrs, error=tool_error)
        c2 = child("chat gpt-4o", 600, 900, {**chat, "gen_ai.usage.input_tokens": 20,
                   "gen_ai.usage.output_tokens": 7,
                   "gen_ai.output.messages": msgs("assistant", answer)})
        invoke.end(end_time=t0 + 1000 * MS)
        trace_id, invoke_id = _hex(invoke)
        s.traces.append(trace_id)
        s.spans.append({"invoke": invoke_id, "chat1": _hex(c1)[1], "tool": _hex(tool)[1],
                        "chat2": _hex(c2)[1]})
    # Not agent spans: a plain OTel span (in the project) ...
    tracer.start_span("plain work", start_time=base_ns, attributes={"k": "v"}).end(
        end_time=base_ns + MS)
    assert provider.force_flush(30_000)
    provider.shutdown()
    server.wait_visible()
    return s


@pytest.fixture
def agents_client(client: Any, seed: Seed) -> Any:
    # ... and a weave op call.
    @weave.op
    def not_an_agent(x: int) -> int:
        return x

    not_an_agent(1)
    return client


def test_agents_aggregate_the_spans_that_name_them(agents_client: Any, seed: Seed) -> None:
    agents = list(agents_client.get_agents())
    assert len(agents) == 1
    a = agents[0]
    assert (a.agent_name, a.span_count, a.invocation_count) == (AGENT, 12, 3)
    assert (a.total_input_tokens, a.total_output_tokens) == (90, 36)
    assert a.total_duration_ms == 3 * (1000 + 300 + 200 + 300)
    assert a.error_count == 1
    assert a.first_seen == seed.start
    assert a.last_seen == seed.start + dt.timedelta(minutes=2, seconds=1)
    assert list(agents_client.get_agents(agent_name="nobody")) == []

    versions = {v.agent_version: v for v in agents_client.get_agent_versions(agent_name=AGENT)}
    assert sorted(versions) == ["v1", "v2"]
    assert (versions["v1"].span_count, versions["v1"].invocation_count) == (8, 2)
    assert (versions["v2"].span_count, versions["v2"].error_count) == (4, 1)
    assert versions["v2"].total_input_tokens == 30


def test_spans_read_back_with_their_genai_fields(agents_client: Any, seed: Seed) -> None:
    spans = list(agents_client.get_agent_spans())
    assert len(spans) == 12  # neither the plain span nor the op call
    assert len(agents_client.get_agent_spans()) == 12
    # Default order: newest first.
    assert [s.started_at for s in spans] == sorted((s.started_at for s in spans), reverse=True)

    tools = list(agents_client.get_agent_spans(
        agent_name=AGENT,
        query={"$expr": {"$eq": [{"$getField": "operation_name"}, {"$literal": "execute_tool"}]}},
        sort_by=[{"field": "started_at", "direction": "asc"}],
    ))
    assert [t.span_id for t in tools] == [s["tool"] for s in seed.spans]
    t0, t2 = tools[0], tools[2]
    assert (t0.tool_name, t0.tool_call_id, t0.status_code) == ("get_weather", "call-0", "UNSET")
    assert t0.trace_id == seed.traces[0] and t0.parent_span_id == seed.spans[0]["invoke"]
    assert (t2.status_code, t2.status_message, t2.error_type) == (
        "ERROR", "tool timed out", "TimeoutError")
    # Tool payloads are details: left out of list reads.
    assert t0.tool_call_arguments is None and t0.input_messages == []

    invoke = [s for s in spans if s.span_id == seed.spans[0]["invoke"]][0]
    assert (invoke.operation_name, invoke.agent_id, invoke.agent_version) == (
        "invoke_agent", "agent-1", "v1")
    assert invoke.agent_description == "Answers weather questions"
    assert (invoke.conversation_id, invoke.provider_name) == (CONV_A, "openai")
    assert invoke.span_name == f"invoke_agent {AGENT}" and invoke.span_kind == "INTERNAL"
    assert invoke.custom_attrs_string == {"customer.tier": "gold"}
    assert invoke.custom_attrs_int == {"retries": 2}

    # include_details (server client): messages and tool payloads.
    res = agents_client.server.agent_spans_query({
        "project_id": agents_client.project_id, "include_details": True,
        "query": {"$expr": {"$eq": [{"$getField": "span_id"}, {"$literal": seed.spans[0]["tool"]}]}},
    })
    assert res.total_count == 1
    detail = res.spans[0]
    assert json.loads(detail.tool_call_arguments) == {"city": "Paris"}
    assert detail.tool_call_result == "sunny"
    res = agents_client.server.agent_spans_query({
        "project_id": agents_client.project_id, "include_details": True,
        "query": {"$expr": {"$eq": [{"$getField": "span_id"}, {"$literal": seed.spans[0]["chat1"]}]}},
    })
    chat = res.spans[0]
    assert [(m.role, m.content) for m in chat.input_messages] == [("user", TURNS[0][3])]
    assert [(m.role, m.content) for m in chat.output_messages] == [("assistant", CHECKING)]
    assert (chat.input_tokens, chat.output_tokens, chat.response_model) == (
        10, 5, "gpt-4o-2024-08-06")


def test_spans_grouped_by_conversation(agents_client: Any, seed: Seed) -> None:
    res = agents_client.server.agent_spans_query({
        "project_id": agents_client.project_id,
        "group_by": [{"source": "field", "key": "conversation_id"}],
        "measures": [{"alias": "tool_calls", "aggregation": "count",
                      "filter": {"$expr": {"$eq": [{"$getField": "operation_name"},
                                                   {"$literal": "execute_tool"}]}}},
                     {"alias": "max_out", "aggregation": "max",
                      "value": {"source": "field", "key": "output_tokens"}}],
        "sort_by": [{"field": "span_count", "direction": "desc"}],
    })
    assert res.total_count == 2
    a, b = res.groups
    assert (a.group_keys, a.span_count, a.invocation_count, a.conversation_count) == (
        {"conversation_id": CONV_A}, 8, 2, 1)
    assert (a.total_input_tokens, a.total_output_tokens, a.error_count) == (60, 24, 0)
    assert a.metrics == {"tool_calls": 2, "max_out": 7}
    assert (a.agent_names, a.agent_versions, a.request_models) == ([AGENT], ["v1"], ["gpt-4o"])
    assert (a.first_message.role, a.first_message.text) == ("user_message", TURNS[0][3])
    assert (a.last_message.role, a.last_message.text) == ("assistant_message", TURNS[1][4])
    assert (b.group_keys, b.span_count, b.error_count) == ({"conversation_id": CONV_B}, 4, 1)

    # group_filters keep the groups whose measure lies in range.
    res = agents_client.server.agent_spans_query({
        "project_id": agents_client.project_id,
        "group_by": [{"source": "field", "key": "conversation_id", "alias": "conv"}],
        "group_filters": [{"measure": {"alias": "n", "aggregation": "count"}, "min": 5}],
    })
    assert [g.group_keys for g in res.groups] == [{"conv": CONV_A}]


def test_turn_chat_is_the_trajectory(agents_client: Any, seed: Seed) -> None:
    turn = agents_client.get_agent_turn(trace_id=seed.traces[0])
    ids = seed.spans[0]
    got = [(m.type, m.span_id) for m in turn.messages]
    assert got == [
        ("user_message", None),
        ("agent_start", ids["invoke"]),
        ("assistant_message", ids["chat1"]),
        ("tool_call", ids["tool"]),
        ("assistant_message", ids["chat2"]),  # the agent's own answer is the same text
    ]
    user, start, first, tool, answer = turn.messages
    assert user.user_message.text == TURNS[0][3] and user.agent_name == "User"
    assert start.agent_start.model == "gpt-4o" and start.agent_name == AGENT
    assert first.assistant_message.text == CHECKING
    assert (first.assistant_message.input_tokens, first.assistant_message.output_tokens) == (10, 5)
    assert first.assistant_message.model == "gpt-4o-2024-08-06"
    assert tool.tool_call.tool_name == "get_weather"
    assert json.loads(tool.tool_call.tool_arguments) == {"city": "Paris"}
    assert (tool.tool_call.tool_result, tool.tool_call.duration_ms) == ("sunny", 200)
    assert answer.assistant_message.text == TURNS[0][4]
    assert (turn.trace_id, turn.agent_name, turn.agent_version) == (seed.traces[0], AGENT, "v1")
    assert (turn.total_input_tokens, turn.total_output_tokens) == (30, 12)
    assert (turn.total_duration_ms, turn.root_span_name, turn.provider) == (1000, AGENT, "openai")
    assert turn.started_at == seed.start

    error_turn = agents_client.get_agent_turn(trace_id=seed.traces[2])
    tool = [m for m in error_turn.messages if m.type == "tool_call"][0]
    assert (tool.status_code, tool.tool_call.status, tool.error_type) == (
        "ERROR", "ERROR", "TimeoutError")
    assert agents_client.get_agent_turn(trace_id="0" * 32).messages == []


def test_conversation_turns_page_from_the_most_recent(agents_client: Any, seed: Seed) -> None:
    res = agents_client.get_agent_turns(conversation_id=CONV_A)
    assert (res.total_turns, res.has_more) == (2, False)
    assert [t.trace_id for t in res.turns] == seed.traces[:2]
    assert res.turns[1].messages[0].user_message.text == TURNS[1][3]
    latest = agents_client.get_agent_turns(conversation_id=CONV_A, limit=1)
    assert ([t.trace_id for t in latest.turns], latest.has_more) == ([seed.traces[1]], True)
    older = agents_client.get_agent_turns(conversation_id=CONV_A, limit=1, offset=1)
    assert ([t.trace_id for t in older.turns], older.has_more) == ([seed.traces[0]], False)
    assert agents_client.get_agent_turns(conversation_id="nope").total_turns == 0


def test_conversation_spans(agents_client: Any, seed: Seed) -> None:
    res = agents_client.server.agent_conversation_spans(
        {"project_id": agents_client.project_id, "conversation_ids": [CONV_B, CONV_A]})
    b, a = res.conversations
    assert (a.conversation_id, b.conversation_id) == (CONV_A, CONV_B)
    order = ["invoke", "chat1", "tool", "chat2"]
    assert [s.span_id for s in a.spans] == [t[k] for t in seed.spans[:2] for k in order]
    assert [s.operation_name for s in b.spans] == [
        "invoke_agent", "chat", "execute_tool", "chat"]
    assert [s.status for s in b.spans] == ["UNSET", "UNSET", "ERROR", "UNSET"]
    assert [s.duration_ms for s in b.spans] == [1000, 300, 200, 300]
    assert a.spans_feedback == []


def test_span_stats(agents_client: Any, seed: Seed) -> None:
    res = agents_client.get_agent_span_stats(
        start=seed.start - dt.timedelta(hours=1),
        end=seed.start + dt.timedelta(hours=1),
        granularity=3600,
        metrics=[{"alias": "tokens", "value": {"source": "derived", "key": "total_tokens"},
                  "value_type": "number", "aggregations": ["sum"]},
                 {"alias": "errors", "value": {"source": "derived", "key": "is_error"},
                  "value_type": "boolean", "aggregations": ["count_true"]}],
        group_by=[{"source": "field", "key": "agent_version"}],
    )
    assert res.granularity == 3600 and res.timezone == "UTC" and res.bucket_type == "time"
    assert [(c.name, c.role) for c in res.columns] == [
        ("timestamp", "time"), ("agent_version", "group"), ("tokens_sum", "metric"),
        ("errors_count_true", "metric")]
    by_version: dict[str, list[float]] = {}
    for row in res.rows:
        t = row["timestamp"]
        t = t if isinstance(t, dt.datetime) else dt.datetime.fromisoformat(t)
        assert t.timestamp() % 3600 == 0
        acc = by_version.setdefault(row["agent_version"], [0, 0])
        acc[0] += row["tokens_sum"]
        acc[1] += row["errors_count_true"]
    assert by_version == {"v1": [84, 0], "v2": [42, 1]}


def test_custom_attributes(agents_client: Any, seed: Seed) -> None:
    res = agents_client.get_agent_custom_attributes()
    got = [(a.key, a.source, a.value_type, a.span_count) for a in res.attributes]
    assert got == [("customer.tier", "custom_attrs_string", "string", 3),
                   ("retries", "custom_attrs_int", "int", 3)]
    assert res.has_more is False
    page = agents_client.get_agent_custom_attributes(limit=1)
    assert [a.key for a in page.attributes] == ["customer.tier"] and page.has_more is True
    # A filter over custom attributes: none of the chat spans carry them.
    res = agents_client.get_agent_custom_attributes(query={"$expr": {"$eq": [
        {"$getField": "operation_name"}, {"$literal": "chat"}]}})
    assert res.attributes == []


def test_search_finds_messages_by_conversation(agents_client: Any, seed: Seed) -> None:
    res = agents_client.search_agents(query="PARIS")
    assert res.total_conversations == 1
    [conv] = res.results
    assert (conv.conversation_id, conv.agent_name) == (CONV_A, AGENT)
    ids = seed.spans[0]
    got = sorted((m.span_id, m.role) for m in conv.matched_messages)
    assert got == sorted([
        (ids["invoke"], "user"), (ids["invoke"], "assistant"), (ids["chat1"], "user"),
        (ids["chat2"], "user"), (ids["chat2"], "assistant"), (ids["tool"], "tool_call")])
    assert all(m.trace_id == seed.traces[0] for m in conv.matched_messages)
    answer = [m for m in conv.matched_messages if m.role == "assistant"][0]
    assert answer.content_preview == TURNS[0][4]
    # Structured retrieval: an empty query with filters.
    res = agents_client.search_agents(conversation_id=CONV_B)
    assert [r.conversation_id for r in res.results] == [CONV_B]
    assert agents_client.search_agents(query="no such words").results == []


def test_bounds_and_errors_answer_400(agents_client: Any, server: HeddleServer) -> None:
    pid = agents_client.project_id
    for path, body in [
        ("/agents/query", {"limit": 10_001}),
        ("/agents/spans/query", {"offset": -1}),
        ("/agents/spans/query", {"query": {"$expr": {"$eq": [{"$getField": "nope"},
                                                           {"$literal": 1}]}}}),
        ("/agents/spans/query", {"sort_by": [{"field": "nope"}]}),
        ("/agents/search", {"query": "x" * 1025}),
        ("/agents/conversations/chat", {"conversation_id": "c", "limit": 51}),
        ("/agents/conversations/spans", {"conversation_ids": [str(i) for i in range(101)]}),
        ("/agents/spans/stats", {"start": "2020-01-01T00:00:00Z", "end": "2020-03-01T00:00:00Z",
                                 "metrics": [{"alias": "n", "value": {"key": "input_tokens"},
                                              "value_type": "number"}]}),
    ]:
        r = server.post(path, {"project_id": pid, **body})
        assert r.status_code == 400, (path, body, r.status_code, r.text)
        assert r.json()["reason"], r.text
    r = requests.post(server.url + "/agents/query", json={"project_id": pid}, timeout=10)
    assert r.status_code == 401
