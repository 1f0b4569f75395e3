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
