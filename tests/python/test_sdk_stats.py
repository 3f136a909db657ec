"""Usage and statistics through the real weave SDK's server client (docs/api/usage.md,
docs/api/feedback.md#feedback-statistics, docs/api/service.md): `trace_usage`, `calls_usage`,
`call_stats`, `feedback_stats`, `feedback_payload_schema`, `projects_info` and `project_stats`, each writing
calls or feedback first and comparing exact numbers read back.

The Vercel AI SDK shape — an `ai.generateText` wrapper span and its `ai.generateText.doGenerate`
provider span both carrying the same usage — is sent through the OpenTelemetry SDK's OTLP/HTTP
exporter: the trace's usage must count those tokens once. The Python SDK's own roll-up (a
parent's summary sums its children's usage) must not double count either.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from heddle_support import (  # isort: skip  (sets the SDK env before weave is imported)
    HeddleServer,
    basic_auth,
)
import weave  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: E402
    OTLPSpanExporter,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402


def _pid(client: Any) -> str:
    return f"{client.entity}/{client.project}"


def _usage(res: Any) -> dict[str, dict[str, Any]]:
    return {cid: {m: u.model_dump() for m, u in by_model.items()} for cid, by_model in res.call_usage.items()}


def test_vercel_wrapper_and_provider_spans_count_once(server: HeddleServer, client: Any) -> None:
    pid = _pid(client)
    provider = TracerProvider()
    exporter = OTLPSpanExporter(
        endpoint=server.url + "/otel/v1/traces",
        headers={"Authorization": basic_auth(server.api_key), "project_id": pid},
        timeout=10,
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vercel-like")
    usage = {"ai.model.id": "gpt-4o-mini", "ai.usage.promptTokens": 11, "ai.usage.completionTokens": 7}
    with tracer.start_as_current_span("ai.generateText", attributes=usage) as wrapper:
        with tracer.start_as_current_span("ai.generateText.doGenerate", attributes=usage) as gen:
            pass
    provider.shutdown()
    server.wait_visible()
    trace_id = format(wrapper.get_span_context().trace_id, "032x")
    wrapper_id = format(wrapper.get_span_context().span_id, "016x")
    gen_id = format(gen.get_span_context().span_id, "016x")

    res = client.server.trace_usage(
        {"project_id": pid, "filter": {"trace_ids": [trace_id]}, "include_costs": True}
    )
    got = _usage(res)
    assert set(got) == {wrapper_id, gen_id}, got
    for cid in (wrapper_id, gen_id):
        u = got[cid]["gpt-4o-mini"]
        assert (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == (11, 7, 18), got
        # Built-in gpt-4o-mini price: $0.15 / $0.60 per million tokens.
        assert abs(u["prompt_tokens_total_cost"] - 11 * 0.15e-6) < 1e-12, u
        assert abs(u["completion_tokens_total_cost"] - 7 * 0.6e-6) < 1e-12, u
    assert res.unfinished_call_ids == []


@weave.op
def llm(prompt: str, n: int) -> dict[str, Any]:
    return {"model": "sdk-model", "usage": {"prompt_tokens": n, "completion_tokens": 2 * n}}


@weave.op
def agent(prompt: str) -> str:
    llm(prompt, 3)
    llm(prompt, 5)
    return "done"


def test_sdk_rollup_is_not_double_counted(server: HeddleServer, client: Any) -> None:
    _, call = agent.call("hi")
    client.flush()
    server.wait_visible()
    pid = _pid(client)
    # The SDK put the children's sum into the parent's summary.
    read = client.get_call(call.id)
    assert read.summary["usage"]["sdk-model"]["prompt_tokens"] == 8

    res = client.server.calls_usage({"project_id": pid, "call_ids": [call.id]})
    u = _usage(res)[call.id]["sdk-model"]
    assert (u["prompt_tokens"], u["completion_tokens"], u["requests"]) == (8, 16, 2), u

    stats = client.server.call_stats(
        {
            "project_id": pid,
            "start": (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).isoformat(),
            "granularity": 7200,
            "call_metrics": [{"metric": "call_count", "aggregations": ["sum"]}],
            "usage_metrics": [{"metric": "input_tokens", "aggregations": ["sum"]}],
        }
    )
    assert sum(b["sum_call_count"] for b in stats.call_buckets) == 3, stats
    assert [(b["model"], b["sum_input_tokens"]) for b in stats.usage_buckets] == [("sdk-model", 8)]


def test_feedback_stats_and_schema(server: HeddleServer, client: Any) -> None:
    _, call = llm.call("q", 1)
    client.flush()
    server.wait_visible()
    for score in (1, 2, 6):
        call.feedback.add("quality", {"score": score, "good": score > 1})
    client.flush()
    pid = _pid(client)
    rows = client.server.feedback_query({"project_id": pid})
    assert len(rows.result) == 3, rows
    start = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).isoformat()
    stats = client.server.feedback_stats(
        {
            "project_id": pid,
            "start": start,
            "feedback_type": "quality",
            "metrics": [
                {"json_path": "score", "value_type": "numeric", "aggregations": ["sum", "avg"]},
                {"json_path": "good", "value_type": "boolean"},
            ],
        }
    )
    assert stats.window_stats["score"] == {"sum": 9.0, "avg": 3.0}, stats
    assert stats.window_stats["good"] == {"count_true": 2, "count_false": 1}, stats
    schema = client.server.feedback_payload_schema({"project_id": pid, "start": start})
    assert [(p.json_path, p.value_type) for p in schema.paths] == [
        ("good", "boolean"),
        ("score", "numeric"),
    ]


def test_projects_info_names_the_project(client: Any) -> None:
    pid = _pid(client)
    infos = client.server.projects_info({"project_ids": [pid]})
    assert [(i.external_project_id, i.internal_project_id) for i in infos] == [(pid, pid)]


def test_project_stats_count_what_was_written(server: HeddleServer, client: Any) -> None:
    pid = _pid(client)
    before = client.server.project_stats({"project_id": pid})
    weave.publish({"text": "x" * 5000}, name="big-object")
    llm.call("y" * 3000, 1)
    client.flush()
    server.wait_visible()
    after = client.server.project_stats({"project_id": pid})
    assert after.objects_storage_size_bytes - before.objects_storage_size_bytes >= 5000
    assert after.trace_storage_size_bytes - before.trace_storage_size_bytes >= 3000
    only_files = client.server.project_stats(
        {
            "project_id": pid,
            "include_trace_storage_size": False,
            "include_object_storage_size": False,
            "include_table_storage_size": False,
        }
    )
    assert only_files.trace_storage_size_bytes == 0
    assert only_files.objects_storage_size_bytes == 0
    assert only_files.files_storage_size_bytes == after.files_storage_size_bytes
