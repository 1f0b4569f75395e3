"""The ASGI handler whose requests run on threads that outlive them, and that answers a
synchronous view in one thread hand-off (zeroshot_web/handler.py): Django's answers, byte for
byte, whichever way a request goes."""

from __future__ import annotations

import asyncio
import re
import threading
import warnings
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_started
from django.db import connection, connections
from django.db.backends.signals import connection_created
from django.test import Client, override_settings

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from zeroshot_web.handler import LentThread, RequestThreads, SyncViewHandler, _sync_view

pytestmark = pytest.mark.django_db(transaction=True)

# A form's token is masked afresh on every response.
CSRF = re.compile(rb'(csrfmiddlewaretoken" value="|"X-CSRFToken": ")[^"&]+')


def answers(
    app: Any, requests: list[tuple[str, str, dict[str, str]]], *, at_once: bool = False
) -> list[Any]:
    """Each request's status, headers and body, asked one after the other (or all ``at_once``)."""

    async def call() -> list[Any]:
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                asked = [client.request(m, path, headers=headers) for m, path, headers in requests]
                if at_once:
                    responses = await asyncio.gather(*asked)
                else:
                    responses = [await response for response in asked]
                return [
                    (
                        response.status_code,
                        {
                            k: v
                            for k, v in response.headers.items()
                            if k not in ("set-cookie", "content-length")
                        },
                        CSRF.sub(rb"\1T", response.content),
                    )
                    for response in responses
                ]
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
        ("GET", "/api/v1/clusters/c1/export", bearer),  # a streamed answer
    ]

    # when each is served by Django's handler and by ours
    with pytest.warns(Warning, match="must consume synchronous iterators"):
        django = answers(ASGIHandler(), requests)  # reads all of the export first
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ours sends the export as it reads it
        ours = answers(SyncViewHandler(), requests)

    # then every status, header and body is the same
    assert [a[0] for a in ours] == [200, 200, 404, 302, 404, 200, 401, 403, 200]
    assert ours == django
    assert b"&lt;2&gt;" in ours[0][2]
    assert ours[-1][2].count(b"\n") == 3  # the export: one line a message


@override_settings(WHITENOISE_USE_FINDERS=True, WHITENOISE_AUTOREFRESH=True)
def test_a_static_file_is_sent_as_it_is_read() -> None:
    # given WhiteNoise serving the app's files as it does under make run (a file response)
    requests = [("GET", "/static/css/app.css", {})]

    # when Django's handler and ours serve one
    with pytest.warns(Warning, match="must consume synchronous iterators"):
        django = answers(ASGIHandler(), requests)  # reads all of the file first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = answers(SyncViewHandler(), requests)

    # then both send the whole file
    assert ours[0][0] == 200
    assert ours == django
    assert len(ours[0][2]) > 1000


def signed_in_cookie() -> dict[str, str]:
    client = Client()
    client.force_login(get_user_model().objects.create_user("op", password="pw-not-used-123"))
    return {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}


def test_pages_and_queries_run_on_one_kept_thread_that_keeps_its_connection(
    api_key: str,
) -> None:
    # given a cluster, a signed-in operator and an agent's key
    cluster_create(cluster_id="c1")
    cookie = signed_in_cookie()
    bearer = {"Authorization": f"Bearer {api_key}"}
    started_on: list[str] = []
    connected_on: list[str] = []

    def request_thread(**kwargs: Any) -> None:
        started_on.append(threading.current_thread().name)

    def connection_thread(**kwargs: Any) -> None:
        connected_on.append(threading.current_thread().name)

    # when pages (synchronous views) and queries (Django's async chain) are served in turn
    handler = SyncViewHandler()
    request_started.connect(request_thread)
    connection_created.connect(connection_thread)
    try:
        page, query = (
            ("GET", "/clusters/c1/", cookie),
            ("GET", "/api/v1/clusters/c1/messages", bearer),
        )
        served = answers(handler, [page, query] * 3)
    finally:
        request_started.disconnect(request_thread)
        connection_created.disconnect(connection_thread)

    # then each ran on the same thread, Django's signals included
    assert [a[0] for a in served] == [200] * 6
    assert len(started_on) == 6
    assert len(set(started_on)) == 1
    assert started_on[0].startswith("request")
    assert set(connected_on) == set(started_on)
    assert handler.threads.started == 1
    if connection.vendor == "sqlite":
        # which opened the database once, not once a request (on PostgreSQL, each request
        # borrows a connection from the pool and gives it back)
        assert len(connected_on) == 1


@override_settings(REQUEST_THREADS=1)
def test_pages_asked_at_once_past_the_kept_threads_get_threads_of_their_own() -> None:
    cluster_create(cluster_id="c1")
    cookie = signed_in_cookie()
    handler = SyncViewHandler()

    served = answers(handler, [("GET", "/clusters/c1/", cookie)] * 4, at_once=True)

    assert [a[0] for a in served] == [200] * 4
    assert handler.threads.idle == 1


def test_threads_are_kept_up_to_their_number_and_lent_only_when_used() -> None:
    threads = RequestThreads(2)
    lent = [threads.lend() for _ in range(3)]  # none waits: a third is started
    assert len(set(lent)) == 3
    assert threads.started == 3
    for thread in lent:
        threads.give_back(thread)
    assert threads.idle == 2
    with pytest.raises(RuntimeError, match="shutdown"):
        lent[2].submit(print)  # the one past the two kept was let go
    assert threads.lend() in lent[:2]

    unused = LentThread(threads)
    unused.release()  # a request that made no synchronous call borrowed nothing
    assert threads.idle == 1
    used = LentThread(threads)
    assert used.submit(threading.current_thread).result().name.startswith("request")
    assert threads.idle == 0
    used.release()
    assert threads.idle == 1
    with pytest.raises(ValueError, match="at least one"):
        RequestThreads(0)


def test_only_synchronous_views_take_the_one_hand_off() -> None:
    assert _sync_view("/clusters/c1/")
    assert _sync_view("/accounts/login/")
    assert not _sync_view("/api/v1/tasks/claim")  # an async view
    assert not _sync_view("/no/such/path/")
