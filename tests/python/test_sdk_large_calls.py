"""Large calls through the real weave SDK: an op whose input and output are megabytes long is
stored in full and read back byte for byte, on both SDK ingest paths (calls/complete and the
legacy /call/upsert_batch), in every store mode. In distributed mode these calls are far larger
than a Kafka record (docs/distributed.md, "Large calls")."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest

from heddle_support import HeddleServer, flush  # isort: skip  (sets SDK env before weave import)
import weave  # noqa: E402


@pytest.fixture(params=["complete", "upsert"])
def weave_env_overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    return {} if request.param == "complete" else {"WEAVE_USE_CALLS_COMPLETE": "false"}


def _text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits + ' "\\\n', k=n))


def test_large_input_and_output_read_back(client: Any, server: HeddleServer) -> None:
    doc = _text(3 << 20, 1)
    answer = _text(2 << 20, 2)

    @weave.op
    def summarize(doc: str) -> dict:
        return {"answer": answer}

    @weave.op
    def small(i: int) -> int:
        return i * 2

    for i in range(20):
        small(i)
    _, big_call = summarize.call(doc)
    for i in range(20, 40):
        small(i)
    flush(client)

    got = client.get_call(big_call.id)
    assert got.inputs["doc"] == doc, f"input: {len(got.inputs['doc'])} of {len(doc)} chars"
    assert got.output["answer"] == answer, "output differs"
    calls = list(client.get_calls())
    assert len(calls) == 41, [c.op_name for c in calls]
    outputs = sorted(c.output for c in calls if c.id != big_call.id)
    assert outputs == [i * 2 for i in range(40)]
