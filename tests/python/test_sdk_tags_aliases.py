"""Tags and aliases of object versions through the real weave 0.54.0 SDK
(docs/api/objects.md#tags-and-aliases): WeaveClient.add_tags / remove_tags / get_tags /
list_tags, set_aliases / get_aliases / remove_aliases / list_aliases, the objects query's tag and
alias filters with include_tags_and_aliases, refs that name a version by alias, the reserved
alias `latest`, and a deleted version losing its labels. Every check reads back.
"""

from __future__ import annotations

from typing import Any

import pytest

# heddle_support first: it sets the SDK env before weave is imported.
from heddle_support import HeddleServer, flush  # isort: skip
import weave  # noqa: E402

from sdk_scenarios import as_plain, project_id  # noqa: E402


def publish_versions(client: Any, name: str, n: int) -> list[Any]:
    refs = [weave.publish({"n": i}, name=name) for i in range(n)]
    flush(client)
    return refs


def query_objs(server: HeddleServer, pid: str, **filter_: Any) -> list[dict]:
    body = {
        "project_id": pid,
        "filter": filter_,
        "include_tags_and_aliases": True,
        "metadata_only": True,
        "sort_by": [{"field": "created_at", "direction": "asc"}],
    }
    return server.post_ok("/objs/query", body)["objs"]


def test_tags_round_trip(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    v0, v1 = publish_versions(client, "prompt", 2)

    client.add_tags(v0, ["reviewed", "needs work"])
    client.add_tags(v0.uri, ["reviewed", "gold"])  # a URI string works too; repeats are kept once
    client.add_tags(v1, ["gold"])
    assert sorted(client.get_tags(v0)) == ["gold", "needs work", "reviewed"]
    assert client.get_tags(v1) == ["gold"]
    assert client.list_tags() == ["gold", "needs work", "reviewed"]

    client.remove_tags(v0, ["needs work", "never-there"])
    assert sorted(client.get_tags(v0)) == ["gold", "reviewed"]
    tags, aliases = client.get_tags_and_aliases(v0)
    assert (sorted(tags), aliases) == (["gold", "reviewed"], [])

    # The objects query filters by tag (any of) and reports the labels it was asked for.
    gold = query_objs(server, pid, tags=["gold"])
    assert [(o["object_id"], o["digest"]) for o in gold] == [
        ("prompt", v0.digest),
        ("prompt", v1.digest),
    ]
    assert [o["tags"] for o in gold] == [["gold", "reviewed"], ["gold"]]
    assert [o["aliases"] for o in gold] == [[], ["latest"]]
    assert [o["digest"] for o in query_objs(server, pid, tags=["reviewed", "x"])] == [v0.digest]
    assert query_objs(server, pid, tags=["needs work"]) == []

    # Tag validation is the server's: a bad tag is a clear 400, nothing is stored.
    with pytest.raises(Exception, match="invalid tag"):
        client.add_tags(v1, ["two  spaces"])
    assert client.get_tags(v1) == ["gold"]


def test_aliases_round_trip_and_resolve_in_refs(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    v0, v1, v2 = publish_versions(client, "agent", 3)

    client.set_aliases(v0, "production")
    client.set_aliases(v1, ["staging", "candidate"])
    # `latest` is computed: the newest version has it without storing it.
    assert client.get_aliases(v0) == ["production"]
    assert sorted(client.get_aliases(v1)) == ["candidate", "staging"]
    assert client.get_aliases(v2) == ["latest"]
    assert client.list_aliases() == ["candidate", "production", "staging"]

    # A ref naming an alias reads the version it names, like a digest would.
    assert as_plain(weave.ref("agent:production").get()) == {"n": 0}
    assert as_plain(weave.ref(f"weave:///{pid}/object/agent:staging").get()) == {"n": 1}
    got = server.post_ok("/refs/read_batch", {"refs": [f"weave:///{pid}/object/agent:candidate"]})
    assert got["vals"] == [{"n": 1}]

    # Setting an alias on another version moves it.
    client.set_aliases(v2, "production")
    assert client.get_aliases(v0) == []
    assert sorted(client.get_aliases(v2)) == ["latest", "production"]
    assert as_plain(weave.ref("agent:production").get()) == {"n": 2}

    # The alias filter: any of, `latest` included.
    found = query_objs(server, pid, aliases=["candidate", "latest"])
    assert [o["digest"] for o in found] == [v1.digest, v2.digest]

    client.remove_aliases(v1, ["staging", "not-there"])
    assert client.get_aliases(v1) == ["candidate"]
    assert client.list_aliases() == ["candidate", "production"]

    # `latest` and version-like names are reserved: a clear 400, nothing stored.
    for reserved in ["latest", "v7"]:
        with pytest.raises(Exception, match="reserved"):
            client.set_aliases(v0, reserved)
    assert client.get_aliases(v0) == []
    assert as_plain(weave.ref("agent:latest").get()) == {"n": 2}


def test_deleting_a_version_drops_its_labels(client: Any, server: HeddleServer) -> None:
    pid = project_id(client)
    v0, v1 = publish_versions(client, "scorer", 2)
    client.add_tags(v1, ["keep"])
    client.set_aliases(v1, "prod")
    client.add_tags(v0, ["old"])

    v1.delete()
    assert client.list_tags() == ["old"]
    assert client.list_aliases() == []
    # The alias no longer resolves: the ref reads nothing.
    assert server.post_ok("/refs/read_batch", {"refs": [f"weave:///{pid}/object/scorer:prod"]}) == {
        "vals": [None]
    }
    # Labelling a deleted version is a 404; the live one still takes labels.
    with pytest.raises(Exception, match="404|not found"):
        client.add_tags(v1, ["again"])
    client.set_aliases(v0, "prod")
    assert client.get_aliases(v0) == ["latest", "prod"] or sorted(client.get_aliases(v0)) == [
        "latest",
        "prod",
    ]
