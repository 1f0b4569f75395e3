"""The cluster list shows each cluster's size: the rows retention would delete with it."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.sizes import ClusterSize, cluster_sizes
from ledger.selectors import cluster_list
from tests.operations.retention_data import cluster_filled

pytestmark = pytest.mark.django_db


def test_each_cluster_size_counts_its_messages_builds_and_tasks(
    django_assert_num_queries: object,
) -> None:
    cluster_filled("big1", messages=250, builds=4)
    cluster_filled("small1", messages=3, builds=1)
    cluster_filled("bare1", messages=0, builds=0)
    clusters = cluster_list()

    with django_assert_num_queries(1):  # type: ignore[operator]
        sizes = cluster_sizes(clusters=clusters)

    assert sizes == {
        "big1": ClusterSize(messages=250, builds=4, tasks=4),
        "small1": ClusterSize(messages=3, builds=1, tasks=1),
        "bare1": ClusterSize(messages=0, builds=0, tasks=0),
    }
    assert sizes["big1"].rows == 258


def test_the_cluster_list_page_has_a_size_column() -> None:
    cluster_filled("big1", messages=1200, builds=4)
    user = get_user_model().objects.create_user("op", password="pw-not-used-123")
    client = Client()
    client.force_login(user)

    html = client.get("/").content.decode()

    assert 'title="Stored rows: messages, context builds and tasks">Size</th>' in html
    cell = re.search(r'<td class="num" data-label="Size" title="([^"]*)">([^<]*)</td>', html)
    assert cell is not None
    assert cell.groups() == ("1,200 messages · 4 builds · 4 tasks", "1,208 rows")
