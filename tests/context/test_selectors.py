from __future__ import annotations

import pytest

from context.selectors import build_latest_by_agent, build_list
from context.services import context_build
from ledger.interfaces import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db


def agents() -> list[dict[str, object]]:
    return [
        {"id": name, "role": "implementation", "prompt": "Work.", "triggers": [{"topic": "GO"}]}
        for name in ("worker", "validator")
    ]


def test_latest_build_per_agent_in_one_query(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    for cid in ("one", "two"):
        cluster_create(cluster_id=cid, config={"agents": agents()})
        message_publish(cluster_id=cid, draft=MessageDraft(topic="GO", sender="system"))
    for _ in range(3):
        context_build(cluster_id="one", agent_id="worker")
    context_build(cluster_id="one", agent_id="validator")
    context_build(cluster_id="two", agent_id="worker")

    with django_assert_num_queries(1):
        latest = build_latest_by_agent(cluster_ids=["one", "two"])

    assert set(latest) == {("one", "worker"), ("one", "validator"), ("two", "worker")}
    assert latest[("one", "worker")].iteration == 3
    assert latest[("one", "worker")].id == build_list(cluster_id="one", agent_id="worker")[0].id
    assert latest[("two", "worker")].iteration == 1
    # each is the build as the list reads it (its metrics and usage decoded), and none is left
    listed = {
        (b.cluster_id, b.agent_id): b
        for c in ("two", "one")
        for b in build_list(cluster_id=c)[::-1]
    }
    assert latest == listed
    assert latest[("one", "worker")].metrics
    assert build_latest_by_agent(cluster_ids=[]) == {}
    assert build_latest_by_agent(cluster_ids=["nope"]) == {}


def test_previous_build_is_the_newest_by_start_then_id() -> None:
    from context.models import ContextBuild
    from context.selectors import build_previous

    cluster_create(cluster_id="one", config={"agents": agents()})

    def stored(agent_id: str, started_at: int, iteration: int) -> None:
        ContextBuild.objects.create(
            cluster_id="one",
            agent_id=agent_id,
            iteration=iteration,
            started_at=started_at,
            max_tokens=100,
            final_tokens=1,
            metrics={},
        )

    stored("worker", 2_000, 1)
    stored("worker", 3_000, 2)
    stored("worker", 3_000, 3)  # the same moment: the later row is the newer build
    stored("worker", 1_000, 4)
    stored("validator", 9_000, 5)

    newest = build_previous(cluster_id="one", agent_id="worker", until=None)
    as_of = build_previous(cluster_id="one", agent_id="worker", until=2_999)

    assert newest is not None
    assert (newest.started_at, newest.iteration) == (3_000, 3)
    assert as_of is not None
    assert (as_of.started_at, as_of.iteration) == (2_000, 1)
    assert build_previous(cluster_id="one", agent_id="worker", until=999) is None
    assert build_previous(cluster_id="one", agent_id="nobody", until=None) is None


def test_previous_builds_guidance_cursor_is_one_seek_of_its_index() -> None:
    from django.db import connection

    from context.selectors import _previous_sql
    from tests.plans import query_plan

    # given the previous build's statement, the planner kept off whole-table scans
    sql = _previous_sql(connection.vendor, until=False)
    params = ["one", "worker", True, "one", "worker", "one", "worker"]
    plan = query_plan(sql, params)
    # then the newest guidance of the delivered builds is read from the index made for it, not
    # from every build the agent had
    assert "build_guidance_delivered" in plan, plan
