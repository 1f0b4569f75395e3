from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.keys import api_key_authenticate
from ledger.models import ApiKey, Cluster, Message

pytestmark = pytest.mark.django_db


def test_create_api_key_prints_the_key_once_on_the_last_line(cluster: str) -> None:
    out, err = StringIO(), StringIO()

    call_command("create_api_key", "pool-1", "--cluster", cluster, stdout=out, stderr=err)

    plain = out.getvalue().strip().splitlines()[-1]
    identity = api_key_authenticate(plain=plain)
    assert identity is not None
    assert identity.cluster_id == cluster
    stored = ApiKey.objects.get()
    assert plain not in (stored.key_hash, stored.prefix)
    assert len(stored.key_hash) == 64


def test_create_api_key_for_unknown_cluster_fails_clearly(db: None) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        call_command(
            "create_api_key", "x", "--cluster", "missing", stdout=StringIO(), stderr=StringIO()
        )
    assert ApiKey.objects.count() == 0


def test_demo_fills_an_empty_database_once(db: None) -> None:
    call_command("demo", stdout=StringIO())
    clusters = Cluster.objects.count()
    messages = Message.objects.count()

    call_command("demo", stdout=StringIO())

    assert clusters >= 3
    assert messages >= 30
    assert Cluster.objects.count() == clusters
    topics = set(Message.objects.values_list("topic", flat=True))
    assert {
        "ISSUE_OPENED",
        "PLAN_READY",
        "IMPLEMENTATION_READY",
        "VALIDATION_RESULT",
        "AGENT_LIFECYCLE",
    } <= topics
    assert set(Cluster.objects.values_list("state", flat=True)) >= {"running", "completed"}
    # every demo cluster is in the demo's runner pool, which `make run`'s runner serves
    assert {json.dumps(labels) for labels in Cluster.objects.values_list("labels", flat=True)} == {
        '{"pool": "demo"}'
    }


def test_demo_records_builds_and_snapshots_as_a_run_would(db: None) -> None:
    from context.models import ContextBuild
    from snapshots.state import snapshot_summary

    call_command("demo", stdout=StringIO())

    builds = ContextBuild.objects.filter(cluster_id="amber-comet-7")
    assert {b.agent_id for b in builds} == {"worker", "validator"}
    # the recorded run: the worker built twice, once per validation round
    assert sorted(b.iteration for b in builds if b.agent_id == "worker") == [1, 2]
    snapshots = Message.objects.filter(cluster_id="amber-comet-7", topic="STATE_SNAPSHOT")
    newest = snapshots.order_by("-sequence").first()
    assert newest is not None
    assert newest.content["text"] == snapshot_summary(newest.content["data"])
    assert "Validation: approved" in newest.content["text"]


# Arguments as Python reads them from a command line holding bytes that are not UTF-8.
UNDECODABLE = b"w\xff".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("create_api_key", [UNDECODABLE], "name must not contain lone surrogates"),
        ("create_api_key", ["pool", "--cluster", UNDECODABLE], "does not exist"),
        ("build_context", ["test-cluster", UNDECODABLE], "agent_id must not contain lone"),
        ("build_context", [UNDECODABLE, "worker"], "does not exist"),
        ("build_context", ["test-cluster", "worker", "--max-tokens", str(2**31)], "max_tokens"),
        ("export_cluster", [UNDECODABLE], "does not exist"),
    ],
)
def test_commands_refuse_unstorable_arguments_clearly(
    cluster: str, command: str, args: list[str], says: str
) -> None:
    with pytest.raises(CommandError, match=says):
        call_command(command, *args, stdout=StringIO(), stderr=StringIO())

    assert not ApiKey.objects.exists()
