"""OTLP log ingest driven by the official OpenTelemetry Python SDK (docs/api/otel.md, docs/otlp.md
"Log records"): an LLM span whose messages are emitted as log records (events) inside it, the
way GenAI instrumentations such as opentelemetry-instrumentation-openai-v2 do, exported with the
unmodified OTLPLogExporter and OTLPSpanExporter over HTTP. The records reach the server before
the span in one test and after it in another; the weave SDK then reads the call
(`client.get_call`) and its inputs and output must be exactly the messages.

Distributed mode: every read first waits on the visibility barrier (HeddleServer.wait_visible),
which counts the log records' Kafka records like any other.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from heddle_support import (  # isort: skip  (sets the SDK env before weave is imported)
    HeddleServer,
    basic_auth,
    describe_response,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: E402
    OTLPSpanExporter,
)
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (  # noqa: E402
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider  # noqa: E402
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

EXPORT_TIMEOUT_S = 10
SCOPE = "heddle-otel-logs-tests"

# The conversation the instrumentation logs: (event name, body) in order, then the choice.
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
}
MESSAGES = [
    ("gen_ai.system.message", {"content": "You add numbers."}),
    ("gen_ai.user.message", {"content": "What is 2+2?"}),
    ("gen_ai.assistant.message", {"tool_calls": [TOOL_CALL]}),
    ("gen_ai.tool.message", {"content": "4", "id": "call_1"}),
]
CHOICE = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}

WANT_INPUTS = {
    "messages": [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "4", "id": "call_1"},
    ]
}
WANT_OUTPUT = {"choices": [CHOICE]}


class Exporters:
    """A TracerProvider and a LoggerProvider exporting over OTLP/HTTP protobuf; nothing leaves
    before `flush_spans` / `flush_logs`, so a test picks which reaches the server first. Every
    response the exporters got is kept (they reduce it to SUCCESS/FAILURE)."""

    def __init__(self, server: HeddleServer, pid: str) -> None:
        headers = {"Authorization": basic_auth(server.api_key), "project_id": pid}
        self.responses: list[requests.Response] = []
        session = requests.Session()
        session.hooks["response"].append(lambda r, *a, **kw: self.responses.append(r))
        resource = Resource.create({"service.name": "heddle-otel-logs-tests"})
        self.tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(
                    endpoint=server.url + "/otel/v1/traces",
                    headers=headers,
                    timeout=EXPORT_TIMEOUT_S,
                    session=session,
                ),
                schedule_delay_millis=60_000,
            )
        )
        self.logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(
                OTLPLogExporter(
                    endpoint=server.url + "/otel/v1/logs",
                    headers=headers,
                    timeout=EXPORT_TIMEOUT_S,
                    session=session,
                ),
                schedule_delay_millis=60_000,
            )
        )
        self.tracer = self.tracer_provider.get_tracer(SCOPE)
        self.logger = self.logger_provider.get_logger(SCOPE)

    def flush_spans(self) -> None:
        assert self.tracer_provider.force_flush(30_000), "span flush timed out"

    def flush_logs(self) -> None:
        assert self.logger_provider.force_flush(30_000), "log flush timed out"

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()

    def check_accepted(self, paths: set[str]) -> None:
        """Every export reached the server and was accepted whole, on each of `paths`."""
        seen = set()
        for r in self.responses:
            assert r.status_code == 200, describe_response(r)
            path = r.request.path_url
            seen.add(path)
            if path == "/otel/v1/logs":
                answer = ExportLogsServiceResponse.FromString(r.content)
                assert answer.partial_success.rejected_log_records == 0, answer
        assert seen == paths, seen


def chat_span(otel: Exporters, events: list[tuple[str, dict[str, Any]]]) -> str:
    """Records an LLM span and logs `events` inside it, as the OpenAI instrumentation does
    (event name in the LogRecord's event_name, body the message, trace and span ids from the
    current span). Returns the span id in hex."""
    with otel.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as span:
        span.set_attribute("gen_ai.system", "openai")
        span.set_attribute("gen_ai.request.model", "gpt-4o")
        for name, body in events:
            otel.logger.emit(
                event_name=name, body=body, attributes={"gen_ai.system": "openai"}
            )
        return format(span.get_span_context().span_id, "016x")


def plain(v: Any) -> Any:
    """A value the weave SDK returns (WeaveDict, WeaveList, ...) as plain JSON."""
    return json.loads(json.dumps(v, default=lambda o: dict(o) if hasattr(o, "keys") else list(o)))


def read_call(client: Any, server: HeddleServer, span_id: str) -> Any:
    server.wait_visible()
    return client.get_call(span_id)


@pytest.mark.parametrize("order", ["logs-first", "spans-first"])
def test_message_events_become_the_calls_inputs_and_output(
    client: Any, server: HeddleServer, order: str
) -> None:
    pid = f"{client.entity}/{client.project}"
    otel = Exporters(server, pid)
    try:
        span_id = chat_span(otel, [*MESSAGES, ("gen_ai.choice", CHOICE)])
        if order == "logs-first":
            otel.flush_logs()
            server.wait_visible()
            otel.flush_spans()
        else:
            otel.flush_spans()
            server.wait_visible()
            # The call exists already, with nothing in it yet.
            early = client.get_call(span_id)
            assert plain(early.inputs) == {} and early.output is None, early
            otel.flush_logs()
    finally:
        otel.close()
    otel.check_accepted({"/otel/v1/traces", "/otel/v1/logs"})

    call = read_call(client, server, span_id)
    assert plain(call.inputs) == WANT_INPUTS
    assert plain(call.output) == WANT_OUTPUT
    assert call.attributes["model"] == "gpt-4o"
    # The records as stored, readable on their own too.
    r = server.post("/otel/logs/query", {"project_id": pid, "span_id": span_id})
    assert r.status_code == 200, describe_response(r)
    names = [log["event_name"] for log in r.json()["logs"]]
    assert names == [name for name, _ in MESSAGES] + ["gen_ai.choice"]


def test_inference_details_event_and_records_without_a_span(
    client: Any, server: HeddleServer
) -> None:
    """The newer GenAI convention (one `gen_ai.client.inference.operation.details` event with
    the messages as attributes), spans first; and a log record outside any span, which stays
    readable through /otel/logs/query."""
    pid = f"{client.entity}/{client.project}"
    otel = Exporters(server, pid)
    input_messages = [{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]
    output_messages = [
        {"role": "assistant", "parts": [{"type": "text", "content": "Hello"}], "finish_reason": "stop"}
    ]
    try:
        with otel.tracer.start_as_current_span("chat gpt-4o") as span:
            span_id = format(span.get_span_context().span_id, "016x")
            otel.logger.emit(
                event_name="gen_ai.client.inference.operation.details",
                attributes={
                    "gen_ai.input.messages": json.dumps(input_messages),
                    "gen_ai.output.messages": json.dumps(output_messages),
                },
            )
        otel.logger.emit(body="outside any span", severity_text="INFO")
        otel.flush_spans()
        server.wait_visible()
        otel.flush_logs()
    finally:
        otel.close()
    otel.check_accepted({"/otel/v1/traces", "/otel/v1/logs"})

    call = read_call(client, server, span_id)
    assert plain(call.inputs) == {"gen_ai.input.messages": input_messages}
    assert plain(call.output) == {"gen_ai.output.messages": output_messages}
    r = server.post("/otel/logs/query", {"project_id": pid, "span_id": ""})
    assert r.status_code == 200, describe_response(r)
    logs = r.json()["logs"]
    assert [(log["body"], log["span_id"], log["severity_text"]) for log in logs] == [
        ("outside any span", None, "INFO")
    ]
