"""The admin's template preview: every agent of an unsaved template, built against a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from context.services.templates import template_get, templates_load_builtin
from ledger.interfaces import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db

XSS = "<script>window.__xss=1</script>"
URL = "/templates/preview/"


@pytest.fixture
def staff(django_user_model: Any) -> Client:
    templates_load_builtin()
    client = Client()
    client.force_login(django_user_model.objects.create_user("op", password="pw", is_staff=True))
    return client


@pytest.fixture
def run(db: None) -> str:
    cid = cluster_create(cluster_id="run-1").id
    message_publish(
        cluster_id=cid,
        draft=MessageDraft(topic="ISSUE_OPENED", sender="system", content={"text": XSS}),
    )
    return cid


def body() -> dict[str, Any]:
    return template_get(name="worker-validator").body


def test_the_panel_lists_clusters_to_try_on(staff: Client, run: str) -> None:
    html = staff.get(URL).content.decode()

    assert '<option value="run-1">run-1 · no template · 1 messages</option>' in html
    assert "data-preview-run" in html
    assert "<form" not in html  # it sits inside the admin's own form


def test_every_agent_is_built_with_the_unsaved_body(staff: Client, run: str) -> None:
    edited = body()
    edited["agents"][0]["contextStrategy"]["maxTokens"] = 321

    response = staff.post(URL, {"body": json.dumps(edited), "cluster": run})

    html = response.content.decode()
    assert response.status_code == 200
    assert html.count('<article class="preview-agent"') == len(edited["agents"])
    assert "budget 321 tokens" in html
    assert '<svg class="bb-bar"' in html
    assert "<script" not in html


def test_a_broken_template_is_named_not_built(staff: Client, run: str) -> None:
    edited = body()
    edited["agents"][0]["contextStrategy"]["sources"][0]["strategy"] = "newest"

    invalid = staff.post(URL, {"body": json.dumps(edited), "cluster": run}).content.decode()
    not_json = staff.post(URL, {"body": "{", "cluster": run}).content.decode()
    no_cluster = staff.post(URL, {"body": json.dumps(body()), "cluster": "nope"}).content.decode()

    assert "fix the template first" in invalid
    assert "unknown strategy &quot;newest&quot;" in invalid
    assert "not valid JSON" in not_json
    assert "cluster &#x27;nope&#x27; does not exist" in no_cluster


def test_only_staff_may_preview(client: Client, django_user_model: Any, run: str) -> None:
    client.force_login(django_user_model.objects.create_user("viewer", password="pw"))

    assert client.get(URL).status_code == 302
    assert client.post(URL, {"body": "{}", "cluster": run}).status_code == 302


def test_preview_query_counts_are_pinned(
    staff: Client, run: str, django_assert_num_queries: Any
) -> None:
    text = json.dumps(body())
    # session, user, the clusters
    with django_assert_num_queries(3):
        staff.get(URL)
    # session, user, the cluster; then each agent's preview build as the inspector makes it
    # (the worker 9: cluster, one query for its three trigger topics, previous build, the
    # guidance mailbox's two seeks in one statement, task-end anchor, four sources; the
    # validator 9: cluster, its trigger topic then any message, previous build, the guidance
    # mailbox's two seeks in one statement, three sources, the skip hints)
    with django_assert_num_queries(21):
        staff.post(URL, {"body": text, "cluster": run})
