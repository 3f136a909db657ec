"""Real weave 0.54.0 SDK against heddle: project settings (docs/api/project-settings.md).

- Retention: the SDK's own `project_ttl_settings_read/update` round-trip, and a call's
  `expire_at` follows the setting.
- Redaction: with the `pii-v1` policy (read through the SDK's server client), calls logged with
  `weave.op`, feedback added through the SDK, and spans exported by the real OpenTelemetry
  exporters (HTTP and gRPC) are stored redacted: sensitive keys as `REDACTED`, personal data as
  `<ENTITY_TYPE>`.
- Sampling: the SDK's `ingest_sampling_settings.read` shows the rate; ops logged at rate 0.5 are
  kept or dropped by whole trace, as `sha256(trace_id) < rate` decides.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from typing import Any

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, basic_auth, eventually, flush  # isort: skip
import weave  # noqa: E402
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: E402
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: E402
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402

from sdk_scenarios import project_id  # noqa: E402

EMAIL = f"ada.{uuid.uuid4().hex[:10]}@example.org"
CARD = "4111 1111 1111 1111"
SSN = "219-09-9999"
API_KEY = f"sk-{uuid.uuid4().hex}"
TEXT = f"mail {EMAIL} card {CARD} ssn {SSN}"
REDACTED_TEXT = "mail <EMAIL_ADDRESS> card <CREDIT_CARD> ssn <US_SSN>"


def remote(client: Any) -> Any:
    """The SDK's RemoteHTTPTraceServer under its middleware."""
    server = client.server
    while not hasattr(server, "_stainless_client"):
        server = server._next_trace_server
    return server


def set_policy(server: HeddleServer, pid: str, policy: str) -> None:
    body = {"project_id": pid, "policy": policy}
    assert server.post_ok("/project/sensitive_data_settings/update", body) == {"policy": policy}


def assert_no_secret(value: Any) -> None:
    text = repr(value)
    for secret in (EMAIL, CARD, SSN, API_KEY):
        assert secret not in text, f"{secret!r} in {text}"


@weave.op()
def answer(question: str, api_key: str, headers: dict[str, str]) -> dict[str, str]:
    return {"reply": f"write to {EMAIL}", "echo": question}


def test_ttl_settings_round_trip_and_expire_at(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    srv = remote(client)
    assert srv.project_ttl_settings_read({"project_id": pid}).retention_days is None
    res = srv.project_ttl_settings_update({"project_id": pid, "retention_days": 14})
    assert res.retention_days == 14
    assert srv.project_ttl_settings_read({"project_id": pid}).retention_days == 14

    _, call = answer.call("q", "k", {})
    flush(client)
    server.wait_visible()

    def read() -> dict:
        return server.post_ok("/call/read", {"project_id": pid, "id": call.id})["call"]

    row = eventually(read)
    started = dt.datetime.fromisoformat(row["started_at"].replace("Z", "+00:00"))
    expire_at = dt.datetime.fromisoformat(row["expire_at"].replace("Z", "+00:00"))
    assert expire_at - started == dt.timedelta(days=14), row

    res = srv.project_ttl_settings_update({"project_id": pid, "retention_days": None})
    assert res.retention_days is None
    assert srv.project_ttl_settings_read({"project_id": pid}).retention_days is None
    assert read()["expire_at"] is None
    # The SDK documents `>= 1`: 0 is refused with a clear reason.
    r = server.post("/project/ttl_settings/update", {"project_id": pid, "retention_days": 0})
    assert r.status_code == 400 and "retention_days" in r.json()["reason"], r.text


def test_pii_policy_redacts_sdk_calls_and_feedback(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    stainless = remote(client)._stainless_client
    assert stainless.projects.sensitive_data_settings.read(project_id=pid).policy == "off"
    set_policy(server, pid, "pii-v1")
    assert stainless.projects.sensitive_data_settings.read(project_id=pid).policy == "pii-v1"

    # `api_key` is redacted by the SDK itself already; `headers.Authorization` and the personal
    # data in strings only by the server.
    _, call = answer.call(TEXT, API_KEY, {"Authorization": f"Bearer {API_KEY}"})
    flush(client)
    call.feedback.add_note(f"customer {EMAIL} called")
    call.feedback.add("review", {"api_key": API_KEY, "comment": TEXT})
    flush(client)

    def check() -> None:
        row = client.get_call(call.id)
        assert row.inputs["question"] == REDACTED_TEXT, row.inputs
        assert row.inputs["headers"] == {"Authorization": "REDACTED"}, row.inputs
        assert row.inputs["api_key"] == "REDACTED"
        assert row.output == {"reply": "write to <EMAIL_ADDRESS>", "echo": REDACTED_TEXT}
        rows = list(row.feedback)
        payloads = sorted((f.feedback_type, repr(f.payload)) for f in rows)
        assert payloads == [
            ("review", repr({"api_key": "REDACTED", "comment": REDACTED_TEXT})),
            ("wandb.note.1", repr({"note": "customer <EMAIL_ADDRESS> called"})),
        ], payloads
        assert_no_secret([dict(r) for r in server.stream_calls(pid)])

    eventually(check)


def _export(server: HeddleServer, pid: str, exporter: Any) -> str:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("heddle-settings-tests")
    with tracer.start_as_current_span("support chat") as span:
        span.set_attribute("input.value", TEXT)
        span.set_attribute("output.value", f"reach {EMAIL}")
        span.set_attribute("api_key", API_KEY)
        span.set_attribute("http.request.header.authorization", f"Bearer {API_KEY}")
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


def test_pii_policy_redacts_otel_spans(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    set_policy(server, pid, "pii-v1")
    headers = {"Authorization": basic_auth(server.api_key), "project_id": pid}
    traces = [
        _export(server, pid, HttpSpanExporter(endpoint=server.url + "/otel/v1/traces", headers=headers)),
        _export(
            server,
            pid,
            GrpcSpanExporter(
                endpoint=server.grpc_endpoint,
                insecure=True,
                headers=tuple((k.lower(), v) for k, v in headers.items()),
            ),
        ),
    ]
    server.wait_visible()
    for trace_id in traces:

        def check() -> dict:
            rows = server.stream_calls(pid, filter={"trace_ids": [trace_id]})
            assert len(rows) == 1, rows
            return rows[0]

        row = eventually(check)
        assert row["inputs"]["input.value"] == REDACTED_TEXT, row["inputs"]
        assert row["output"]["output.value"] == "reach <EMAIL_ADDRESS>", row["output"]
        assert_no_secret(row)
        assert "REDACTED" in repr(row["attributes"]) + repr(row["otel_dump"]), row


def keeps(trace_id: str, rate: float) -> bool:
    """heddle's sampling rule (docs/api/project-settings.md#ingest-sampling)."""
    head = int.from_bytes(hashlib.sha256(trace_id.encode()).digest()[:8], "big")
    return head < rate * 2.0**64


@weave.op()
def leaf(i: int) -> int:
    return i + 1


@weave.op()
def root(i: int) -> int:
    return leaf(i) + leaf(i + 1)


def test_sampling_keeps_whole_traces(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    stainless = remote(client)._stainless_client
    read = stainless.projects.ingest_sampling_settings.read(project_id=pid)
    assert (read.sample_rate, read.dry_run) == (1.0, False)
    server.post_ok("/project/ingest_sampling_settings/update", {"project_id": pid, "sample_rate": 0.5})
    read = stainless.projects.ingest_sampling_settings.read(project_id=pid)
    assert (read.sample_rate, read.dry_run) == (0.5, False)

    roots = [root.call(i)[1] for i in range(24)]
    flush(client)
    server.wait_visible()
    kept = {c.trace_id for c in roots if keeps(c.trace_id, 0.5)}
    assert 0 < len(kept) < len(roots), "rate 0.5 keeps some traces and drops others"

    def check() -> None:
        rows = server.stream_calls(pid)
        by_trace: dict[str, int] = {}
        for r in rows:
            by_trace[r["trace_id"]] = by_trace.get(r["trace_id"], 0) + 1
        assert set(by_trace) == kept, (sorted(by_trace), sorted(kept))
        assert all(n == 3 for n in by_trace.values()), by_trace

    eventually(check)
