"""The pipeline passes over messages that no stage reacts to by their topics alone."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger.models import Cluster
from ledger.pipeline import Batch, Pipeline, pipeline
from ledger.records import ClusterRecord
from ledger.services import (
    ImportedMessage,
    MessageDraft,
    cluster_create,
    message_import_batch,
    message_publish_batch,
)
from runs.dispatch import Dispatcher
from snapshots.snapshotter import StateSnapshotter
from snapshots.state import SNAPSHOT_TOPIC, SNAPSHOT_TRIGGER_TOPICS

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Picky:
    """A selective stage that plans nothing and reacts to PING only (``reacts`` None: any)."""

    name: str = "picky"
    reacts: frozenset[str] | None = frozenset({"PING"})
    offered: list[int] = field(default_factory=list)

    def reacts_to(self, cluster: ClusterRecord) -> frozenset[str] | None:
        return self.reacts

    def plan(self, batch: Batch) -> None:
        self.offered.extend(m.sequence for m in batch.live)


@dataclass
class Plain:
    """A stage that does not say what it reacts to: it is offered every batch."""

    name: str = "plain"
    offered: list[int] = field(default_factory=list)

    def plan(self, batch: Batch) -> None:
        self.offered.extend(m.sequence for m in batch.live)


def publish(cluster_id: str, topics: list[str]) -> None:
    with override_settings(PIPELINE_MODE="off"):
        message_publish_batch(
            cluster_id=cluster_id, drafts=[MessageDraft(topic=t, sender="s") for t in topics]
        )


def cursor(cluster_id: str) -> int:
    return Cluster.objects.get(pk=cluster_id).pipeline_sequence


def test_messages_no_stage_reacts_to_are_passed_over_in_one_turn_by_their_topics(
    cluster: str,
) -> None:
    # given 120 messages that the one stage does not react to
    runner, stage = Pipeline(), Picky()
    runner.register(stage, order=1)
    publish(cluster, ["A"] * 120)
    # when one turn of at most 50 messages is taken
    with CaptureQueriesContext(connection) as captured:
        turn = runner.turn(cluster, limit=50)
    # then it moved the cursor over all of them without offering any: the cluster read, the
    # messages' topics read (not their content), one conditional UPDATE
    assert turn is not None
    assert (turn.moved, turn.more) == (120, False)
    assert stage.offered == []
    assert cursor(cluster) == 120
    sqls = [q["sql"] for q in captured.captured_queries]
    assert [sql.split()[0] for sql in sqls] == ["SELECT", "SELECT", "UPDATE"]
    assert '"topic"' in sqls[1]
    assert '"content"' not in sqls[1]


def test_a_message_a_stage_reacts_to_makes_the_turn_read_and_offer_its_batch(
    cluster: str,
) -> None:
    # given 120 messages with one PING among them
    runner, stage = Pipeline(), Picky()
    runner.register(stage, order=1)
    publish(cluster, ["A"] * 70 + ["PING"] + ["A"] * 49)
    # when the pipeline runs in turns of at most 50
    first = runner.turn(cluster, limit=50)
    runner.run(cluster)
    # then every message was offered, in turns of 50, as without the pass-over
    assert first is not None
    assert (first.moved, first.more) == (50, True)
    assert stage.offered == list(range(1, 121))
    assert cursor(cluster) == 120


def test_imported_messages_of_a_reacting_topic_are_passed_over(cluster: str) -> None:
    # given a published message, then imported PINGs behind it, none of them run yet
    runner, stage = Pipeline(), Picky()
    runner.register(stage, order=1)
    publish(cluster, ["A"])
    old = [
        ImportedMessage(
            id=f"old-{n}",
            timestamp=1000 + n,
            topic="PING",
            sender="s",
            receiver="broadcast",
            content={},
            metadata=None,
        )
        for n in range(3)
    ]
    message_import_batch(cluster_id=cluster, messages=old)
    # when the pipeline runs
    moved = runner.run(cluster)
    # then it passed over all four: imported messages are never offered (SPEC §7.1)
    assert moved == 4
    assert stage.offered == []
    assert cursor(cluster) == 4


@pytest.mark.parametrize("others", [[Picky(name="any", reacts=None)], [Plain()]])
def test_a_stage_that_may_react_to_anything_is_offered_every_batch(
    cluster: str, others: list[Picky | Plain]
) -> None:
    # given a picky stage beside one that reacts to any message (or does not say)
    runner, stage = Pipeline(), Picky()
    runner.register(stage, order=1)
    for n, other in enumerate(others, start=2):
        other.offered.clear()
        runner.register(other, order=n)
    publish(cluster, ["A"] * 3)
    # when the pipeline runs
    moved = runner.run(cluster)
    # then both were offered the messages
    assert moved == 3
    assert stage.offered == [1, 2, 3]
    assert [o.offered for o in others] == [[1, 2, 3]]


def test_the_stages_react_to_their_own_topics() -> None:
    # given a cluster without agents and one with an agent
    bare = cluster_create(cluster_id="bare")
    agents = cluster_create(
        cluster_id="agents",
        config={"agents": [{"id": "w", "role": "worker", "prompt": "x", "triggers": []}]},
    )
    # then triggers react to nothing in the first and to any message in the second; the
    # snapshot to its trigger topics in both
    assert Dispatcher().reacts_to(bare) == frozenset()
    assert Dispatcher().reacts_to(agents) is None
    assert StateSnapshotter().reacts_to(bare) == frozenset(SNAPSHOT_TRIGGER_TOPICS)


def test_a_batch_of_a_cluster_without_agents_is_passed_over_and_its_snapshot_still_made(
    cluster: str,
) -> None:
    # given the server's stages, and a cluster without agents
    assert {s.name for s in pipeline.stages} >= {"snapshot", "triggers"}
    publish(cluster, ["AGENT_OUTPUT"] * 100)
    # when the pipeline runs over a batch of messages none of its stages reacts to
    with CaptureQueriesContext(connection) as captured:
        moved = pipeline.run(cluster)
    # then no message was read whole
    assert moved == 100
    assert not [q for q in captured.captured_queries if '"content"' in q["sql"]]
    # and a trigger topic after them is still folded into a snapshot
    with override_settings(PIPELINE_MODE="inline"):
        message_publish_batch(
            cluster_id=cluster,
            drafts=[MessageDraft(topic="PLAN_READY", sender="planner", content={"text": "Plan"})],
        )
    topics = list(
        Cluster.objects.get(pk=cluster)
        .messages.order_by("sequence")
        .values_list("topic", flat=True)
    )
    assert topics[100:] == ["PLAN_READY", SNAPSHOT_TOPIC]
    assert cursor(cluster) == 102
