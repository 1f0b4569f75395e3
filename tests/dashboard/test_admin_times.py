"""The admin shows times as the dashboard does: a <time> in its one format, never epoch ms."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from context.services.templates import templates_load_builtin
from ledger.interfaces import MessageDraft, admin_time, cluster_create, message_publish
from ledger.models import Cluster, Message

pytestmark = pytest.mark.django_db

MS = 1796295881632  # 2026-12-03 11:04:41.632 UTC
SHOWN = "2026-12-03 11:04:41 UTC"
TIME = f'<time datetime="2026-12-03T11:04:41.632Z" data-ms="{MS}" data-format="full"'


@pytest.fixture
def admin_client() -> Client:
    user = get_user_model().objects.create_superuser("admin", password="pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


def test_an_instant_is_the_dashboards_time_element() -> None:
    assert admin_time(MS).startswith(TIME)
    assert f">{SHOWN}</time>" in admin_time(MS)
    assert admin_time(datetime(2026, 12, 3, 11, 4, 41, 632000, tzinfo=UTC)) == admin_time(MS)
    assert admin_time(None) == "-"


def test_cluster_and_message_pages_show_dates_not_milliseconds(admin_client: Client) -> None:
    # given a cluster and a message stored at a known instant
    cid = cluster_create(cluster_id="c-admin").id
    message_publish(
        cluster_id=cid, draft=MessageDraft(topic="GO", sender="planner", content={"text": "go"})
    )
    Cluster.objects.filter(id=cid).update(created_at=MS, last_timestamp=MS)
    Message.objects.update(timestamp=MS)
    message = Message.objects.get()
    # when the operator browses them in the admin
    pages = [
        admin_client.get("/admin/ledger/cluster/"),
        admin_client.get(f"/admin/ledger/cluster/{cid}/change/"),
        admin_client.get("/admin/ledger/message/"),
        admin_client.get(f"/admin/ledger/message/{message.pk}/change/"),
    ]
    # then every time is the dashboard's <time>, and no page prints the raw milliseconds
    for response in pages:
        assert response.status_code == 200
        html = response.content.decode()
        assert TIME in html
        assert not re.search(rf">\s*{MS}\s*<", html)
        assert 'src="/static/js/app.js"' in html


def test_templates_and_builds_show_dates(admin_client: Client) -> None:
    templates_load_builtin()
    html = admin_client.get("/admin/context/clustertemplate/").content.decode()
    assert 'data-format="full"' in html
    assert " UTC</time>" in html
