"""Retention: ``prune_clusters`` exports and deletes ended clusters in bounded batches."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ledger.exporting import cluster_export, cluster_import
from ledger.filters import MessageFilter
from ledger.selectors import message_search
from ledger.services import now_ms
from operations.policy import RetentionPolicy
from operations.retention import cluster_prune, clusters_prunable
from tests.operations.retention_data import (
    BASE,
    DAY_MS,
    cluster_filled,
    rows_referring_to,
    search_index_rows,
)

pytestmark = pytest.mark.django_db

NOW = BASE + 100 * DAY_MS


def test_only_ended_clusters_in_the_states_and_without_recent_activity_are_selected() -> None:
    cluster_filled("old1", messages=5, at=BASE)
    cluster_filled("oldfailed", messages=5, at=BASE, state="failed")
    cluster_filled("oldrunning", messages=5, at=BASE, state="running")
    cluster_filled("recent", messages=5, at=NOW - DAY_MS)
    # created long ago, but active yesterday
    cluster_filled("revived", messages=5, at=BASE)
    from ledger.models import Cluster

    Cluster.objects.filter(pk="revived").update(last_timestamp=NOW - DAY_MS)

    every_ended = RetentionPolicy.parse(older_than="30d")
    only_failed = RetentionPolicy.parse(older_than="30d", states="failed")

    assert clusters_prunable(policy=every_ended, now_ms=NOW) == ["old1", "oldfailed"]
    assert clusters_prunable(policy=only_failed, now_ms=NOW) == ["oldfailed"]


def test_pruning_leaves_no_row_that_names_the_cluster_and_the_export_reimports(
    tmp_path: Path,
) -> None:
    # given two clusters; one is pruned, in batches smaller than its tables
    cluster_filled("old1", messages=2500, builds=5)
    cluster_filled("keep1", messages=30, state="running")
    before = "".join(cluster_export(cluster_id="old1", format="json"))
    assert all(rows_referring_to("old1").values())
    assert search_index_rows("old1") == 2500
    # when
    pruned = cluster_prune(cluster_id="old1", export_dir=tmp_path, batch=400)
    # then nothing names it anymore, in any table or in the search index
    assert (pruned.messages, pruned.builds, pruned.tasks) == (2500, 5, 5)
    assert set(rows_referring_to("old1").values()) == {0}
    assert search_index_rows("old1") == 0
    # and the other cluster is whole
    assert rows_referring_to("keep1")["ledger_message"] == 30
    assert search_index_rows("keep1") == 30
    hits, _ = message_search(cluster_id="keep1", where=MessageFilter(q="zebrafish"), limit=50)
    assert len(hits) == 30
    # and the export is the cluster's, and reads back into the same cluster
    assert pruned.export == tmp_path / f"old1-{BASE}.json"
    assert pruned.export.read_text(encoding="utf-8") == before
    cluster_import(path=pruned.export)
    assert "".join(cluster_export(cluster_id="old1", format="json")) == before


def test_an_export_already_written_by_an_interrupted_prune_is_kept(tmp_path: Path) -> None:
    cluster_filled("old1", messages=10)
    complete = tmp_path / f"old1-{BASE}.json"
    complete.write_text("the complete export of the first try", encoding="utf-8")
    cluster_prune(cluster_id="old1", export_dir=tmp_path)
    assert complete.read_text(encoding="utf-8") == "the complete export of the first try"
    assert not list(tmp_path.glob("*.partial"))


def test_the_command_prunes_what_the_options_select_and_says_so(tmp_path: Path) -> None:
    cluster_filled("old1", messages=12)
    cluster_filled("oldfailed", messages=3, state="failed")
    cluster_filled("recent", messages=3, at=now_ms() - DAY_MS)
    out = StringIO()

    call_command(
        "prune_clusters", "--older-than", "30d", "--state", "completed", "--dry-run", stdout=out
    )
    assert out.getvalue().split() == ["old1"]
    assert rows_referring_to("old1")["ledger_message"] == 12

    out = StringIO()
    call_command(
        "prune_clusters",
        "--older-than=30d",
        "--state=completed",
        f"--export={tmp_path}",
        "--batch=5",
        stdout=out,
    )
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("old1: 12 messages, 3 builds, 3 tasks, exported to ")
    assert lines[-1] == "pruned 1 cluster(s)"
    assert set(rows_referring_to("old1").values()) == {0}
    assert rows_referring_to("oldfailed")["ledger_message"] == 3
    exported = json.loads((tmp_path / f"old1-{BASE}.json").read_text(encoding="utf-8"))
    assert exported["cluster"]["id"] == "old1"
    assert len(exported["messages"]) == 12


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--older-than", "soon"], "such as 30d"),
        (["--older-than", "1d", "--state", "running"], "only ended clusters"),
        (["--older-than", "1d", "--batch", "0"], "at least 1"),
    ],
)
def test_the_command_refuses_options_it_cannot_read(options: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("prune_clusters", *options)
