"""Real weave 0.54.0 SDK against heddle: a `weave.Evaluation` end to end (issue 5). A pure-Python
model and two scorers run over a small dataset; the evaluation's summary, its calls (the
evaluation, one predict-and-score per row, the model and scorer calls under it) and the objects
it published (evaluation, dataset, model, scorers) are then read back and compared.
"""

from __future__ import annotations

import asyncio
from typing import Any

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402

from sdk_scenarios import as_plain, project_id  # noqa: E402

ROWS = [
    {"question": "2+2", "expected": "4"},
    {"question": "3*3", "expected": "9"},
    {"question": "10-7", "expected": "4"},  # the model answers 3: one miss
]


class CalculatorModel(weave.Model):
    precision: int = 0

    @weave.op()
    def predict(self, question: str) -> dict[str, Any]:
        return {"answer": str(int(eval(question, {"__builtins__": {}})))}


@weave.op()
def exact_match(expected: str, output: dict[str, Any]) -> dict[str, Any]:
    return {"correct": output["answer"] == expected}


@weave.op()
def answer_length(output: dict[str, Any]) -> dict[str, Any]:
    return {"chars": len(output["answer"])}


def _run(client: Any) -> tuple[Any, dict[str, Any]]:
    dataset = weave.Dataset(name="arith", rows=ROWS)
    evaluation = weave.Evaluation(name="arith-eval", dataset=dataset, scorers=[exact_match, answer_length])
    model = CalculatorModel(name="calc")
    summary = asyncio.run(evaluation.evaluate(model))
    flush(client)
    return evaluation, summary


def test_evaluation_runs_and_reads_back(client: Any, server: HeddleServer) -> None:
    evaluation, summary = _run(client)

    # The summary the SDK computed from the scored rows.
    assert summary["exact_match"]["correct"]["true_count"] == 2, summary
    assert abs(summary["exact_match"]["correct"]["true_fraction"] - 2 / 3) < 1e-9, summary
    assert summary["answer_length"]["chars"]["mean"] == 1.0, summary

    calls = list(client.get_calls())
    by_op: dict[str, list[Any]] = {}
    for c in calls:
        by_op.setdefault(c.op_name.split("/")[-1].split(":")[0], []).append(c)
    (root,) = by_op["Evaluation.evaluate"]
    assert root.parent_id is None
    assert as_plain(root.output)["exact_match"] == as_plain(summary["exact_match"])
    assert root.summary["weave"]["status"] == "success"

    rows = by_op["Evaluation.predict_and_score"]
    assert len(rows) == 3
    assert all(r.parent_id == root.id and r.trace_id == root.trace_id for r in rows)
    predictions = by_op["CalculatorModel.predict"]
    assert sorted(as_plain(p.output)["answer"] for p in predictions) == ["3", "4", "9"]
    row_ids = {r.id for r in rows}
    assert all(p.parent_id in row_ids for p in predictions)
    scored = sorted(as_plain(s.output)["correct"] for s in by_op["exact_match"])
    assert scored == [False, True, True]
    assert len(by_op["answer_length"]) == 3

    # The evaluation's inputs are refs to the published evaluation and model objects.
    pid = project_id(client)
    assert root.inputs["self"].ref.uri.startswith(f"weave:///{pid}/object/arith-eval:")
    assert root.inputs["model"].ref.uri.startswith(f"weave:///{pid}/object/calc:")

    # The published objects read back as what was evaluated.
    ev = weave.ref(f"weave:///{pid}/object/arith-eval:latest").get()
    assert [as_plain(r) for r in ev.dataset.rows] == ROWS
    assert [s.name for s in ev.scorers] == ["exact_match", "answer_length"]
    model = weave.ref(f"weave:///{pid}/object/calc:latest").get()
    assert model.predict("6/2") == {"answer": "3"}
    # Each row call's example input is a dataset row ref that resolves to that row.
    examples = sorted(as_plain(r.inputs["example"])["question"] for r in rows)
    assert examples == sorted(r["question"] for r in ROWS)

    # The SDK finds the evaluation through /objs/query.
    evals = client.get_evaluations()
    assert [e.name for e in evals] == ["arith-eval"]
