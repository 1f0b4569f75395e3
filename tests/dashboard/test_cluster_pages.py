"""The operator pages: sign-in, clusters, one cluster's timeline, and its live HTML pushes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from ledger.models import Cluster
from ledger.search import search_index_catch_up
from ledger.services import (
    ImportedMessage,
    MessageDraft,
    cluster_create,
    message_import_batch,
    message_publish,
)
from snapshots.state import SNAPSHOT_TRIGGER_TOPICS
from tests.communicators import CONNECT_TIMEOUT
from zeroshot_web.asgi import application

pytestmark = pytest.mark.django_db

XSS = "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>"
T0 = 1_767_000_000_000  # a fixed instant, in ms

AGENTS: list[dict[str, Any]] = [
    {
        "id": "worker",
        "role": "implementation",
        "triggers": [{"topic": "ISSUE_OPENED"}, {"topic": "VALIDATION_RESULT"}],
        "hooks": {"onComplete": {"config": {"topic": "IMPLEMENTATION_READY"}}},
        "contextStrategy": {"maxTokens": 6000, "sources": []},
    },
    {
        "id": "validator",
        "role": "validator",
        "triggers": [{"topic": "IMPLEMENTATION_READY"}],
        "hooks": {"onComplete": {"config": {"topic": "VALIDATION_RESULT"}}},
    },
]


@pytest.fixture
def operator_client() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-not-used-123")
    client = Client()
    client.force_login(user)
    return client


def imported(cluster_id: str, rows: list[tuple[int, str, str, str]], first_id: int = 0) -> None:
    """Store (offset ms, topic, sender, text) rows with exactly these timestamps."""
    message_import_batch(
        cluster_id=cluster_id,
        messages=[
            ImportedMessage(
                id=f"msg_{first_id + i:032x}",
                timestamp=T0 + offset,
                topic=topic,
                sender=sender,
                receiver="broadcast",
                content={"text": text},
                metadata=None,
            )
            for i, (offset, topic, sender, text) in enumerate(rows)
        ],
    )


def many(cluster_id: str, count: int) -> None:
    imported(
        cluster_id, [(i * 1000, "WORKER_PROGRESS", "worker", f"step {i}") for i in range(count)]
    )


def row_texts(html: str) -> list[str]:
    """The sequences of the timeline rows in page order."""
    import re

    return re.findall(r'<li class="msg" id="msg-(\d+)"', html)


# ---- sign-in ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/clusters/test-cluster/", "/clusters/test-cluster/messages/1.json"]
)
def test_pages_send_anonymous_visitors_to_sign_in(cluster: str, path: str) -> None:
    response = Client().get(path)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_sign_in_page_has_a_csrf_protected_form() -> None:
    response = Client().get("/accounts/login/")

    assert response.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in response.content
    assert "Content-Security-Policy" in response.headers


def test_signing_in_through_the_form_leads_to_the_clusters() -> None:
    get_user_model().objects.create_user("op", password="a-long-password-9")
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/?next=/")
    token = page.cookies["csrftoken"].value

    response = client.post(
        "/accounts/login/",
        {
            "username": "op",
            "password": "a-long-password-9",
            "next": "/",
            "csrfmiddlewaretoken": token,
        },
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


# ---- clusters -----------------------------------------------------------------------------


def test_cluster_list_shows_every_cluster_with_its_counts(operator_client: Client) -> None:
    cluster_create(cluster_id="alpha-1", config={"agents": AGENTS}, template="worker-validator")
    cluster_create(cluster_id="beta-2")
    many("alpha-1", 3)

    response = operator_client.get("/")

    html = response.content.decode()
    assert response.status_code == 200
    assert 'href="/clusters/alpha-1/"' in html
    assert 'href="/clusters/beta-2/"' in html
    assert "worker-validator" in html
    assert f'data-ms="{T0 + 2000}"' in html
    assert "Content-Security-Policy" in response.headers
    assert response.headers["Vary"].count("HX-Request") == 1


def test_cluster_list_searches_by_id_and_filters_by_state(operator_client: Client) -> None:
    cluster_create(cluster_id="alpha-1")
    cluster_create(cluster_id="alpha-2")
    cluster_create(cluster_id="beta-3")
    Cluster.objects.filter(pk="alpha-2").update(state="failed")

    searched = operator_client.get("/", {"q": "alpha"}).content.decode()
    failed = operator_client.get("/", {"q": "alpha", "state": "failed"}).content.decode()
    unknown_state = operator_client.get("/", {"state": "nonsense"}).content.decode()

    assert "/clusters/alpha-1/" in searched
    assert "/clusters/alpha-2/" in searched
    assert "/clusters/beta-3/" not in searched
    assert "/clusters/alpha-2/" in failed
    assert "/clusters/alpha-1/" not in failed
    assert 'value="alpha"' in failed
    assert '<option value="failed" selected>' in failed
    assert "/clusters/beta-3/" in unknown_state


def test_cluster_list_htmx_request_gets_only_the_rows(operator_client: Client) -> None:
    cluster_create(cluster_id="alpha-1")

    response = operator_client.get("/", {"q": "alp"}, headers={"HX-Request": "true"})

    html = response.content.decode().strip()
    assert html.startswith('<tbody id="cluster-rows"')
    assert "/clusters/alpha-1/" in html
    assert "<html" not in html


def test_cluster_list_history_restore_gets_the_whole_page(operator_client: Client) -> None:
    response = operator_client.get(
        "/", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )

    assert "<html" in response.content.decode()


def test_empty_cluster_list_says_what_to_do(operator_client: Client) -> None:
    html = operator_client.get("/").content.decode()
    filtered = operator_client.get("/", {"q": "zzz"}).content.decode()

    assert "No clusters yet" in html
    assert "manage.py demo" in html
    assert "No cluster matches these filters" in filtered


def test_cluster_list_shows_tokens_of_the_last_builds(operator_client: Client) -> None:
    from context.models import ContextBuild

    cluster_create(cluster_id="alpha-1", config={"agents": AGENTS})
    for started, tokens in ((1, 100), (2, 4321)):
        ContextBuild.objects.create(
            cluster_id="alpha-1",
            agent_id="worker",
            iteration=started,
            started_at=started,
            max_tokens=6000,
            final_tokens=tokens,
            metrics={},
        )

    html = operator_client.get("/").content.decode()

    assert "4,321" in html
    assert "/ 6,000 · 72%" in html
    assert 'class="bar-fill" width="72"' in html


def test_cluster_list_query_count_is_pinned(
    operator_client: Client, django_assert_num_queries: Any
) -> None:
    for i in range(5):
        cluster_create(cluster_id=f"c-{i}", config={"agents": AGENTS})
        many(f"c-{i}", 3)

    # session, user, clusters, latest builds of all of them, their builds and tasks counted,
    # templates for the start form
    with django_assert_num_queries(6):
        assert operator_client.get("/").status_code == 200


# ---- one cluster --------------------------------------------------------------------------


@pytest.fixture
def busy(db: None) -> str:
    cluster_create(cluster_id="busy-1", config={"agents": AGENTS}, template="worker-validator")
    imported(
        "busy-1",
        [
            (0, "ISSUE_OPENED", "system", "# Fix the login\n\nMore detail here."),
            (1000, "PLAN_READY", "planner", "Plan it"),
            (2000, "WORKER_PROGRESS", "worker", "half way"),
            (3000, "WORKER_PROGRESS", "worker", "almost"),
            (4000, "VALIDATION_RESULT", "validator", "approved"),
        ],
    )
    return "busy-1"


def test_cluster_page_shows_the_timeline_newest_first(operator_client: Client, busy: str) -> None:
    response = operator_client.get(f"/clusters/{busy}/")

    html = response.content.decode()
    assert response.status_code == 200
    assert row_texts(html) == ["5", "4", "3", "2", "1"]
    assert "# Fix the login" in html  # first line in the summary, full text in the body
    assert "More detail here." in html
    assert 'ws-connect="/ws/clusters/busy-1/timeline/"' in html
    assert "Content-Security-Policy" in response.headers


def test_unknown_cluster_is_404(operator_client: Client) -> None:
    assert operator_client.get("/clusters/nope/").status_code == 404


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"topic": "WORKER_PROGRESS"}, ["4", "3"]),
        ({"sender": "validator"}, ["5"]),
        ({"topic": "WORKER_PROGRESS", "sender": "planner"}, []),
        ({"since": str(T0 + 2000)}, ["5", "4", "3"]),
        ({"until": str(T0 + 1000)}, ["2", "1"]),
        ({"since": str(T0 + 1000), "until": str(T0 + 3000)}, ["4", "3", "2"]),
        # ISO date-times without an offset are UTC; with one, they say which instant they mean
        ({"since": "2025-12-29T09:20:02"}, ["5", "4", "3"]),
        ({"until": "2025-12-29T10:20:01+01:00"}, ["2", "1"]),
    ],
)
def test_timeline_filters_return_exactly_the_matching_rows(
    operator_client: Client, busy: str, params: dict[str, str], expected: list[str]
) -> None:
    html = operator_client.get(f"/clusters/{busy}/", params).content.decode()

    assert row_texts(html) == expected


def test_filtered_page_keeps_its_filters_in_the_form_and_the_live_url(
    operator_client: Client, busy: str
) -> None:
    html = operator_client.get(
        f"/clusters/{busy}/", {"topic": "WORKER_PROGRESS", "since": str(T0)}
    ).content.decode()

    assert 'value="WORKER_PROGRESS"' in html
    assert f'data-ms="{T0}"' in html
    assert (
        f'ws-connect="/ws/clusters/busy-1/timeline/?topic=WORKER_PROGRESS&amp;since={T0}"' in html
    )


def test_until_filter_pauses_live_updates(operator_client: Client, busy: str) -> None:
    html = operator_client.get(f"/clusters/{busy}/", {"until": str(T0)}).content.decode()

    assert "ws-connect" not in html
    assert "Live updates paused" in html


def test_bad_time_filter_is_reported_and_ignored(operator_client: Client, busy: str) -> None:
    html = operator_client.get(f"/clusters/{busy}/", {"since": "yesterday"}).content.decode()

    assert row_texts(html) == ["5", "4", "3", "2", "1"]
    assert "is not a date and time" in html


def test_htmx_filter_request_gets_only_the_timeline(operator_client: Client, busy: str) -> None:
    response = operator_client.get(
        f"/clusters/{busy}/", {"sender": "worker"}, headers={"HX-Request": "true"}
    )

    html = response.content.decode().strip()
    assert html.startswith('<div id="timeline"')
    assert row_texts(html) == ["4", "3"]
    assert "<html" not in html
    assert "State snapshot" not in html
    assert "HX-Request" in response.headers["Vary"]


def test_timeline_pages_by_sequence_cursor(operator_client: Client) -> None:
    cluster_create(cluster_id="long-1")
    many("long-1", 250)

    first = operator_client.get("/clusters/long-1/").content.decode()
    second = operator_client.get("/clusters/long-1/", {"before": "151"}).content.decode()
    last = operator_client.get("/clusters/long-1/", {"before": "51"}).content.decode()
    back = operator_client.get("/clusters/long-1/", {"after": "150"}).content.decode()

    assert row_texts(first) == [str(s) for s in range(250, 150, -1)]
    assert 'href="/clusters/long-1/?before=151"' in first
    assert "?after=" not in first
    assert row_texts(second) == [str(s) for s in range(150, 50, -1)]
    assert 'href="/clusters/long-1/?after=150"' in second
    assert "ws-connect" not in second
    assert row_texts(last) == [str(s) for s in range(50, 0, -1)]
    assert "?before=" not in last
    assert row_texts(back) == [str(s) for s in range(250, 150, -1)]


def test_pager_links_keep_the_filters(operator_client: Client) -> None:
    cluster_create(cluster_id="long-1")
    many("long-1", 120)

    html = operator_client.get("/clusters/long-1/", {"sender": "worker"}).content.decode()

    assert 'href="/clusters/long-1/?sender=worker&amp;before=21"' in html


def test_cluster_page_query_count_does_not_grow_with_the_ledger(
    operator_client: Client, django_assert_num_queries: Any
) -> None:
    cluster_create(cluster_id="small", config={"agents": AGENTS})
    cluster_create(cluster_id="large", config={"agents": AGENTS})
    many("small", 10)
    many("large", 300)

    # session, user, cluster, one timeline page, the pipeline's cursor (read-your-writes), open
    # and finished tasks, the trigger buffers, latest builds, newest snapshot, the config versions
    with django_assert_num_queries(11):
        small = operator_client.get("/clusters/small/")
    with django_assert_num_queries(11):
        large = operator_client.get("/clusters/large/")
    with django_assert_num_queries(4):
        operator_client.get("/clusters/large/", headers={"HX-Request": "true"})

    assert len(row_texts(small.content.decode())) == 10
    assert len(row_texts(large.content.decode())) == 100


def test_cluster_page_without_agents_reads_no_tasks_nor_builds(
    operator_client: Client, django_assert_num_queries: Any
) -> None:
    cluster_create(cluster_id="bare")
    many("bare", 120)

    # session, user, cluster, one timeline page, the pipeline's cursor, newest snapshot, the
    # config versions: no agent, so no tasks, trigger buffers or builds to read
    with django_assert_num_queries(7):
        html = operator_client.get("/clusters/bare/").content.decode()

    assert len(row_texts(html)) == 100
    assert "This cluster's config has no agents." in html


def test_side_panel_shows_snapshot_agents_and_topology(operator_client: Client, busy: str) -> None:
    message_publish(
        cluster_id=busy,
        draft=MessageDraft(
            topic="STATE_SNAPSHOT",
            sender="state-snapshotter",
            content={"text": "Task: Fix the login\nValidation: approved", "data": {"version": 1}},
        ),
    )

    html = operator_client.get(f"/clusters/{busy}/").content.decode()

    assert "<li>Task: Fix the login</li>" in html
    assert "<li>Validation: approved</li>" in html
    assert 'href="/clusters/busy-1/messages/6.json"' in html
    assert 'href="/clusters/busy-1/agents/worker/"' in html
    assert "budget 6,000" in html
    # worker publishes IMPLEMENTATION_READY, which triggers validator, and back again
    assert "worker publishes IMPLEMENTATION_READY, which triggers validator." in html
    assert "validator publishes VALIDATION_RESULT, which triggers worker." in html
    assert "outside publishes ISSUE_OPENED, which triggers worker." in html


def test_empty_cluster_says_what_to_do(operator_client: Client) -> None:
    cluster_create(cluster_id="fresh-1")

    html = operator_client.get("/clusters/fresh-1/").content.decode()

    assert "No messages yet" in html
    assert "POST /api/v1/clusters/fresh-1/messages" in html
    assert "No snapshot yet" in html


def test_the_empty_snapshot_panel_names_every_topic_that_makes_a_snapshot(
    operator_client: Client,
) -> None:
    """The hint names the snapshotter's trigger topics, all of them, and says that progress
    topics count only with progress fields: a WORKER_PROGRESS of text alone makes none."""
    cluster = cluster_create(cluster_id="quiet-1").id
    message_publish(
        cluster_id=cluster,
        draft=MessageDraft(topic="WORKER_PROGRESS", sender="worker", content={"text": "working"}),
    )

    html = operator_client.get(f"/clusters/{cluster}/").content.decode()
    panel = html[html.index('id="snapshot-panel"') :]
    panel = panel[: panel.index("</section>")]

    assert "No snapshot yet" in panel
    for topic in SNAPSHOT_TRIGGER_TOPICS:
        assert f'<span class="mono">{topic}</span>' in panel
    assert "with progress fields" in panel


def test_message_json_is_the_wire_shape(operator_client: Client, busy: str) -> None:
    response = operator_client.get(f"/clusters/{busy}/messages/2.json")

    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["sequence"] == "2"
    assert body["topic"] == "PLAN_READY"
    assert operator_client.get(f"/clusters/{busy}/messages/99.json").status_code == 404


# ---- untrusted agent text -----------------------------------------------------------------


def test_agent_text_is_escaped_everywhere(operator_client: Client) -> None:
    cluster_create(
        cluster_id="xss-1",
        config={
            "agents": [{"id": "xss-agent", "role": XSS, "triggers": [{"topic": "ISSUE_OPENED"}]}]
        },
        template=XSS,
    )
    message_publish(
        cluster_id="xss-1",
        draft=MessageDraft(
            topic="ISSUE_OPENED",
            sender=XSS,
            content={"text": XSS, "data": {"x": XSS}},
            metadata={"m": XSS},
        ),
    )
    message_publish(
        cluster_id="xss-1",
        draft=MessageDraft(topic="STATE_SNAPSHOT", sender="s", content={"text": XSS}),
    )

    pages = [
        operator_client.get("/").content.decode(),
        operator_client.get("/clusters/xss-1/").content.decode(),
        operator_client.get("/clusters/xss-1/", headers={"HX-Request": "true"}).content.decode(),
        operator_client.get("/clusters/xss-1/", {"sender": XSS}).content.decode(),
    ]

    for html in pages:
        assert "&lt;script&gt;" in html
        assert "<script>window.__xss" not in html
        assert "<img src=x" not in html


# ---- live HTML pushes ---------------------------------------------------------------------


async def close_code(communicator: WebsocketCommunicator) -> Any:
    """The close code of a socket that is accepted, then closed at once (a refusal)."""
    connected, _ = await communicator.connect(timeout=CONNECT_TIMEOUT)
    assert connected
    closing = await communicator.receive_output(timeout=5)
    assert closing["type"] == "websocket.close"
    return closing.get("code")


def _session_cookie(client: Client) -> bytes:
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.mark.django_db(transaction=True)
def test_timeline_socket_refuses_anonymous_clients(cluster: str) -> None:
    async def scenario() -> Any:
        communicator = WebsocketCommunicator(application, f"/ws/clusters/{cluster}/timeline/")
        return await close_code(communicator)

    assert asyncio.run(scenario()) == 4401


@pytest.mark.django_db(transaction=True)
def test_timeline_socket_refuses_api_keys(cluster: str, api_key: str) -> None:
    async def scenario() -> Any:
        communicator = WebsocketCommunicator(
            application, f"/ws/clusters/{cluster}/timeline/?key={api_key}"
        )
        return await close_code(communicator)

    assert asyncio.run(scenario()) == 4401


@pytest.mark.django_db(transaction=True)
def test_timeline_socket_pushes_the_rendered_row_to_a_signed_in_session(
    cluster: str, operator_client: Client
) -> None:
    headers = [(b"cookie", _session_cookie(operator_client)), (b"origin", b"http://localhost")]

    async def scenario() -> tuple[str, str]:
        everything = WebsocketCommunicator(
            application, f"/ws/clusters/{cluster}/timeline/", headers=headers
        )
        plans_only = WebsocketCommunicator(
            application, f"/ws/clusters/{cluster}/timeline/?topic=PLAN_READY", headers=headers
        )
        assert (await everything.connect(timeout=CONNECT_TIMEOUT))[0]
        assert (await plans_only.connect(timeout=CONNECT_TIMEOUT))[0]
        from channels.db import database_sync_to_async

        await database_sync_to_async(message_publish)(
            cluster_id=cluster,
            draft=MessageDraft(topic="WORKER_PROGRESS", sender="worker", content={"text": XSS}),
        )
        html = await everything.receive_from(timeout=5)
        filtered = await plans_only.receive_from(timeout=5)
        await everything.disconnect()
        await plans_only.disconnect()
        return html, filtered

    html, filtered = asyncio.run(scenario())

    assert html.startswith('<ol hx-swap-oob="afterbegin:#timeline-rows">')
    assert '<li class="msg" id="msg-1"' in html
    assert "WORKER_PROGRESS" in html
    assert "&lt;script&gt;" in html
    assert "<script>window.__xss" not in html
    # a page filtered to another topic gets no row, but its header's count still moves
    assert "timeline-rows" not in filtered
    count = '<span id="cluster-count" class="count" data-sequence="1" hx-swap-oob="true">'
    assert count in filtered


@pytest.mark.django_db(transaction=True)
def test_timeline_socket_for_unknown_cluster_is_refused(operator_client: Client) -> None:
    headers = [(b"cookie", _session_cookie(operator_client))]

    async def scenario() -> Any:
        communicator = WebsocketCommunicator(
            application, "/ws/clusters/nope/timeline/", headers=headers
        )
        return await close_code(communicator)

    assert asyncio.run(scenario()) == 4404


# ---- search, catching up, what the header and the list say ------------------------------------


def test_search_finds_words_by_stem_and_marks_them_escaped(
    operator_client: Client, busy: str
) -> None:
    imported(busy, [(5000, "AGENT_OUTPUT", "worker", f"Fixed the login {XSS} for good")], 100)

    html = operator_client.get(f"/clusters/{busy}/", {"q": "fixing logins"}).content.decode()
    none = operator_client.get(f"/clusters/{busy}/", {"q": "nothing-here"}).content.decode()
    bad = operator_client.get(f"/clusters/{busy}/", {"q": "!!"}).content.decode()

    assert row_texts(html) == ["6", "1"]  # "# Fix the login" and "Fixed the login …"
    assert "<mark>Fixed</mark> the <mark>login</mark>" in html
    assert "&lt;script&gt;" in html
    assert "<script>window.__xss" not in html
    assert "Search results" in html
    assert 'value="fixing logins"' in html
    # the socket stays for the header and the snapshot; rows come from searching again
    assert 'ws-connect="/ws/clusters/busy-1/timeline/?q=fixing+logins"' in html
    assert "text holds every word of “nothing-here”" in none
    assert "A search needs a word" in bad
    assert row_texts(bad) == ["6", "5", "4", "3", "2", "1"]


def test_search_combines_with_filters_and_pages(operator_client: Client) -> None:
    cluster_create(cluster_id="long-1")
    imported(
        "long-1",
        [
            (i * 1000, ("NOTES", "CHATTER")[i % 2], "w", f"step {i} of the export")
            for i in range(230)
        ],
    )

    first = operator_client.get("/clusters/long-1/", {"q": "export", "topic": "NOTES"})
    html = first.content.decode()
    older = operator_client.get(
        "/clusters/long-1/", {"q": "export", "topic": "NOTES", "before": "30"}
    ).content.decode()

    assert row_texts(html) == [str(s) for s in range(229, 29, -2)]
    assert 'href="/clusters/long-1/?q=export&amp;topic=NOTES&amp;before=31"' in html
    assert row_texts(older) == [str(s) for s in range(29, 0, -2)]


def test_search_page_query_count_is_pinned(
    operator_client: Client, django_assert_num_queries: Any
) -> None:
    cluster_create(cluster_id="big", config={"agents": AGENTS})
    many("big", 300)
    search_index_catch_up()  # on SQLite, what the first search after the writes would do
    behind = 1 if connection.vendor == "sqlite" else 0  # SQLite: is the index behind?

    # session, user, cluster, the search (snippets included), the pipeline's cursor, open and
    # finished tasks, the trigger buffers, latest builds, newest snapshot, the config versions
    with django_assert_num_queries(11 + behind):
        response = operator_client.get("/clusters/big/", {"q": "step"})
    # htmx: the region only
    with django_assert_num_queries(4 + behind):
        operator_client.get("/clusters/big/", {"q": "step"}, headers={"HX-Request": "true"})

    assert len(row_texts(response.content.decode())) == 100


def test_a_page_that_reconnects_gets_what_it_missed(operator_client: Client, busy: str) -> None:
    imported(busy, [(6000, "WORKER_PROGRESS", "worker", "done while away")], 100)

    response = operator_client.get(f"/clusters/{busy}/timeline/missed/", {"after": "5"})
    filtered = operator_client.get(
        f"/clusters/{busy}/timeline/missed/", {"after": "5", "topic": "PLAN_READY"}
    ).content.decode()
    nothing = operator_client.get(
        f"/clusters/{busy}/timeline/missed/", {"after": "6"}
    ).content.decode()

    html = response.content.decode()
    assert html.startswith('<ol hx-swap-oob="afterbegin:#timeline-rows">')
    assert row_texts(html) == ["6"]
    assert "done while away" in html
    assert (
        'id="cluster-count" class="count" data-sequence="6" hx-swap-oob="true">6 messages' in html
    )
    assert "timeline-rows" not in filtered
    assert 'data-sequence="6"' in filtered
    assert row_texts(nothing) == []


def test_a_page_opened_on_an_empty_cluster_gets_everything_it_missed(
    operator_client: Client,
) -> None:
    cluster_create(cluster_id="fresh-1")
    many("fresh-1", 3)

    html = operator_client.get(
        "/clusters/fresh-1/timeline/missed/", {"after": "0"}
    ).content.decode()

    assert row_texts(html) == ["3", "2", "1"]
    assert 'data-sequence="3" hx-swap-oob="true">3 messages' in html


def test_a_page_that_missed_more_than_a_page_gets_the_whole_timeline(
    operator_client: Client,
) -> None:
    cluster_create(cluster_id="long-1")
    many("long-1", 150)

    response = operator_client.get("/clusters/long-1/timeline/missed/", {"after": "10"})

    assert response["HX-Retarget"] == "#timeline"
    assert response["HX-Reswap"] == "outerHTML"
    html = response.content.decode()
    assert html.strip().startswith('<div id="timeline"')
    assert row_texts(html)[:2] == ["150", "149"]


def test_missed_rows_query_count_is_pinned(
    operator_client: Client, busy: str, django_assert_num_queries: Any
) -> None:
    # session, user, cluster, the rows after the cursor (its timestamp in a subquery), snapshot
    with django_assert_num_queries(5):
        operator_client.get(f"/clusters/{busy}/timeline/missed/", {"after": "2"})
    # nothing new: no rows to look for, no snapshot
    with django_assert_num_queries(3):
        operator_client.get(f"/clusters/{busy}/timeline/missed/", {"after": "5"})


@pytest.mark.django_db(transaction=True)
def test_a_snapshot_push_replaces_the_snapshot_panel(cluster: str, operator_client: Client) -> None:
    headers = [(b"cookie", _session_cookie(operator_client)), (b"origin", b"http://localhost")]

    async def scenario() -> str:
        page = WebsocketCommunicator(
            application, f"/ws/clusters/{cluster}/timeline/", headers=headers
        )
        assert (await page.connect(timeout=CONNECT_TIMEOUT))[0]
        from channels.db import database_sync_to_async

        # an ISSUE_OPENED makes the snapshotter publish a STATE_SNAPSHOT right behind it
        await database_sync_to_async(message_publish)(
            cluster_id=cluster,
            draft=MessageDraft(
                topic="ISSUE_OPENED", sender="system", content={"text": "# Ship it"}
            ),
        )
        # two messages: pushed in one frame or two, as the push loop coalesces them
        pushes = [await page.receive_from(timeout=5)]
        while "snapshot-panel" not in "".join(pushes):
            pushes.append(await page.receive_from(timeout=5))
        await page.disconnect()
        return "".join(pushes)

    html = asyncio.run(scenario())

    assert '<section id="snapshot-panel" class="panel"' in html
    assert 'hx-swap-oob="true"' in html
    assert "Task: Ship it" in html
    assert 'data-sequence="2" hx-swap-oob="true">2 messages' in html


def test_the_cluster_list_shows_the_last_message_not_the_last_build(
    operator_client: Client,
) -> None:
    from context.models import ContextBuild

    cluster_create(cluster_id="alpha-1", config={"agents": AGENTS})
    many("alpha-1", 3)
    for agent, tokens, budget in (("worker", 5400, 6000), ("planner", 225, 100_000)):
        ContextBuild.objects.create(
            cluster_id="alpha-1",
            agent_id=agent,
            iteration=1,
            started_at=T0 + 48 * 60_000,  # long after the last message
            max_tokens=budget,
            final_tokens=tokens,
            metrics={},
        )
    Cluster.objects.filter(pk="alpha-1").update(last_timestamp=T0 + 48 * 60_000)

    html = operator_client.get("/").content.decode()

    assert f'data-ms="{T0 + 2000}"' in html  # the third message, not the builds' clock
    assert f'data-ms="{T0 + 48 * 60_000}"' not in html
    # the most loaded agent's bar, not a sum across budgets of different sizes
    assert '<span class="mono budget-agent">worker</span> 5,400' in html
    assert "/ 6,000 · 90%" in html
    assert 'class="bar-fill" width="90"' in html
    assert "+1</span>" in html
    assert "planner: 225 / 100,000 (0%)" in html
