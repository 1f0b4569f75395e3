"""The cluster page draws a config once per config text (docs/decisions/0250): the topology,
the completion sentence and the filter's topics kept, the same page every load, and a changed
config or a picked earlier version drawn as it is."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard import topology as topology_module
from dashboard.views import clusters
from ledger.interfaces import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-for-tests-1")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The agent ids of every topology the page draws, on an empty store."""
    clusters._drawn_of_text.cache_clear()
    calls: list[list[str]] = []

    def counting(agents: Any) -> Any:
        agents = list(agents)
        calls.append([str(a.get("id")) for a in agents])
        return topology_module.topology(agents)

    monkeypatch.setattr(clusters, "topology", counting)
    yield calls
    clusters._drawn_of_text.cache_clear()


def agent(agent_id: str, topic: str, publishes: str) -> dict[str, Any]:
    hook = {"action": "publish_message", "config": {"topic": publishes}}
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": topic, "action": "execute_task"}],
        "hooks": {"onComplete": hook},
    }


def page(client: Client, cid: str, **query: Any) -> str:
    html = client.get(f"/clusters/{cid}/", query).content.decode()
    html = re.sub(r'csrfmiddlewaretoken" value="[^"]+"', "csrf", html)
    return re.sub(r'"X-CSRFToken": "[^"]+"', '"X-CSRFToken": ""', html)


def test_a_config_is_drawn_once_and_the_page_is_the_same_every_load(
    operator: Client, drawn: list[list[str]]
) -> None:
    cid = cluster_create(
        cluster_id="cd",
        config={"agents": [agent("worker", "ISSUE_OPENED", "IMPLEMENTATION_READY")]},
        state="running",
    ).id
    first = page(operator, cid)
    assert page(operator, cid) == first
    assert drawn == [["worker", "completion-detector"]]
    # what was kept is what the page shows: the arc, the ending, the topics to filter by
    assert "ISSUE_OPENED" in first
    assert "IMPLEMENTATION_READY" in first
    assert "completion-detector" in first

    ops = [{"action": "add_agents", "agents": [agent("reviewer", "IMPLEMENTATION_READY", "DONE")]}]
    message_publish(
        cluster_id=cid,
        draft=MessageDraft(
            topic="CLUSTER_OPERATIONS", sender="conductor", content={"data": {"operations": ops}}
        ),
    )
    changed = page(operator, cid)
    assert page(operator, cid) == changed
    assert drawn[1:] == [["worker", "reviewer", "completion-detector"]]
    assert 'value="DONE"' in changed
    assert 'value="DONE"' not in first

    # an earlier version is drawn as it was, on every load
    page(operator, cid, config_version=1)
    page(operator, cid, config_version=1)
    assert drawn[2:] == [["worker", "completion-detector"]] * 2
