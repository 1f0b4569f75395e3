"""The guidance box of the cluster page (SPEC §7.8): one agent or all, errors inline, escaped."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ledger.interfaces import MessageFilter, cluster_create, message_query
from runs.services import guidance_send

pytestmark = pytest.mark.django_db

XSS = "<script>window.__xss=1</script>"
HX = {"HX-Request": "true"}


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-for-tests-1", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def worker(agent_id: str) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
        "contextStrategy": {"sources": [{"topic": "GO"}]},
    }


def cluster(state: str = "running", cluster_id: str = "run-1") -> str:
    config = {"agents": [worker("worker"), worker("reviewer")]}
    return cluster_create(cluster_id=cluster_id, config=config, state=state).id


def guidance(cluster_id: str) -> list[Any]:
    topics = ("USER_GUIDANCE_AGENT", "USER_GUIDANCE_CLUSTER")
    return message_query(cluster_id=cluster_id, where=MessageFilter(topic=topics), limit=None)


def test_a_running_clusters_page_has_the_box_with_every_agent(operator: Client) -> None:
    cid = cluster()

    page = operator.get(f"/clusters/{cid}/").content.decode()

    assert 'id="guidance-form"' in page
    assert f'hx-post="/clusters/{cid}/guidance/"' in page
    assert 'name="csrfmiddlewaretoken"' in page.split('id="guidance-form"')[1].split("</form>")[0]
    for option in ('<option value="">Every agent</option>', '<option value="worker">'):
        assert option in page
    assert '<option value="reviewer">' in page


def test_guidance_sent_from_the_box_to_one_agent(operator: Client) -> None:
    cid = cluster()

    response = operator.post(
        f"/clusters/{cid}/guidance/", {"agent": "worker", "text": f"Use B {XSS}"}, headers=HX
    )

    assert response.status_code == 200
    box = response.content.decode()
    (message,) = guidance(cid)
    assert (message.topic, message.receiver, message.text) == (
        "USER_GUIDANCE_AGENT",
        "worker",
        f"Use B {XSS}",
    )
    assert (message.metadata["source"], message.metadata["by"]) == ("dashboard", "op")
    assert f'Sent to <span class="mono">worker</span> as <a href="#msg-{message.sequence}">' in box
    assert '<option value="worker" selected>' in box
    assert "window.__xss" not in box  # the box is emptied after a send
    # the timeline shows it, escaped
    page = operator.get(f"/clusters/{cid}/").content.decode()
    assert "USER_GUIDANCE_AGENT" in page
    assert XSS not in page
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in page


def test_guidance_to_every_agent(operator: Client) -> None:
    cid = cluster()

    box = operator.post(f"/clusters/{cid}/guidance/", {"agent": "", "text": "Small"}, headers=HX)

    assert "every agent" in box.content.decode()
    assert [(m.topic, m.receiver) for m in guidance(cid)] == [
        ("USER_GUIDANCE_CLUSTER", "broadcast")
    ]


@pytest.mark.parametrize(
    ("state", "body", "error"),
    [
        ("running", {"agent": "ghost", "text": XSS}, "has no agent &#x27;ghost&#x27;"),
        ("running", {"agent": "", "text": "   "}, "the guidance needs a text"),
        ("running", {"agent": "", "text": "x" * 8001}, "at most 8000 characters"),
        ("stopped", {"agent": "", "text": XSS}, "is not running (it is stopped)"),
    ],
)
def test_a_refused_guidance_is_said_in_the_box_and_keeps_the_text(
    operator: Client, state: str, body: dict[str, str], error: str
) -> None:
    cid = cluster(state)

    box = operator.post(f"/clusters/{cid}/guidance/", body, headers=HX).content.decode()

    assert 'role="alert"' in box
    assert error in box
    assert 'aria-invalid="true"' in box
    assert XSS not in box
    if body["text"] == XSS:
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;</textarea>" in box
    assert guidance(cid) == []


def test_an_ended_clusters_page_has_no_box(operator: Client) -> None:
    cid = cluster("completed")

    assert 'id="guidance-form"' not in operator.get(f"/clusters/{cid}/").content.decode()


def test_without_javascript_the_box_leads_back_to_the_cluster_page(operator: Client) -> None:
    cid = cluster()

    sent = operator.post(f"/clusters/{cid}/guidance/", {"agent": "worker", "text": "B"})
    refused = operator.post(f"/clusters/{cid}/guidance/", {"agent": "ghost", "text": "B"})

    assert (sent.status_code, sent["Location"]) == (302, f"/clusters/{cid}/")
    assert "run_error=" in refused["Location"]
    assert "has no agent" in operator.get(refused["Location"]).content.decode()
    assert len(guidance(cid)) == 1


def test_the_box_needs_a_signed_in_operator_a_post_and_the_csrf_token(operator: Client) -> None:
    cid = cluster()
    user = get_user_model().objects.get(username="op")
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(user)

    assert Client().post(f"/clusters/{cid}/guidance/", {"text": "x"}).status_code == 302
    assert operator.get(f"/clusters/{cid}/guidance/").status_code == 405
    assert checked.post(f"/clusters/{cid}/guidance/", {"text": "x"}, headers=HX).status_code == 403
    assert guidance(cid) == []


def test_the_inspector_explains_the_guidance_pack(operator: Client) -> None:
    cid = cluster()
    guidance_send(cluster_id=cid, text="Use approach B", agent="worker")

    page = operator.get(f"/clusters/{cid}/agents/worker/").content.decode()

    assert "queuedGuidance" in page
    assert "full — required: guidance queued for this agent, given once" in page
    assert "## Guidance (Queued)" in page
