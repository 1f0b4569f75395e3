"""The post-commit pipeline: stages see every published message once, in sequence order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger.models import Cluster, Message
from ledger.pipeline import Batch, Pipeline, clusters_lagging, pipeline
from ledger.records import MessageRecord
from ledger.services import (
    ClusterWriter,
    ImportedMessage,
    MessageDraft,
    cluster_create,
    cluster_transaction,
    message_import_batch,
    message_publish,
    message_publish_batch,
    now_ms,
)

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Echo:
    """Appends one reply per PING it is offered."""

    pings: list[int]

    def apply(self, writer: ClusterWriter) -> None:
        # The pings of its own plan: with the pipeline's workers, two clusters plan at once.
        writer.append(
            [MessageDraft(topic="PONG", sender="echo") for _ in self.pings],
            now=now_ms(),
        )


@dataclass
class Recorder:
    """A stage that records what it is offered, and answers PING with PONG."""

    name: str = "recorder"
    seen: list[tuple[int, str]] = field(default_factory=list)
    pings: list[int] = field(default_factory=list)

    def plan(self, batch: Batch) -> Echo | None:
        self.seen.extend((m.sequence, m.topic) for m in batch.live)
        pings = [m.sequence for m in batch.live if m.topic == "PING"]
        self.pings = pings
        return Echo(pings) if pings else None


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    stage = Recorder()
    pipeline.register(stage, order=50)
    yield stage
    pipeline.unregister(stage)


def cursor(cluster_id: str) -> int:
    return Cluster.objects.get(pk=cluster_id).pipeline_sequence


def publish(cluster_id: str, topic: str) -> MessageRecord:
    return message_publish(cluster_id=cluster_id, draft=MessageDraft(topic=topic, sender="s"))


def imported(n: int, topic: str = "PING") -> ImportedMessage:
    return ImportedMessage(
        id=f"old-{n}",
        timestamp=1000 + n,
        topic=topic,
        sender="s",
        receiver="broadcast",
        content={},
        metadata=None,
    )


def test_stages_see_each_published_message_once_in_order(cluster: str, recorder: Recorder) -> None:
    # when messages are published one by one and in a batch
    publish(cluster, "A")
    message_publish_batch(
        cluster_id=cluster, drafts=[MessageDraft(topic=t, sender="s") for t in ("B", "C")]
    )
    # then the stage saw each once, in sequence order, and the cursor is at the end
    assert recorder.seen == [(1, "A"), (2, "B"), (3, "C")]
    assert cursor(cluster) == 3


def test_what_a_stage_writes_is_offered_in_its_turn(cluster: str, recorder: Recorder) -> None:
    # when a PING is published
    publish(cluster, "PING")
    # then the stage's PONG was appended after it, and offered to the stages too
    assert recorder.seen == [(1, "PING"), (2, "PONG")]
    assert cursor(cluster) == 2


def test_imported_messages_move_the_cursor_but_are_never_offered(
    cluster: str, recorder: Recorder
) -> None:
    # when history is imported, then a message is published
    message_import_batch(cluster_id=cluster, messages=[imported(1), imported(2)])
    assert cursor(cluster) == 2  # caught up: the import moved it along
    publish(cluster, "A")
    # then only the published message was offered
    assert recorder.seen == [(3, "A")]
    assert cursor(cluster) == 3


def test_a_lagging_cursor_is_caught_up_by_the_next_run(cluster: str, recorder: Recorder) -> None:
    # given commits that no run saw (a server died right after them)
    with override_settings(PIPELINE_MODE="off"):
        publish(cluster, "PING")
        publish(cluster, "B")
    assert cursor(cluster) == 0
    assert cluster in clusters_lagging()
    # when the pipeline runs
    moved = pipeline.run(cluster)
    # then every message was offered once, the reply was written once, and nothing lags
    assert moved == 3
    assert recorder.seen == [(1, "PING"), (2, "B"), (3, "PONG")]
    assert clusters_lagging() == []
    assert pipeline.run(cluster) == 0


def test_a_turn_says_whether_the_cluster_holds_more_than_it_took(
    cluster: str, recorder: Recorder
) -> None:
    # given three messages that no run saw, a PING among them
    with override_settings(PIPELINE_MODE="off"):
        for topic in ("A", "B", "PING"):
            publish(cluster, topic)
        # when turns of at most two messages are taken
        cut = pipeline.turn(cluster, limit=2)
        answered = pipeline.turn(cluster, limit=2)
        last = pipeline.turn(cluster, limit=2)
    # then a batch cut short has more, so has one whose stage appended a message (the PONG),
    # and the one that reached the newest message has none
    assert cut is not None
    assert (cut.moved, cut.more) == (2, True)
    assert answered is not None
    assert (answered.moved, answered.more) == (1, True)
    assert last is not None
    assert (last.moved, last.more) == (1, False)
    assert cursor(cluster) == 4


def test_a_run_that_reaches_the_newest_message_reads_the_cluster_once(
    cluster: str, recorder: Recorder
) -> None:
    # given two messages that no run saw
    with override_settings(PIPELINE_MODE="off"):
        publish(cluster, "A")
        publish(cluster, "B")
    # when the pipeline runs
    with CaptureQueriesContext(connection) as ran:
        moved = pipeline.run(cluster)
    # then it took both and did not read the cluster again to find nothing
    assert moved == 2
    reads = [q["sql"] for q in ran.captured_queries if q["sql"].startswith("SELECT")]
    assert len([sql for sql in reads if 'FROM "ledger_cluster"' in sql]) == 1, reads


@pytest.mark.parametrize(("attempts", "savepoints"), [(5, 0), (1, 1)])
def test_a_stages_writes_take_a_savepoint_only_on_the_final_attempt(
    cluster: str, recorder: Recorder, attempts: int, savepoints: int
) -> None:
    # given a PING that no run saw, whose stage writes a PONG
    with override_settings(PIPELINE_MODE="off"):
        publish(cluster, "PING")
    # when the pipeline runs it with attempts left after this one, or with none
    with override_settings(PIPELINE_ATTEMPTS=attempts), CaptureQueriesContext(connection) as ran:
        pipeline.run(cluster)
    # then the PONG was written either way, in a savepoint only when it was the last attempt
    assert recorder.seen == [(1, "PING"), (2, "PONG")]
    taken = [q["sql"] for q in ran.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(taken) == savepoints


def test_a_run_that_raced_another_writes_nothing(cluster: str) -> None:
    # given a stage that answers PING, and another run that moves the cursor meanwhile
    racer = Pipeline()

    class Racing(Recorder):
        def plan(self, batch: Batch) -> Echo | None:
            planned = super().plan(batch)
            with cluster_transaction(cluster) as writer:
                writer.pipeline_advance(batch.upto)
            return planned

    racer.register(Racing(), order=1)
    with override_settings(PIPELINE_MODE="off"):
        publish(cluster, "PING")
    # when the racing run tries to commit
    moved = racer.run(cluster)
    # then it wrote nothing: no PONG, the cursor where the other run left it
    assert moved == 0
    assert Cluster.objects.get(pk=cluster).last_sequence == 1
    assert cursor(cluster) == 1


class FailingWrites:
    """Writes that fail while ``failures`` lasts, on the messages of one topic."""

    def __init__(self, stage: FailingStage) -> None:
        self.stage = stage

    def apply(self, writer: ClusterWriter) -> None:
        writer.append([MessageDraft(topic="X", sender="s")], now=now_ms())
        if self.stage.failures > 0:
            self.stage.failures -= 1
            raise RuntimeError("broken writes \x00 \ud83d")


@dataclass
class FailingStage:
    """Answers each BAD with an X; its writes (or its planning) fail ``failures`` times."""

    failures: int
    on: str = "apply"
    name: str = "broken"
    offered: list[int] = field(default_factory=list)

    def plan(self, batch: Batch) -> FailingWrites | None:
        self.offered.extend(m.sequence for m in batch.live)
        if not any(m.topic == "BAD" for m in batch.live):
            return None
        if self.on == "plan" and self.failures > 0:
            self.failures -= 1
            raise RuntimeError("broken planning")
        return FailingWrites(self)


@pytest.fixture
def failing() -> Iterator[FailingStage]:
    stage = FailingStage(failures=0)
    pipeline.register(stage, order=60)
    yield stage
    pipeline.unregister(stage)


def ledger_topics(cluster_id: str) -> list[str]:
    return list(
        Message.objects.filter(cluster_id=cluster_id)
        .order_by("sequence")
        .values_list("topic", flat=True)
    )


@pytest.mark.parametrize("on", ["apply", "plan"])
def test_a_stage_that_fails_for_a_while_is_retried_and_nothing_is_lost(
    cluster: str, recorder: Recorder, failing: FailingStage, on: str
) -> None:
    # given a stage that fails twice on a message, then works
    failing.failures, failing.on = 2, on
    # when the message is published (with PIPELINE_ATTEMPTS = 5)
    with override_settings(PIPELINE_ATTEMPTS=5):
        publish(cluster, "BAD")
    # then its writes are in, the other stage's once, and no error was reported
    assert ledger_topics(cluster) == ["BAD", "X"]
    assert failing.failures == 0
    assert cursor(cluster) == 2


@pytest.mark.parametrize("on", ["apply", "plan"])
def test_a_stage_that_keeps_failing_is_reported_after_its_attempts_and_the_cursor_moves(
    cluster: str,
    recorder: Recorder,
    failing: FailingStage,
    on: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a stage that always fails on BAD, and a PING before it in the same batch
    failing.failures, failing.on = 1_000, on
    with override_settings(PIPELINE_MODE="off"):
        ping = publish(cluster, "PING")
        bad = publish(cluster, "BAD")
        after = publish(cluster, "PING")
    # when the pipeline runs
    with override_settings(PIPELINE_ATTEMPTS=3):
        pipeline.run(cluster)
    # then the messages before it were not held back, and after three attempts on BAD alone a
    # PIPELINE_ERROR names it and the stage, and the cluster went on
    # (once with the whole batch, then three times on BAD alone: its third is the last)
    assert failing.failures == 1_000 - 4
    topics = ledger_topics(cluster)
    assert topics[:3] == ["PING", "BAD", "PING"]
    assert sorted(topics[3:]) == ["PIPELINE_ERROR", "PONG", "PONG"]
    [error] = Message.objects.filter(cluster_id=cluster, topic="PIPELINE_ERROR")
    data = error.content["data"]
    assert data["messageId"] == bad.id
    assert data["sequence"] == bad.sequence == 2
    assert data["attempts"] == 3
    assert [f["stage"] for f in data["failures"]] == ["broken"]
    assert data["failures"][0]["phase"] == on
    # the error's text is storable whatever the exception said
    assert "\x00" not in error.content["text"]
    assert "broken" in error.content["text"]
    assert error.sender == "system"
    assert ping.sequence == 1
    assert after.sequence == 3
    assert cursor(cluster) == Cluster.objects.get(pk=cluster).last_sequence


def test_a_failure_on_the_pipelines_own_error_report_is_not_reported_again(
    cluster: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given a stage that fails on everything
    class Always:
        name = "always"

        def plan(self, batch: Batch) -> None:
            raise RuntimeError("always")

    stage = Always()
    pipeline.register(stage, order=70)
    try:
        with override_settings(PIPELINE_ATTEMPTS=2):
            publish(cluster, "A")
    finally:
        pipeline.unregister(stage)
    # then A is reported once, the report itself is not, and nothing lags
    assert ledger_topics(cluster) == ["A", "PIPELINE_ERROR"]
    assert cursor(cluster) == 2
    assert "own error report" in caplog.text


def test_the_worker_thread_runs_woken_and_lagging_clusters(recorder: Recorder) -> None:
    # given the pipeline in a worker thread, and a cluster whose commit no run saw
    lagging = cluster_create(cluster_id="lagging").id
    with override_settings(PIPELINE_MODE="off"):
        publish(lagging, "PING")
    woken = cluster_create(cluster_id="woken").id
    with override_settings(PIPELINE_MODE="thread", PIPELINE_SWEEP_SECONDS=0.2):
        try:
            # when another cluster publishes
            publisher = threading.Thread(
                target=lambda: (publish(woken, "PING"), connection.close())
            )
            publisher.start()
            publisher.join()
            # then the worker answers both: the woken one, and the lagging one by its sweep
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (cursor(lagging) < 2 or cursor(woken) < 2):
                time.sleep(0.05)
        finally:
            pipeline.stop()
    assert cursor(lagging) == 2
    assert cursor(woken) == 2
    assert sorted(t for _, t in recorder.seen) == ["PING", "PING", "PONG", "PONG"]
