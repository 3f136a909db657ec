"""Real weave 0.54.0 SDK against heddle: feedback (issue 6). Reactions, notes and custom
feedback on a call through `call.feedback` (sent by `/feedback/batch/create` with client ids),
listed and purged by the id the SDK returned; an evaluation's scorer results, which the SDK
records as `wandb.runnable.<scorer>` feedback, read back through `include_feedback`; and
`client.get_calls(scored_by=...)`, which filters on `feedback.[...]` fields.
"""

from __future__ import annotations

import asyncio
from typing import Any

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402

from sdk_scenarios import as_plain, project_id  # noqa: E402


@weave.op()
def shout(text: str) -> str:
    return text.upper()


def test_call_feedback_add_list_purge(client: Any, server: HeddleServer) -> None:
    _, call = shout.call("hi")
    flush(client)

    reaction_id = call.feedback.add_reaction("👍")
    note_id = call.feedback.add_note("looks right")
    custom_id = call.feedback.add("custom", {"score": 0.75, "tags": ["a", "b"]})
    flush(client)

    # Listed back from the server (a fresh query object: no client-side cache).
    call = client.get_call(call.id)
    rows = list(call.feedback)
    assert [f.id for f in rows] == [reaction_id, note_id, custom_id], rows
    by_id = {f.id: f for f in rows}
    assert by_id[reaction_id].feedback_type == "wandb.reaction.1"
    assert by_id[reaction_id].payload == {"emoji": "👍"}
    assert by_id[note_id].payload == {"note": "looks right"}
    assert by_id[custom_id].feedback_type == "custom"
    assert by_id[custom_id].payload == {"score": 0.75, "tags": ["a", "b"]}
    assert all(f.weave_ref == f"weave:///{project_id(client)}/call/{call.id}" for f in rows)

    # Project-level queries: by reaction, and by id.
    assert [f.id for f in client.get_feedback(reaction="👍")] == [reaction_id]
    assert [f.id for f in client.get_feedback(custom_id)] == [custom_id]

    # Purge by the id the SDK returned.
    call.feedback.purge(note_id)
    call = client.get_call(call.id)
    assert [f.id for f in call.feedback] == [reaction_id, custom_id]

    # include_feedback puts the rows in summary.weave.feedback.
    (row,) = list(client.get_calls(filter={"call_ids": [call.id]}, include_feedback=True))
    fb = row.summary["weave"]["feedback"]
    assert sorted(f["id"] for f in fb) == sorted([reaction_id, custom_id]), fb


class Doubler(weave.Model):
    @weave.op()
    def predict(self, x: int) -> int:
        return 2 * x


@weave.op()
def is_even(output: int) -> dict[str, Any]:
    return {"even": output % 2 == 0}


@weave.op()
def is_big(output: int, x: int) -> dict[str, Any]:
    return {"big": output > 4}


def test_evaluation_scores_are_feedback_and_scored_by(client: Any, server: HeddleServer) -> None:
    evaluation = weave.Evaluation(name="doubling", dataset=[{"x": 1}, {"x": 2}, {"x": 3}], scorers=[is_even])
    asyncio.run(evaluation.evaluate(Doubler()))
    flush(client)

    predictions = [c for c in client.get_calls(include_feedback=True) if "Doubler.predict" in c.op_name]
    assert len(predictions) == 3
    for p in predictions:
        fb = p.summary["weave"]["feedback"]
        runnable = [f for f in fb if f["feedback_type"] == "wandb.runnable.is_even"]
        assert len(runnable) == 1, fb
        assert as_plain(runnable[0]["payload"]["output"]) == {"even": True}
        assert runnable[0]["runnable_ref"].startswith(f"weave:///{project_id(client)}/op/is_even:")

    # scored_by a scorer name, and by the scorer's ref; a scorer never run matches nothing.
    scored = client.get_calls(scored_by="is_even")
    assert sorted(c.id for c in scored) == sorted(p.id for p in predictions)
    assert len(scored) == 3
    ref = weave.publish(is_even).uri()
    assert sorted(c.id for c in client.get_calls(scored_by=[ref])) == sorted(p.id for p in predictions)
    assert list(client.get_calls(scored_by="is_big")) == []
    assert len(client.get_calls(scored_by=["is_even", "is_big"])) == 0
