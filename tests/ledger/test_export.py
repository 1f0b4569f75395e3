"""Exports (``export_cluster``, ``GET /clusters/{id}/export``) and importing them back."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from ledger.keys import api_key_create
from ledger.models import Cluster
from ledger.selectors import cluster_get, message_tail
from ledger.services import (
    ImportedMessage,
    MessageDraft,
    cluster_create,
    message_import_batch,
    message_publish_batch,
)
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

CLUSTER = "jade-harbor-3"
AGENTS = [{"id": "planner", "role": "planning"}]


def fill_cluster() -> list[dict[str, Any]]:
    """A cluster with every content shape; returns its messages as the wire shows them."""
    cluster_create(
        cluster_id=CLUSTER,
        config={"agents": AGENTS},
        params={"maxTokens": 9000},
        state="completed",
        created_at=1_700_000_000_000,
        labels={"pool": "gpu"},
    )
    drafts = [
        MessageDraft(topic="ISSUE_OPENED", sender="system", content={"text": "Add a button"}),
        MessageDraft(topic="PLAN_READY", sender="planner", content={"data": {"steps": [1, 2]}}),
        MessageDraft(topic="AGENT_OUTPUT", sender="worker", content={"text": "", "data": 0}),
        MessageDraft(topic="T", sender="s", receiver="planner", metadata={"k": ["é", None]}),
        MessageDraft(topic="T", sender="s", content={"data": False}, id="msg_custom"),
        MessageDraft(topic="T", sender="s", content={"data": {}}, metadata={"contextSafe": True}),
    ]
    message_publish_batch(cluster_id=CLUSTER, drafts=drafts)
    return wires()


def wires() -> list[dict[str, Any]]:
    return [r.to_wire() for r in message_tail(cluster_id=CLUSTER, after=0, limit=1000)]


def export(*options: str) -> str:
    out = StringIO()
    call_command("export_cluster", CLUSTER, *options, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_export_then_import_into_an_empty_database_gives_identical_messages(
    tmp_path: Path, fmt: str
) -> None:
    # given an export of the cluster, then the cluster gone
    before = fill_cluster()
    target = tmp_path / f"export.{fmt}"
    call_command("export_cluster", CLUSTER, "--format", fmt, "--output", str(target))
    Cluster.objects.filter(pk=CLUSTER).delete()
    out = StringIO()

    # when
    call_command("import_cluster", str(target), stdout=out)

    # then
    assert wires() == before
    assert out.getvalue() == f"{CLUSTER}: imported 6, skipped 0 (new cluster)\n"
    cluster = cluster_get(cluster_id=CLUSTER)
    if fmt == "json":
        assert (
            cluster.config,
            cluster.params,
            cluster.state,
            cluster.created_at,
            cluster.labels,
        ) == (
            {"agents": AGENTS},
            {"maxTokens": 9000},
            "completed",
            1_700_000_000_000,
            {"pool": "gpu"},
        )
    else:
        # JSON Lines hold messages only: the cluster starts at its first message, stopped.
        assert (cluster.config, cluster.state) == ({"agents": []}, "stopped")
        assert cluster.created_at == before[0]["timestamp"]


def test_the_jsonl_export_is_one_wire_message_per_line() -> None:
    # given
    before = fill_cluster()

    # when
    text = export("--format", "jsonl")

    # then
    assert text.endswith("\n")
    assert [json.loads(line) for line in text.splitlines()] == before


def test_the_json_export_holds_the_cluster_and_its_messages() -> None:
    # given
    before = fill_cluster()

    # when
    document = json.loads(export("--format", "json"))

    # then
    assert document["messages"] == before
    assert document["cluster"] == {
        "id": CLUSTER,
        "created_at": 1_700_000_000_000,
        "state": "completed",
        "template": None,
        "params": {"maxTokens": 9000},
        "labels": {"pool": "gpu"},
        "config": {"agents": AGENTS},
        "message_count": 6,
    }


def test_an_export_spans_many_pages_in_sequence_order(tmp_path: Path) -> None:
    # given more messages than one page of the cursor
    cluster_create(cluster_id=CLUSTER)
    messages = [
        ImportedMessage(
            id=f"msg_{i:05d}",
            timestamp=10_000 - i,  # timestamps run backwards: the export follows sequences
            topic="AGENT_OUTPUT",
            sender="worker",
            receiver="broadcast",
            content={"text": f"line {i}"},
            metadata=None,
        )
        for i in range(2_345)
    ]
    message_import_batch(cluster_id=CLUSTER, messages=messages)
    before = wires_all()

    # when
    lines = export().splitlines()
    document = json.loads(export("--format", "json"))

    # then
    assert [json.loads(line) for line in lines] == before
    assert document["messages"] == before
    assert [w["sequence"] for w in before] == [str(i) for i in range(1, 2_346)]


def wires_all() -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    after = 0
    while page := message_tail(cluster_id=CLUSTER, after=after, limit=1000):
        result += [r.to_wire() for r in page]
        after = page[-1].sequence
    return result


def test_importing_an_export_twice_adds_nothing_and_can_target_another_cluster(
    tmp_path: Path,
) -> None:
    # given
    before = fill_cluster()
    target = tmp_path / "export.jsonl"
    target.write_text(export())

    # when
    call_command("import_cluster", str(target), stdout=StringIO())
    out = StringIO()
    call_command("import_cluster", str(target), "--cluster", "copy-1", stdout=out)

    # then
    assert wires() == before
    copied = [r.to_wire() for r in message_tail(cluster_id="copy-1", after=0, limit=1000)]
    assert [{**w, "cluster_id": CLUSTER} for w in copied] == before
    assert out.getvalue() == "copy-1: imported 6, skipped 0 (new cluster)\n"


def test_export_and_import_refuse_clearly(tmp_path: Path) -> None:
    # given
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"topic": "T", "sender": "s"}\n')
    garbage = tmp_path / "garbage.json"
    garbage.write_text("[1, 2")

    # when / then
    with pytest.raises(CommandError, match="does not exist"):
        call_command("export_cluster", "nowhere", stdout=StringIO())
    with pytest.raises(CommandError, match=r"bad\.jsonl, line 1: id, timestamp missing"):
        call_command("import_cluster", str(bad), "--cluster", "x-1", stdout=StringIO())
    with pytest.raises(CommandError, match="neither JSON nor JSON Lines"):
        call_command("import_cluster", str(garbage), stdout=StringIO())
    assert not Cluster.objects.filter(pk="x-1").exists()


# --- API ---------------------------------------------------------------------------------------


def streamed(response: Any) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_the_api_streams_jsonl_by_default(api: ApiClient, tmp_path: Path) -> None:
    # given
    before = fill_cluster()

    # when
    response = api.get(f"/api/v1/clusters/{CLUSTER}/export")

    # then
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == f'attachment; filename="{CLUSTER}.jsonl"'
    body = streamed(response)
    assert [json.loads(line) for line in body.splitlines()] == before


def test_the_api_json_export_imports_back_identically(api: ApiClient, tmp_path: Path) -> None:
    # given
    before = fill_cluster()
    response = api.get(f"/api/v1/clusters/{CLUSTER}/export", format="json")
    assert response["Content-Type"] == "application/json"
    target = tmp_path / "export.json"
    target.write_text(streamed(response))
    Cluster.objects.filter(pk=CLUSTER).delete()

    # when
    call_command("import_cluster", str(target), stdout=StringIO())

    # then
    assert wires() == before
    assert cluster_get(cluster_id=CLUSTER).config == {"agents": AGENTS}


def test_the_api_export_is_authenticated_and_cluster_scoped(api: ApiClient) -> None:
    # given
    fill_cluster()
    other = cluster_create(cluster_id="other-1").id
    _, scoped_key = api_key_create(name="scoped", cluster_id=other)
    scoped = ApiClient(scoped_key)

    # when
    anonymous = Client().get(f"/api/v1/clusters/{CLUSTER}/export")
    forbidden = scoped.get(f"/api/v1/clusters/{CLUSTER}/export")
    allowed = scoped.get(f"/api/v1/clusters/{other}/export")
    missing = api.get("/api/v1/clusters/nowhere/export")
    bad_format = api.get(f"/api/v1/clusters/{CLUSTER}/export", format="xml")

    # then
    assert anonymous.status_code == 401
    assert forbidden.status_code == 403
    assert forbidden.json()["code"] == "forbidden"
    assert allowed.status_code == 200
    assert streamed(allowed) == ""
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    assert bad_format.status_code == 422
