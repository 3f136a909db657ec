"""Annotation queues through the real weave 0.54.0 SDK (docs/api/annotation-queues.md):
create_annotation_queue, get / list / update / delete, add_calls_to_annotation_queue,
list_annotation_queue_items (filters, sorting, paging, positions), get_annotation_queue_stats
and an annotator's progress on an item. Every check reads back.
"""

from __future__ import annotations

from typing import Any

import pytest

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402

from sdk_scenarios import project_id  # noqa: E402


@weave.op
def summarize(text: str) -> str:
    return text[:3]


@weave.op
def classify(text: str) -> str:
    return "long" if len(text) > 3 else "short"


def make_calls(client: Any) -> list[Any]:
    calls = []
    for text in ["alpha", "be", "gamma"]:
        _, call = summarize.call(text)
        calls.append(call)
    _, call = classify.call("delta")
    calls.append(call)
    flush(client)
    return calls


def test_queue_lifecycle(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    scorer = f"weave:///{pid}/object/Helpfulness:abc"
    qid = client.create_annotation_queue(
        name="Review summaries", scorer_refs=[scorer], description="Check each summary"
    )
    other = client.create_annotation_queue(name="Second pass", scorer_refs=[])

    q = client.get_annotation_queue(qid)
    assert (q.id, q.name, q.description, q.scorer_refs) == (
        qid,
        "Review summaries",
        "Check each summary",
        [scorer],
    )
    assert q.project_id == pid and q.deleted_at is None and q.created_at == q.updated_at

    # Listing: newest first by default; a case-insensitive name filter; sorting and paging.
    assert [x.id for x in client.list_annotation_queues()] == [other, qid]
    assert [x.id for x in client.list_annotation_queues(name="REVIEW")] == [qid]
    by_name = client.list_annotation_queues(sort_by=[{"field": "name", "direction": "asc"}])
    assert [x.name for x in by_name] == ["Review summaries", "Second pass"]
    assert [x.id for x in client.list_annotation_queues(limit=1, offset=1)] == [qid]

    updated = client.update_annotation_queue(qid, name="Review all", scorer_refs=[])
    assert (updated.name, updated.description, updated.scorer_refs) == (
        "Review all",
        "Check each summary",
        [],
    )
    assert updated.updated_at >= q.updated_at
    reread = client.get_annotation_queue(qid)
    assert (reread.name, reread.scorer_refs) == ("Review all", [])

    deleted = client.delete_annotation_queue(other)
    assert deleted.id == other and deleted.deleted_at is not None
    assert [x.id for x in client.list_annotation_queues()] == [qid]
    with pytest.raises(Exception, match="404|not found"):
        client.get_annotation_queue(other)
    with pytest.raises(Exception, match="404|not found"):
        client.delete_annotation_queue(other)

    # Bad input is a clear 400.
    with pytest.raises(Exception, match="not an object or op ref|invalid ref"):
        client.create_annotation_queue(name="Bad", scorer_refs=["not a ref"])


def test_items_progress_and_stats(client: Any, server: HeddleServer) -> None:
    calls = make_calls(client)
    qid = client.create_annotation_queue(name="Items", scorer_refs=[])
    ids = [c.id for c in calls]

    res = client.add_calls_to_annotation_queue(
        qid, call_ids=ids[:3], display_fields=["inputs.text", "output"]
    )
    assert (res.added_count, res.duplicates) == (3, 0)
    # Calls already queued are duplicates; unknown ids are skipped.
    res = client.add_calls_to_annotation_queue(
        qid, call_ids=[ids[0], ids[3], "no-such-call"], display_fields=["inputs.text"]
    )
    assert (res.added_count, res.duplicates) == (1, 1)

    items = client.list_annotation_queue_items(qid)
    assert [i.call_id for i in items] == ids  # in the order they were added
    first = items[0]
    assert first.queue_id == qid and first.annotation_state == "unstarted"
    assert first.display_fields == ["inputs.text", "output"]
    assert first.call_op_name == calls[0].op_name and first.call_trace_id == calls[0].trace_id
    assert first.call_started_at is not None and first.call_ended_at is not None
    assert items[3].display_fields == ["inputs.text"]

    # Filters, sorting, paging and positions in the whole queue.
    by_call = client.list_annotation_queue_items(qid, filter={"call_id": ids[1]})
    assert [i.call_id for i in by_call] == [ids[1]]
    by_op = client.list_annotation_queue_items(qid, filter={"call_op_name": calls[3].op_name})
    assert [i.call_id for i in by_op] == [ids[3]]
    newest_first = client.list_annotation_queue_items(
        qid, sort_by=[{"field": "call_started_at", "direction": "desc"}]
    )
    assert [i.call_id for i in newest_first] == ids[::-1]
    page = client.list_annotation_queue_items(qid, limit=2, offset=1, include_position=True)
    assert [(i.call_id, i.position_in_queue) for i in page] == [(ids[1], 2), (ids[2], 3)]

    # Progress of the key's user: in_progress, then completed; a second in_progress is refused.
    server_ = client.server
    item = items[1]
    upd = server_.annotator_queue_items_progress_update(
        {
            "project_id": project_id(client),
            "queue_id": qid,
            "item_id": item.id,
            "annotation_state": "in_progress",
        }
    )
    assert upd.item.id == item.id and upd.item.annotation_state == "in_progress"
    assert upd.item.annotator_user_id
    with pytest.raises(Exception, match="annotation state"):
        server_.annotator_queue_items_progress_update(
            {
                "project_id": project_id(client),
                "queue_id": qid,
                "item_id": item.id,
                "annotation_state": "in_progress",
            }
        )
    done = server_.annotator_queue_items_progress_update(
        {
            "project_id": project_id(client),
            "queue_id": qid,
            "item_id": items[2].id,
            "annotation_state": "skipped",
        }
    )
    assert done.item.annotation_state == "skipped"

    states = {i.call_id: i.annotation_state for i in client.list_annotation_queue_items(qid)}
    assert states == {
        ids[0]: "unstarted",
        ids[1]: "in_progress",
        ids[2]: "skipped",
        ids[3]: "unstarted",
    }
    todo = client.list_annotation_queue_items(
        qid, filter={"annotation_states": ["unstarted", "in_progress"]}, include_position=True
    )
    assert [(i.call_id, i.position_in_queue) for i in todo] == [
        (ids[0], 1),
        (ids[1], 2),
        (ids[3], 4),
    ]

    other = client.create_annotation_queue(name="Empty", scorer_refs=[])
    stats = client.get_annotation_queue_stats([qid, other, "no-such-queue"])
    assert [(s.queue_id, s.total_items, s.completed_items) for s in stats] == [
        (qid, 4, 1),
        (other, 0, 0),
        ("no-such-queue", 0, 0),
    ]
