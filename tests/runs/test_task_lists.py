"""Task lists never load whole results (issue 17, item 10): a page carries each result's size
and first characters; one task's read carries all of it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.keys import api_key_create
from runs.selectors import RESULT_PREVIEW_CHARS
from tests.conftest import ApiClient
from tests.runs.test_tasks import agent, claim, complete, publish, running

pytestmark = pytest.mark.django_db(transaction=True)

BIG = 900_000
TASKS = 5


def big_results(api: ApiClient) -> tuple[str, list[str]]:
    cid = running(agent("worker"))
    ids = []
    for n in range(TASKS):
        publish(cid)
        task = claim(api)["task"]
        assert complete(api, task, {"summary": f"{n}" + "x" * BIG}).status_code == 200
        ids.append(task["id"])
    return cid, ids


def result_column_reads(queries: list[dict[str, Any]]) -> list[str]:
    """The SELECTs that read the result column itself, not its size or its first characters."""
    whole = re.compile(r'"runs_task"\."result"(?!\)::text| AS text\))', re.IGNORECASE)
    return [q["sql"] for q in queries if q["sql"].startswith("SELECT") and whole.search(q["sql"])]


def test_a_page_of_tasks_carries_sizes_and_previews_not_results(api: ApiClient) -> None:
    cid, _ = big_results(api)

    with CaptureQueriesContext(connection) as queries:
        page = api.get(f"/api/v1/clusters/{cid}/tasks")

    assert page.status_code == 200
    assert len(page.content) < 16_000
    items = page.json()["items"]
    assert len(items) == TASKS
    assert all("result" not in item for item in items)
    assert all(item["result_chars"] > BIG for item in items)
    assert all(len(item["result_preview"]) == RESULT_PREVIEW_CHARS for item in items)
    assert items[0]["result_preview"].startswith('{"summary"')
    assert result_column_reads(queries.captured_queries) == []


def test_one_tasks_read_carries_its_whole_result(api: ApiClient) -> None:
    _, ids = big_results(api)

    one = api.get(f"/api/v1/tasks/{ids[0]}")

    assert one.status_code == 200
    assert one.json()["result"] == {"summary": "0" + "x" * BIG}


def test_a_cluster_scoped_key_reads_no_task_of_another_cluster(api: ApiClient) -> None:
    _, ids = big_results(api)
    running(agent("worker"), cluster_id="elsewhere")
    _, plain = api_key_create(name="scoped", cluster_id="elsewhere")

    refused = ApiClient(plain).get(f"/api/v1/tasks/{ids[0]}")

    assert refused.status_code == 403


def test_the_dashboards_tasks_tab_loads_no_result(api: ApiClient) -> None:
    cid, _ = big_results(api)
    operator = Client()
    operator.force_login(get_user_model().objects.create_user("op", password="pw-for-tests-1"))

    with CaptureQueriesContext(connection) as queries:
        page = operator.get(f"/clusters/{cid}/tasks/")

    assert page.status_code == 200
    assert len(page.content) < 200_000
    assert result_column_reads(queries.captured_queries) == []


def test_pages_of_tasks_made_in_one_millisecond_hold_each_task_once() -> None:
    from ledger.interfaces import cluster_create
    from runs.models import Task
    from runs.selectors import task_list

    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    for n in range(7):
        Task.objects.create(
            id=f"task_{n:02d}",
            cluster_id="c1",
            agent_id="a",
            iteration=n + 1,
            trigger_message_id=f"m{n}",
            trigger_topic="GO",
            trigger_sequence=n,
            created_at=1000 + n // 4,  # four, then three, in one millisecond each
            available_at=1000,
        )
    seen: list[str] = []
    before = None
    while True:
        page = task_list(cluster_id="c1", before=before, limit=2)
        seen += [t.id for t in page]
        if len(page) < 2:
            break
        before = page[-1].id
    assert seen == [f"task_{n:02d}" for n in (6, 5, 4, 3, 2, 1, 0)]
