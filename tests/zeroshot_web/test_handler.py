"""The ASGI handler that answers a synchronous view in one thread hand-off
(zeroshot_web/handler.py): Django's answers, byte for byte, whichever way a request goes."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.test import Client

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from zeroshot_web.handler import SyncViewHandler, _sync_view

pytestmark = pytest.mark.django_db(transaction=True)

# A form's token is masked afresh on every response.
CSRF = re.compile(rb'(csrfmiddlewaretoken" value="|"X-CSRFToken": ")[^"&]+')


def answers(app: Any, requests: list[tuple[str, str, dict[str, str]]]) -> list[Any]:
    async def call() -> list[Any]:
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                out = []
                for method, path, headers in requests:
                    response = await client.request(method, path, headers=headers)
                    kept = {
                        k: v
                        for k, v in response.headers.items()
                        if k not in ("set-cookie", "content-length")
                    }
                    out.append((response.status_code, kept, CSRF.sub(rb"\1T", response.content)))
                return out
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(call())


def test_every_kind_of_request_gets_djangos_answer(api_key: str) -> None:
    # given a cluster with messages, a signed-in operator and an agent's key
    cluster_create(
        cluster_id="c1",
        config={"agents": [{"id": "w", "role": "implementation", "prompt": "Work."}]},
    )
    for n in range(3):
        message_publish(
            cluster_id="c1", draft=MessageDraft(topic="T", sender="s", content={"text": f"<{n}>"})
        )
    client = Client()
    client.force_login(get_user_model().objects.create_user("op", password="pw-not-used-123"))
    cookie = {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}
    bearer = {"Authorization": f"Bearer {api_key}"}
    requests = [
        ("GET", "/clusters/c1/", cookie),  # a synchronous page
        ("GET", "/clusters/c1/?q=2", cookie),
        ("GET", "/clusters/nope/", cookie),  # its view's 404
        ("GET", "/clusters/c1/", {}),  # signed out: to the login page
        ("GET", "/no/such/path/", cookie),  # no view: Django's async chain
        ("GET", "/api/v1/clusters/c1/messages", bearer),  # the API
        ("POST", "/api/v1/tasks/claim", {}),  # an async view, refused
        ("POST", "/clusters/c1/stop/", cookie),  # no CSRF token
    ]

    # when each is served by Django's handler and by ours
    django = answers(ASGIHandler(), requests)
    ours = answers(SyncViewHandler(), requests)

    # then every status, header and body is the same
    assert [a[0] for a in ours] == [200, 200, 404, 302, 404, 200, 401, 403]
    assert ours == django
    assert b"&lt;2&gt;" in ours[0][2]


def test_only_synchronous_views_take_the_one_hand_off() -> None:
    assert _sync_view("/clusters/c1/")
    assert _sync_view("/accounts/login/")
    assert not _sync_view("/api/v1/tasks/claim")  # an async view
    assert not _sync_view("/no/such/path/")
