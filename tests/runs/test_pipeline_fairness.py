"""Clusters progress independently (issue 17, item 5): one cluster's slow scripts never hold
another cluster's triggers back, with the pipeline in its thread mode, as servers run it."""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest
from django.test import override_settings

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.models import Cluster
from ledger.pipeline import pipeline
from runs.models import Task

pytestmark = pytest.mark.django_db(transaction=True)

LOOP = {"engine": "javascript", "script": "while (true) {}"}


def agent(agent_id: str, topic: str, **extra: Any) -> dict[str, Any]:
    trigger = {"topic": topic, **extra}
    return {"id": agent_id, "role": "implementation", "prompt": "Work.", "triggers": [trigger]}


def test_a_cluster_whose_scripts_loop_never_holds_back_another_clusters_triggers() -> None:
    # given a cluster of three agents on "*" whose logic loops until its 1 s limit, and a
    # quiet cluster whose worker is triggered by GO
    busy = cluster_create(
        cluster_id="busy",
        config={"agents": [agent(f"looper-{n}", "*", logic=LOOP) for n in range(3)]},
        state="running",
    ).id
    quiet = cluster_create(
        cluster_id="quiet", config={"agents": [agent("worker", "GO")]}, state="running"
    ).id
    latencies: list[float] = []
    with override_settings(PIPELINE_MODE="thread", PIPELINE_WORKERS=4):
        try:
            # when the busy cluster gets messages (about 6 s of scripts), then the quiet one
            # gets its triggers one by one
            for n in range(2):
                message_publish(cluster_id=busy, draft=MessageDraft(topic=f"M{n}", sender="s"))
            time.sleep(0.2)  # the busy cluster's scripts are running
            for n in range(41):
                started = time.monotonic()
                message = message_publish(
                    cluster_id=quiet, draft=MessageDraft(topic="GO", sender="s")
                )
                while not Task.objects.filter(
                    cluster_id=quiet, trigger_message_id=message.id
                ).exists():
                    assert time.monotonic() - started < 10, "the quiet cluster's task never came"
                    time.sleep(0.002)
                if n:  # the first one opens the workers' connections
                    latencies.append(time.monotonic() - started)
            busy_row = Cluster.objects.get(pk=busy)
        finally:
            pipeline.stop(timeout=15)
    # then each trigger became a claimable task at once, while the busy cluster was still busy
    p95 = statistics.quantiles(latencies, n=20)[-1]
    assert busy_row.pipeline_sequence < busy_row.last_sequence
    assert p95 < 0.1, f"trigger to claimable: p95 {p95 * 1000:.0f} ms ({latencies})"
    assert Task.objects.filter(cluster_id=quiet, state="queued").count() == 41
