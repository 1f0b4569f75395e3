"""The cluster page as of any config version (SPEC §7.7): the picker, the topology and agents
of a past version, and agents added by CLUSTER_OPERATIONS appearing while the page is open."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ledger.interfaces import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db(transaction=True)
HX = {"HX-Request": "true"}


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-for-tests-1", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def agent(agent_id: str, topic: str, publishes: str) -> dict[str, Any]:
    hook = {"action": "publish_message", "config": {"topic": publishes}}
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": topic, "action": "execute_task"}],
        "hooks": {"onComplete": hook},
    }


def changed_cluster() -> str:
    """A running cluster whose conductor added ``reviewer`` (config version 2)."""
    cid = cluster_create(
        cluster_id="cv",
        config={"agents": [agent("worker", "ISSUE_OPENED", "IMPLEMENTATION_READY")]},
        state="running",
    ).id
    ops = [{"action": "add_agents", "agents": [agent("reviewer", "IMPLEMENTATION_READY", "DONE")]}]
    message_publish(
        cluster_id=cid,
        draft=MessageDraft(
            topic="CLUSTER_OPERATIONS", sender="conductor", content={"data": {"operations": ops}}
        ),
    )
    return cid


def test_the_page_shows_the_cluster_as_of_any_config_version(operator: Client) -> None:
    cid = changed_cluster()

    now = operator.get(f"/clusters/{cid}/").content.decode()
    before = operator.get(f"/clusters/{cid}/", {"config_version": 1}).content.decode()

    # the picker lists both versions: who changed the config and what changed
    for html in (now, before):
        assert 'href="?config_version=1"' in html
        assert 'href="?config_version=2"' in html
        assert "+reviewer" in html
        assert '<span class="mono">conductor</span>' in html
    # now: the reviewer is in the agents panel and the topology, with the completion-detector
    assert "<title>reviewer</title>" in now
    assert 'title="Open the context inspector of reviewer"' in now
    assert "<title>completion-detector</title>" in now
    assert "as of config v" not in now
    # as of version 1: only the worker (and the detector that joined it), said so
    assert "<title>reviewer</title>" not in before
    assert 'title="Open the context inspector of reviewer"' not in before
    assert "as of config v1" in before


def test_agents_added_by_operations_reach_an_open_page(operator: Client) -> None:
    # given a page drawn before the chain (version 1), polling its agents panel
    cid = changed_cluster()

    stale = operator.get(f"/clusters/{cid}/agents-panel/", {"v": 1}, headers=HX).content.decode()
    fresh = operator.get(f"/clusters/{cid}/agents-panel/", {"v": 2}, headers=HX).content.decode()

    # then the poll brings the new agent, and the topology with it, out of band
    assert 'title="Open the context inspector of reviewer"' in stale
    assert 'id="topology-panel" aria-labelledby="topology-title" hx-swap-oob="true"' in stale
    assert "<title>reviewer</title>" in stale
    assert f'/clusters/{cid}/agents-panel/?v=2"' in stale
    # a page already on the current version gets the agents alone
    assert 'id="topology-panel"' not in fresh
