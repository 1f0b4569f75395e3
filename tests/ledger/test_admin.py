from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ledger.models import Cluster, Message
from ledger.services import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    user = get_user_model().objects.create_superuser("admin", password="pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def stored() -> tuple[str, int]:
    cid = cluster_create(cluster_id="c-admin").id
    message_publish(
        cluster_id=cid,
        draft=MessageDraft(topic="PLAN_READY", sender="planner", content={"text": "<b>plan</b>"}),
    )
    return cid, Message.objects.get().pk


def test_clusters_and_messages_are_browsable(admin_client: Client, stored: tuple[str, int]) -> None:
    cid, message_pk = stored

    clusters = admin_client.get("/admin/ledger/cluster/")
    messages = admin_client.get("/admin/ledger/message/")
    one = admin_client.get(f"/admin/ledger/message/{message_pk}/change/")

    assert clusters.status_code == messages.status_code == one.status_code == 200
    assert cid in clusters.content.decode()
    assert "PLAN_READY" in messages.content.decode()
    assert "&lt;b&gt;plan&lt;/b&gt;" in one.content.decode()


def test_messages_and_clusters_are_read_only(admin_client: Client, stored: tuple[str, int]) -> None:
    cid, message_pk = stored

    edit = admin_client.post(f"/admin/ledger/message/{message_pk}/change/", {"topic": "CHANGED"})
    add = admin_client.get("/admin/ledger/message/add/")
    delete_message = admin_client.post(
        f"/admin/ledger/message/{message_pk}/delete/", {"post": "yes"}
    )
    edit_cluster = admin_client.post(f"/admin/ledger/cluster/{cid}/change/", {"state": "failed"})

    assert edit.status_code == 403
    assert add.status_code == 403
    assert delete_message.status_code == 403
    assert edit_cluster.status_code == 403
    assert Message.objects.get().topic == "PLAN_READY"
    assert Cluster.objects.get().state == "initializing"


def test_deleting_a_cluster_asks_for_confirmation_first(
    admin_client: Client, stored: tuple[str, int]
) -> None:
    cid, _ = stored

    confirm = admin_client.get(f"/admin/ledger/cluster/{cid}/delete/")

    assert confirm.status_code == 200
    assert "Are you sure" in confirm.content.decode()
    assert Cluster.objects.filter(pk=cid).exists()

    done = admin_client.post(f"/admin/ledger/cluster/{cid}/delete/", {"post": "yes"})

    assert done.status_code == 302
    assert done["Location"] == "/admin/ledger/cluster/"  # back to the list, not the admin's home
    assert not Cluster.objects.filter(pk=cid).exists()
    assert Message.objects.count() == 0


def test_the_admin_wears_the_apps_colours_and_name(admin_client: Client) -> None:
    page = admin_client.get("/admin/").content.decode()

    assert 'zeroshot-web <span class="site-part">admin</span>' in page
    assert "/static/css/admin.css" in page
    assert "Django administration" not in page
    assert 'href="/">← Dashboard</a>' in page
