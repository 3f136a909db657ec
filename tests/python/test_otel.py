"""OTLP trace ingest driven by the official OpenTelemetry Python SDK and its OTLP exporters
(docs/api/otel.md): OTLP/HTTP protobuf (plain and gzip) at /otel/v1/traces (and the SDK's
/agents/otel/v1/traces alias), and OTLP/gRPC TraceService/Export on `--otlp-grpc-listen`.

Every test records real spans with a TracerProvider, exports them with the unmodified exporter,
checks the exporter's own verdict (SpanExportResult) and then reads the calls back
(/calls/stream_query by trace id, /obj/read, the weave SDK) and compares them with what the SDK
recorded: ids, parent links, op refs, inputs/outputs from the GenAI and OpenInference
conventions, usage, attributes, timings, status, exceptions, threads and turns, and routing and
auth (bad keys and foreign projects store nothing).

Distributed mode (HEDDLE_TEST_STORE=distributed): an OTLP answer means "in Kafka"; every read
first waits on the server's visibility barrier (HeddleServer.wait_visible), which compares the
produced and stored record counts and so covers OTLP writes as well.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from heddle_support import (  # isort: skip  (sets the SDK env before weave is imported)
    DEFAULT_ENTITY,
    HeddleServer,
    basic_auth,
    describe_response,
    eventually,
)
import grpc  # noqa: E402
import weave  # noqa: E402
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: E402
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: E402
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: E402

OTLP_PATH = "/otel/v1/traces"
AGENTS_OTLP_PATH = "/agents/otel/v1/traces"
SCOPE_NAME, SCOPE_VERSION = "heddle-otel-tests", "1.2.3"
# Per export attempt; the exporters retry only on 429/5xx (HTTP) or UNAVAILABLE & co (gRPC), and
# never beyond this deadline, so a broken server fails a test in seconds, not minutes.
EXPORT_TIMEOUT_S = 10

# What the SDK records for the LLM spans (and what the calls must show).
GENAI_IN = [{"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]}]
GENAI_OUT = [
    {"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}
]
OI_IN = {"question": "Why is the sky blue?", "context": ["physics"]}
OI_OUT = "Rayleigh scattering."


# ---------------------------------------------------------------------------------------------
# The OpenTelemetry side
# ---------------------------------------------------------------------------------------------
class RecordingExporter(SpanExporter):
    """Wraps a real OTLP exporter unchanged, keeping every span it was given and every result
    it returned (the processors drop the result; the tests must see it)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.spans: list[ReadableSpan] = []
        self.results: list[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.spans.extend(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class Otel:
    """A TracerProvider exporting through `exporter`: batched (one request for everything, on
    force_flush) or simple (one request per span as it ends — children before their parent)."""

    def __init__(
        self, exporter: SpanExporter, *, batch: bool = True, resource: dict[str, Any] | None = None
    ) -> None:
        self.recorder = RecordingExporter(exporter)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "heddle-otel-tests", **(resource or {})}),
            shutdown_on_exit=False,
        )
        processor = (
            # Nothing leaves before force_flush: the whole trace goes in one request.
            BatchSpanProcessor(self.recorder, schedule_delay_millis=60_000)
            if batch
            else SimpleSpanProcessor(self.recorder)
        )
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SCOPE_NAME, SCOPE_VERSION)

    def finish(self) -> list[SpanExportResult]:
        """Flushes and shuts the provider down; the export results, one per request."""
        try:
            assert self.provider.force_flush(30_000), "span processor flush timed out"
        finally:
            self.provider.shutdown()
        return self.recorder.results

    def finish_ok(self) -> list[ReadableSpan]:
        results = self.finish()
        assert results and all(r is SpanExportResult.SUCCESS for r in results), (
            f"exporter reported {results}"
        )
        return self.recorder.spans


@dataclass
class Attempt:
    """One request an exporter made and what the server answered: `status` is the HTTP status
    ("200", "401", ...) or the gRPC code name ("OK", "UNAUTHENTICATED", ...), `reason` the error
    body or gRPC status message. The exporters reduce all this to SUCCESS/FAILURE (the gRPC one
    logs the code, through a filter that drops repeated messages), so the tests keep it."""

    status: str
    reason: str
    answer: ExportTraceServiceResponse | None = None
    http: requests.Response | None = None

    def describe(self) -> str:
        return describe_response(self.http) if self.http is not None else str(self)


def _http_attempt(r: requests.Response) -> Attempt:
    answer = None
    if r.status_code == 200:
        assert r.headers.get("content-type", "").startswith("application/x-protobuf"), (
            describe_response(r)
        )
        answer = ExportTraceServiceResponse.FromString(r.content)
    return Attempt(str(r.status_code), "" if answer else r.text, answer, r)


def http_exporter(
    server: HeddleServer,
    headers: dict[str, str],
    *,
    path: str = OTLP_PATH,
    compression: HttpCompression | None = None,
) -> tuple[HttpSpanExporter, list[Attempt]]:
    """The OTLP/HTTP protobuf exporter on a requests session that logs every response."""
    session = requests.Session()
    attempts: list[Attempt] = []
    session.hooks["response"].append(lambda r, *a, **kw: attempts.append(_http_attempt(r)))
    exporter = HttpSpanExporter(
        endpoint=server.url + path,
        headers=headers,
        timeout=EXPORT_TIMEOUT_S,
        compression=compression,
        session=session,
    )
    return exporter, attempts


class RecordingGrpcExporter(GrpcSpanExporter):
    """The OTLP/gRPC exporter, unchanged, except that each TraceService/Export RPC's outcome
    is logged (its stub's Export is wrapped whenever the exporter (re)creates the channel)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.attempts: list[Attempt] = []  # before super(): it creates the stub
        super().__init__(*args, **kwargs)

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        export, attempts = self._client.Export, self.attempts

        def recording_export(*args: Any, **kwargs: Any) -> Any:
            try:
                answer = export(*args, **kwargs)
            except grpc.RpcError as e:
                attempts.append(Attempt(e.code().name, str(e.details())))
                raise
            attempts.append(Attempt("OK", "", answer))
            return answer

        self._client.Export = recording_export


def grpc_exporter(
    server: HeddleServer, headers: dict[str, str], *, gzip: bool = True
) -> tuple[RecordingGrpcExporter, list[Attempt]]:
    """The OTLP/gRPC exporter; `headers` become (lowercase) metadata."""
    exporter = RecordingGrpcExporter(
        endpoint=server.grpc_endpoint,
        insecure=True,
        headers=tuple((k.lower(), v) for k, v in headers.items()),
        timeout=EXPORT_TIMEOUT_S,
        compression=grpc.Compression.Gzip if gzip else grpc.Compression.NoCompression,
    )
    return exporter, exporter.attempts


def exporter_for(
    server: HeddleServer, transport: str, headers: dict[str, str]
) -> tuple[SpanExporter, list[Attempt]]:
    if transport == "http":
        return http_exporter(server, headers)
    if transport == "http-agents":
        return http_exporter(server, headers, path=AGENTS_OTLP_PATH)
    assert transport == "grpc", transport
    return grpc_exporter(server, headers)


def check_accepted(attempts: list[Attempt], *, gzip: bool | None = None) -> None:
    """Every export request was accepted whole (no partial_success); HTTP requests were
    protobuf, gzip-compressed exactly when `gzip`."""
    assert attempts, "the exporter sent no request"
    for a in attempts:
        assert a.status in ("200", "OK"), a.describe()
        assert a.answer is not None, a.describe()
        assert a.answer.partial_success.rejected_spans == 0, a.answer
        assert a.answer.partial_success.error_message == "", a.answer
        if a.http is None:
            continue
        req = a.http.request
        assert req.headers.get("Content-Type") == "application/x-protobuf", req.headers
        assert isinstance(req.body, bytes), type(req.body)
        if gzip:
            assert req.headers.get("Content-Encoding") == "gzip", req.headers
            assert req.body[:2] == b"\x1f\x8b", "the body is not gzip"
        else:
            assert "Content-Encoding" not in req.headers, req.headers


def project_headers(server: HeddleServer, pid: str) -> dict[str, str]:
    return {"Authorization": basic_auth(server.api_key), "project_id": pid}


# ---------------------------------------------------------------------------------------------
# Ids, times, read-back
# ---------------------------------------------------------------------------------------------
def span_hex(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x")


def trace_hex(span: ReadableSpan) -> str:
    return format(span.context.trace_id, "032x")


_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def epoch_us(ts: str) -> int:
    """An RFC 3339 timestamp as integer microseconds since the epoch (no float rounding)."""
    m = _TS.match(ts)
    assert m, f"not an RFC 3339 timestamp with offset: {ts!r}"
    offset = "+00:00" if m[3] == "Z" else m[3]
    whole = dt.datetime.fromisoformat(m[1] + offset)
    nanos = int((m[2] or "").ljust(9, "0"))
    return int(whole.timestamp()) * 1_000_000 + nanos // 1_000


def safe_op_name(span_name: str) -> str:
    """The object id of a span name's placeholder op (lower case, spaces and '/' as '_')."""
    return span_name.lower().replace(" ", "_").replace("/", "_")


def op_ref_re(pid: str, span_name: str) -> re.Pattern[str]:
    return re.compile(rf"^weave:///{re.escape(pid)}/op/{re.escape(safe_op_name(span_name))}:(\w+)$")


def read_trace(server: HeddleServer, pid: str, trace_id: str, n: int) -> dict[str, dict]:
    """The calls of one trace, by id, once exactly `n` are visible."""
    server.wait_visible()

    def check() -> list[dict]:
        rows = server.stream_calls(
            pid,
            filter={"trace_ids": [trace_id]},
            sort_by=[{"field": "started_at", "direction": "asc"}],
        )
        assert len(rows) >= n, f"expected {n} calls of trace {trace_id} in {pid}: {rows}"
        return rows

    rows = eventually(check)
    assert len(rows) == n, f"expected exactly {n} calls of trace {trace_id}: {rows}"
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == n, f"duplicate call ids: {[r['id'] for r in rows]}"
    return by_id


def assert_nothing_stored(server: HeddleServer, pid: str, trace_id: str) -> None:
    server.wait_visible()  # a write that was (wrongly) acknowledged would be visible now
    rows = server.stream_calls(pid, filter={"trace_ids": [trace_id]})
    assert rows == [], f"a rejected export stored calls in {pid}: {rows}"
    assert server.stream_calls(pid) == [], f"{pid} must stay empty"


def check_call_matches_span(call: dict, span: ReadableSpan, pid: str) -> None:
    """Identity, op ref, timings and the otel_dump of one call against the SDK's span."""
    assert call["project_id"] == pid, call
    assert call["id"] == span_hex(span), (call["id"], span_hex(span))
    assert call["trace_id"] == trace_hex(span), call
    parent = format(span.parent.span_id, "016x") if span.parent is not None else None
    assert call["parent_id"] == parent, (call["parent_id"], parent)
    assert op_ref_re(pid, span.name).match(call["op_name"]), (span.name, call["op_name"])
    assert span.start_time is not None and span.end_time is not None
    # The server keeps microseconds: the SDK's nanosecond times, truncated.
    started, ended = epoch_us(call["started_at"]), epoch_us(call["ended_at"])
    assert started == span.start_time // 1_000, (call["started_at"], span.start_time)
    assert ended == span.end_time // 1_000, (call["ended_at"], span.end_time)
    weave_summary = call["summary"]["weave"]
    assert weave_summary["latency_ms"] == (ended - started) // 1_000, call["summary"]
    assert weave_summary["trace_name"] == safe_op_name(span.name), call["summary"]
    dump = call["otel_dump"]
    assert dump["name"] == span.name, dump
    assert dump["context"]["span_id"] == span_hex(span), dump
    assert dump["context"]["trace_id"] == trace_hex(span), dump
    assert dump["parent_id"] == parent, dump
    assert dump["kind"] == span.kind.name, dump
    assert dump["scope"] == {"name": SCOPE_NAME, "version": SCOPE_VERSION}, dump
    assert dump["resource"]["attributes"]["service"]["name"] == "heddle-otel-tests", dump
    assert dump["resource"]["attributes"]["telemetry"]["sdk"]["language"] == "python", dump


def check_placeholder_op(server: HeddleServer, pid: str, op_name: str, span_name: str) -> None:
    """The op ref of an OTel call resolves to a stored placeholder op and its source file."""
    m = op_ref_re(pid, span_name).match(op_name)
    assert m, op_name
    object_id, digest = safe_op_name(span_name), m[1]
    obj = server.post_ok(
        "/obj/read", {"project_id": pid, "object_id": object_id, "digest": digest}
    )["obj"]
    assert obj["kind"] == "op" and obj["digest"] == digest and obj["object_id"] == object_id, obj
    assert obj["val"]["_type"] == "CustomWeaveType" and obj["val"]["weave_type"]["type"] == "Op"
    r = server.post("/file/content", {"project_id": pid, "digest": obj["val"]["files"]["obj.py"]})
    assert r.status_code == 200, describe_response(r)
    assert b"def func(*args, **kwargs)" in r.content, r.content


# ---------------------------------------------------------------------------------------------
# The traces the tests record
# ---------------------------------------------------------------------------------------------
def record_agent_trace(otel: Otel) -> None:
    """A root "agent run" span with two LLM children: one described with the OpenTelemetry
    GenAI conventions, one with OpenInference's."""
    tracer = otel.tracer
    with tracer.start_as_current_span(
        "agent run",
        attributes={
            "input": json.dumps({"task": "arithmetic", "n": 2}),
            "output": json.dumps({"answer": 4}),
            "app.version": "1.2.3",
            "app.tags": ["beta", "eval"],
        },
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.system": "openai",
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.request.temperature": 0.25,
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.usage.input_tokens": 21,
                "gen_ai.usage.output_tokens": 3,
                "gen_ai.input.messages": json.dumps(GENAI_IN),
                "gen_ai.output.messages": json.dumps(GENAI_OUT),
                "server.address": "api.openai.com",
                "server.port": 443,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "ChatCompletion/Anthropic",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "claude-3-5-sonnet",
                "llm.provider": "anthropic",
                "llm.invocation_parameters": json.dumps({"max_tokens": 64}),
                "input.value": json.dumps(OI_IN),
                "input.mime_type": "application/json",
                "output.value": OI_OUT,
                "llm.token_count.prompt": 12,
                "llm.token_count.completion": 7,
                "llm.token_count.total": 19,
            },
        ):
            pass


def check_agent_trace(server: HeddleServer, pid: str, spans: list[ReadableSpan]) -> None:
    """What record_agent_trace must have become."""
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == ["ChatCompletion/Anthropic", "agent run", "chat gpt-4o"], by_name
    root_span = by_name["agent run"]
    genai_span, oi_span = by_name["chat gpt-4o"], by_name["ChatCompletion/Anthropic"]
    assert len({trace_hex(s) for s in spans}) == 1

    calls = read_trace(server, pid, trace_hex(root_span), 3)
    root, genai, oi = (calls[span_hex(s)] for s in (root_span, genai_span, oi_span))
    for call, span in ((root, root_span), (genai, genai_span), (oi, oi_span)):
        check_call_matches_span(call, span, pid)
        assert call["exception"] is None, call
        assert call["summary"]["weave"]["status"] == "success", call["summary"]
        assert call["wb_user_id"] == "admin", call
        assert call["thread_id"] is None and call["turn_id"] is None, call

    # The tree: both LLM calls under the root, all in one trace.
    assert root["parent_id"] is None
    assert genai["parent_id"] == root["id"] and oi["parent_id"] == root["id"]
    assert genai["trace_id"] == oi["trace_id"] == root["trace_id"]
    for child in (genai, oi):
        assert epoch_us(root["started_at"]) <= epoch_us(child["started_at"])
        assert epoch_us(child["ended_at"]) <= epoch_us(root["ended_at"])

    # Root: the generic input/output attributes (an object input is the inputs itself).
    assert root["inputs"] == {"task": "arithmetic", "n": 2}, root["inputs"]
    assert root["output"] == {"answer": 4}, root["output"]
    assert root["attributes"] == {"app": {"version": "1.2.3", "tags": ["beta", "eval"]}}, root
    assert "usage" not in root["summary"], root["summary"]

    # GenAI: messages (JSON strings) as inputs/output under their attribute names, usage under
    # the response model, the extracted fields and the unmapped attributes nested.
    assert genai["inputs"] == {"gen_ai.input.messages": GENAI_IN}, genai["inputs"]
    assert genai["output"] == {"gen_ai.output.messages": GENAI_OUT}, genai["output"]
    assert genai["summary"]["usage"] == {
        "gpt-4o-2024-08-06": {
            "input_tokens": 21, "output_tokens": 3, "total_tokens": 24, "requests": 1,
        }
    }, genai["summary"]  # fmt: skip
    assert genai["attributes"] == {
        "system": "openai",
        "model": "gpt-4o-2024-08-06",
        "model_parameters": {"model": "gpt-4o", "temperature": 0.25},
        "operation_name": "chat",
        "server": {"address": "api.openai.com", "port": 443},
    }, genai["attributes"]
    assert genai["otel_dump"]["attributes"]["gen_ai"]["usage"]["input_tokens"] == 21

    # OpenInference: input.value / output.value, prompt/completion token counts.
    assert oi["inputs"] == {"input.value": OI_IN}, oi["inputs"]
    assert oi["output"] == {"output.value": OI_OUT}, oi["output"]
    assert oi["summary"]["usage"] == {
        "claude-3-5-sonnet": {
            "prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19, "requests": 1,
        }
    }, oi["summary"]  # fmt: skip
    assert oi["attributes"] == {
        "kind": "LLM",
        "model": "claude-3-5-sonnet",
        "provider": "anthropic",
        "model_parameters": {"max_tokens": 64},
        "input": {"mime_type": "application/json"},
    }, oi["attributes"]

    # Every op ref resolves to its stored placeholder op.
    for call, span in ((root, root_span), (genai, genai_span), (oi, oi_span)):
        check_placeholder_op(server, pid, call["op_name"], span.name)


def new_pid(name: str) -> str:
    return f"{DEFAULT_ENTITY}/otel-{name}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------------
# 1-3: the three transports
# ---------------------------------------------------------------------------------------------
def test_http_protobuf_exporter_nested_spans(server: HeddleServer) -> None:
    pid = new_pid("http")
    exporter, attempts = http_exporter(server, project_headers(server, pid))
    otel = Otel(exporter, batch=True)
    record_agent_trace(otel)
    spans = otel.finish_ok()
    assert len(attempts) == 1, "the batch processor sends the trace in one request"
    check_accepted(attempts, gzip=False)
    check_agent_trace(server, pid, spans)


def test_http_protobuf_exporter_gzip(server: HeddleServer) -> None:
    pid = new_pid("http-gzip")
    exporter, attempts = http_exporter(
        server, project_headers(server, pid), compression=HttpCompression.Gzip
    )
    otel = Otel(exporter, batch=True)
    record_agent_trace(otel)
    spans = otel.finish_ok()
    check_accepted(attempts, gzip=True)
    check_agent_trace(server, pid, spans)


def test_grpc_exporter_gzip_span_by_span(server: HeddleServer) -> None:
    """OTLP/gRPC with gzip, one Export per span as it ends: the children arrive before their
    parent and must still link to it."""
    pid = new_pid("grpc")
    exporter, attempts = grpc_exporter(server, project_headers(server, pid), gzip=True)
    otel = Otel(exporter, batch=False)
    record_agent_trace(otel)
    spans = otel.finish_ok()
    assert len(attempts) == 3, "one Export per span"
    check_accepted(attempts)
    assert [s.name for s in spans][-1] == "agent run", "the root ends (and is sent) last"
    check_agent_trace(server, pid, spans)


def test_grpc_exporter_batched_uncompressed(server: HeddleServer) -> None:
    pid = new_pid("grpc-batch")
    exporter, attempts = grpc_exporter(server, project_headers(server, pid), gzip=False)
    otel = Otel(exporter, batch=True)
    record_agent_trace(otel)
    spans = otel.finish_ok()
    assert len(attempts) == 1
    check_accepted(attempts)
    check_agent_trace(server, pid, spans)


# ---------------------------------------------------------------------------------------------
# 4: the project from resource attributes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["http", "http-agents", "grpc"])
def test_project_from_resource_attributes(server: HeddleServer, transport: str) -> None:
    """No project_id header: wandb.entity + wandb.project on the resource pick the project;
    the key comes as `wandb-api-key`."""
    entity, project = DEFAULT_ENTITY, f"otel-res-{uuid.uuid4().hex[:8]}"
    pid = f"{entity}/{project}"
    exporter, attempts = exporter_for(server, transport, {"wandb-api-key": server.api_key})
    otel = Otel(exporter, resource={"wandb.entity": entity, "wandb.project": project})
    with otel.tracer.start_as_current_span("Route Me/Please", attributes={"k": "v"}):
        with otel.tracer.start_as_current_span("child step"):
            pass
    spans = otel.finish_ok()
    check_accepted(attempts)
    root_span = next(s for s in spans if s.parent is None)
    calls = read_trace(server, pid, trace_hex(root_span), 2)
    for span in spans:
        call = calls[span_hex(span)]
        check_call_matches_span(call, span, pid)
        assert call["op_name"].startswith(f"weave:///{pid}/op/"), call["op_name"]
        check_placeholder_op(server, pid, call["op_name"], span.name)
        # The routing attributes are the resource's, not the span's: not in the call attributes.
        assert call["otel_dump"]["resource"]["attributes"]["wandb"] == {
            "entity": entity, "project": project,
        }  # fmt: skip
    root = calls[span_hex(root_span)]
    assert safe_op_name(root_span.name) == "route_me_please"
    assert root["attributes"] == {"k": "v"}, root["attributes"]


# ---------------------------------------------------------------------------------------------
# 5: errors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_error_status_and_recorded_exception(server: HeddleServer, transport: str) -> None:
    pid = new_pid(f"err-{transport}")
    exporter, _ = exporter_for(server, transport, project_headers(server, pid))
    otel = Otel(exporter)
    tracer = otel.tracer
    with tracer.start_as_current_span("agent run"):
        with tracer.start_as_current_span("lookup tool", record_exception=False) as span:
            try:
                raise ValueError("no such city: Atlantis")
            except ValueError as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, "tool failed"))
        # the SDK's own handling: an exception escaping the span's context manager
        with pytest.raises(KeyError):
            with tracer.start_as_current_span("escaping tool"):
                raise KeyError("missing-key")
    spans = otel.finish_ok()
    by_name = {s.name: s for s in spans}
    calls = read_trace(server, pid, trace_hex(by_name["agent run"]), 3)
    root = calls[span_hex(by_name["agent run"])]
    failed = calls[span_hex(by_name["lookup tool"])]
    escaped = calls[span_hex(by_name["escaping tool"])]
    for name, call in (("lookup tool", failed), ("escaping tool", escaped)):
        check_call_matches_span(call, by_name[name], pid)
        assert call["summary"]["weave"]["status"] == "error", call["summary"]
        assert call["otel_dump"]["status"]["code"] == "ERROR", call["otel_dump"]
        assert call["parent_id"] == root["id"]
        assert call["output"] is None, call
    # `type: message`, then the stack trace the SDK recorded.
    exc = failed["exception"]
    assert isinstance(exc, str) and exc.startswith("ValueError: no such city: Atlantis"), exc
    assert "Traceback (most recent call last)" in exc, exc
    assert failed["otel_dump"]["status"] == {"code": "ERROR", "message": "tool failed"}
    assert escaped["exception"].startswith("KeyError: 'missing-key'"), escaped["exception"]
    # the parent recorded no error of its own
    assert root["exception"] is None, root
    assert root["otel_dump"]["status"]["code"] == "UNSET", root["otel_dump"]


# ---------------------------------------------------------------------------------------------
# 6: auth
# ---------------------------------------------------------------------------------------------
def _failed_export(
    server: HeddleServer,
    transport: str,
    headers: dict[str, str],
    resource: dict[str, Any] | None = None,
) -> tuple[str, list[str], list[Attempt]]:
    """Exports one span; asserts the exporter reports FAILURE; returns its trace id, the status
    of each request the exporter made, and the requests."""
    exporter, attempts = exporter_for(server, transport, headers)
    otel = Otel(exporter, resource=resource)
    with otel.tracer.start_as_current_span("should not be stored"):
        pass
    results = otel.finish()
    assert results == [SpanExportResult.FAILURE], f"expected the export to fail: {results}"
    return trace_hex(otel.recorder.spans[0]), [a.status for a in attempts], attempts


UNAUTHENTICATED = {"http": "401", "grpc": "UNAUTHENTICATED"}
PERMISSION_DENIED = {"http": "403", "grpc": "PERMISSION_DENIED"}


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_wrong_or_missing_key_is_rejected(server: HeddleServer, transport: str) -> None:
    """A wrong key (each way of sending one) or none: one request, refused as unauthenticated
    (not retried), FAILURE, and nothing stored."""
    pid = new_pid(f"auth-{transport}")
    for headers in (
        {"Authorization": basic_auth("definitely-wrong"), "project_id": pid},
        {"Authorization": "Bearer definitely-wrong", "project_id": pid},
        {"wandb-api-key": "definitely-wrong", "project_id": pid},
        {"project_id": pid},
    ):
        trace_id, statuses, attempts = _failed_export(server, transport, headers)
        assert statuses == [UNAUTHENTICATED[transport]], (
            list(headers), [a.describe() for a in attempts],
        )  # fmt: skip
        assert_nothing_stored(server, pid, trace_id)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_entity_key_only_writes_its_own_entity(server: HeddleServer, transport: str) -> None:
    """An entity-scoped key: its own entity works (and the calls carry its user); another
    entity's project is refused, whether named by header or by resource attributes."""
    suffix = uuid.uuid4().hex[:8]
    alice_key = server.create_key("alice")
    own, foreign = f"alice/otel-{suffix}", f"bob/otel-{suffix}"

    for headers, resource in (
        ({"Authorization": basic_auth(alice_key), "project_id": foreign}, None),
        ({"wandb-api-key": alice_key}, {"wandb.entity": "bob", "wandb.project": f"otel-{suffix}"}),
    ):
        trace_id, statuses, attempts = _failed_export(server, transport, headers, resource)
        assert statuses == [PERMISSION_DENIED[transport]], [a.describe() for a in attempts]
        assert foreign in attempts[0].reason, attempts[0].describe()
        assert_nothing_stored(server, foreign, trace_id)

    # The positive control: the same key on its own entity.
    exporter, _ = exporter_for(server, transport, {"Authorization": f"Bearer {alice_key}"})
    otel = Otel(exporter, resource={"wandb.entity": "alice", "wandb.project": f"otel-{suffix}"})
    with otel.tracer.start_as_current_span("allowed"):
        pass
    (span,) = otel.finish_ok()
    calls = read_trace(server, own, trace_hex(span), 1)
    call = calls[span_hex(span)]
    check_call_matches_span(call, span, own)
    assert call["wb_user_id"] == "alice", call
    assert server.stream_calls(foreign) == []


# ---------------------------------------------------------------------------------------------
# 7: threads and turns
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_thread_and_turn_attributes(server: HeddleServer, transport: str) -> None:
    pid = new_pid(f"thread-{transport}")
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    exporter, _ = exporter_for(server, transport, project_headers(server, pid))
    otel = Otel(exporter)
    tracer = otel.tracer
    turn_spans = []
    for i in range(2):
        with tracer.start_as_current_span(
            "user turn",
            attributes={"wandb.thread_id": thread, "wandb.is_turn": True, "turn.index": i},
        ) as turn:
            turn_spans.append(turn)
            with tracer.start_as_current_span("inner step", attributes={"wandb.thread_id": thread}):
                pass
    with tracer.start_as_current_span(
        "not a turn", attributes={"wandb.thread_id": thread, "wandb.is_turn": False}
    ):
        pass
    with tracer.start_as_current_span("no thread"):
        pass
    spans = otel.finish_ok()
    assert len(spans) == 6

    server.wait_visible()
    every = {c["id"]: c for c in eventually(lambda: _at_least(server.stream_calls(pid), 6))}
    assert len(every) == 6, every
    in_thread = server.stream_calls(pid, filter={"thread_ids": [thread]})
    assert {c["id"] for c in in_thread} == {span_hex(s) for s in spans if s.name != "no thread"}
    for span in spans:
        call = every[span_hex(span)]
        check_call_matches_span(call, span, pid)
        if span.name == "user turn":
            # a turn is its own turn: turn_id = the call's id
            assert call["thread_id"] == thread and call["turn_id"] == call["id"], call
            assert call["attributes"] == {"turn": {"index": span.attributes["turn.index"]}}, call
        elif span.name == "inner step":
            assert call["thread_id"] == thread and call["turn_id"] is None, call
            assert call["attributes"] == {}, call
        elif span.name == "not a turn":
            assert call["thread_id"] == thread and call["turn_id"] is None, call
        else:
            assert call["thread_id"] is None and call["turn_id"] is None, call
    turns = server.stream_calls(pid, filter={"turn_ids": [span_hex(s) for s in turn_spans]})
    assert sorted(c["id"] for c in turns) == sorted(span_hex(s) for s in turn_spans), turns


def _at_least(rows: list[dict], n: int) -> list[dict]:
    assert len(rows) >= n, rows
    return rows


# ---------------------------------------------------------------------------------------------
# The weave SDK reads OTel calls like its own
# ---------------------------------------------------------------------------------------------
def test_weave_sdk_reads_otel_calls(client: Any, server: HeddleServer) -> None:
    pid = f"{client.entity}/{client.project}"
    exporter, attempts = http_exporter(server, project_headers(server, pid))
    otel = Otel(exporter)
    record_agent_trace(otel)
    spans = otel.finish_ok()
    check_accepted(attempts)
    server.wait_visible()
    root_span = next(s for s in spans if s.parent is None)
    genai_span = next(s for s in spans if s.name == "chat gpt-4o")

    def get() -> list[Any]:
        calls = list(client.get_calls(filter={"trace_ids": [trace_hex(root_span)]}))
        assert len(calls) == 3, calls
        return calls

    calls = {c.id: c for c in eventually(get)}
    root, genai = calls[span_hex(root_span)], calls[span_hex(genai_span)]
    assert genai.parent_id == root.id and genai.trace_id == root.trace_id
    assert op_ref_re(pid, genai_span.name).match(genai.op_name), genai.op_name
    assert json.loads(json.dumps(genai.inputs, default=str)) == {"gen_ai.input.messages": GENAI_IN}
    assert genai.summary["usage"]["gpt-4o-2024-08-06"]["total_tokens"] == 24, genai.summary
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert genai.started_at == epoch + dt.timedelta(microseconds=genai_span.start_time // 1_000)
    assert genai.ended_at == epoch + dt.timedelta(microseconds=genai_span.end_time // 1_000)
    assert genai.summary["weave"]["status"] == "success", genai.summary
    # The op ref resolves: the SDK fetches the placeholder op object and its source file
    # without error. (Like the Weave server's placeholder source, heddle's has no @weave.op, so
    # the SDK loads it as None; a loadable op would be fine too.)
    loaded = weave.ref(genai.op_name).get()
    assert loaded is None or callable(loaded), loaded
    # A single call by id.
    one = client.get_call(genai.id)
    assert one.id == genai.id and one.op_name == genai.op_name and one.parent_id == root.id
