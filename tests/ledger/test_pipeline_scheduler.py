"""The pipeline's thread mode: fair turns across clusters, retries off the queue, and reads
that wait for the pipeline (read-your-writes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from django.db import connection
from django.test import override_settings
from pytest_django import DjangoAssertNumQueries

from ledger.models import Cluster, Message
from ledger.pipeline import GATHER_SECONDS, Batch, pipeline
from ledger.services import ClusterWriter, MessageDraft, cluster_create, message_publish, now_ms

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timed]


@dataclass
class Turns:
    """Records each batch it is offered: (cluster, how many messages), and when (monotonic)."""

    name: str = "turns"
    batches: list[tuple[str, int]] = field(default_factory=list)
    planned_at: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set when a turn reaches this stage; turns wait at the gate until it is set (open unless
    # a test closes it).
    entered: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.gate.set()

    def plan(self, batch: Batch) -> None:
        with self.lock:
            self.planned_at.append(time.monotonic())
        self.entered.set()
        assert self.gate.wait(timeout=10)
        with self.lock:
            self.batches.append((batch.cluster.id, len(batch.messages)))


@pytest.fixture
def turns() -> Iterator[Turns]:
    stage = Turns()
    pipeline.register(stage, order=50)
    yield stage
    pipeline.unregister(stage)


def cursor(cluster_id: str) -> int:
    return Cluster.objects.get(pk=cluster_id).pipeline_sequence


def publish(cluster_id: str, topic: str = "T") -> None:
    message_publish(cluster_id=cluster_id, draft=MessageDraft(topic=topic, sender="s"))


def wait_until(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_clusters_take_turns_of_a_bounded_batch(turns: Turns) -> None:
    # given two clusters with 30 messages each that no run has seen
    with override_settings(PIPELINE_MODE="off"):
        for cid in ("a", "b"):
            cluster_create(cluster_id=cid)
            for _ in range(30):
                publish(cid)
    # when one worker with turns of 10 messages runs them, "b" woken only once the first turn
    # of "a" is under way, and its gathering over before that turn ends
    turns.gate.clear()
    with override_settings(
        PIPELINE_MODE="thread",
        PIPELINE_WORKERS=1,
        PIPELINE_TURN_MESSAGES=10,
        PIPELINE_SWEEP_SECONDS=60,
    ):
        try:
            pipeline.wake("a")
            assert turns.entered.wait(timeout=10)
            pipeline.wake("b")
            time.sleep(GATHER_SECONDS * 5)
            turns.gate.set()
            wait_until(lambda: cursor("a") == cursor("b") == 30)
        finally:
            pipeline.stop()
    # then the clusters alternated, 10 messages a turn, until both were caught up: "a" went
    # back to the end of the queue, behind "b"
    assert [size for _, size in turns.batches] == [10] * 6
    order = [cid for cid, _ in turns.batches]
    assert order in (["a", "b"] * 3, ["b", "a"] * 3)


def test_a_failing_stage_in_a_server_is_retried_then_reported(turns: Turns) -> None:
    # given a stage whose writes fail on BAD three times, in a server's thread mode
    @dataclass
    class Failing:
        left: int = 3
        name: str = "failing"

        def plan(self, batch: Batch) -> Failing | None:
            return self if any(m.topic == "BAD" for m in batch.live) else None

        def apply(self, writer: ClusterWriter) -> None:
            writer.append([MessageDraft(topic="DONE", sender="s")], now=now_ms())
            self.left -= 1
            raise RuntimeError("not now")

    failing = Failing()
    pipeline.register(failing, order=60)
    cid = cluster_create(cluster_id="c").id
    try:
        with override_settings(
            PIPELINE_MODE="thread", PIPELINE_ATTEMPTS=3, PIPELINE_RETRY_SECONDS=0.05
        ):
            try:
                publish(cid, "BAD")
                # (wakes during the backoff change nothing)
                for _ in range(5):
                    pipeline.wake(cid)
                wait_until(lambda: cursor(cid) == 2)
            finally:
                pipeline.stop()
    finally:
        pipeline.unregister(failing)
    # then after three attempts the error was published, with the cursor past both
    assert failing.left == 0
    topics = list(Message.objects.filter(cluster_id=cid).values_list("topic", flat=True))
    assert sorted(topics) == ["BAD", "PIPELINE_ERROR"]


def test_a_read_waits_for_the_pipeline_to_pass_what_was_published(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    # given a stage that takes its time, in a server's thread mode
    @dataclass
    class Slow:
        name: str = "slow"

        def plan(self, batch: Batch) -> None:
            time.sleep(0.3)

    slow = Slow()
    pipeline.register(slow, order=60)
    cid = cluster_create(cluster_id="c").id
    try:
        with override_settings(PIPELINE_MODE="thread"):
            try:
                publish(cid)
                # when a read asks for the pipeline right after the publish returned
                assert cursor(cid) == 0
                started = time.monotonic()
                assert pipeline.caught_up(cid) is True
                waited = time.monotonic() - started
                # then it waited for it (and no longer), and a caught-up read is one query
                assert cursor(cid) == 1
                assert waited < 3
                with django_assert_num_queries(1):
                    assert pipeline.caught_up(cid) is True
            finally:
                pipeline.stop()
    finally:
        pipeline.unregister(slow)


def test_a_read_waits_at_most_its_bound() -> None:
    # given a commit that no pipeline in this process will run
    cid = cluster_create(cluster_id="c").id
    with override_settings(PIPELINE_MODE="off"):
        publish(cid)
        started = time.monotonic()
        # when a read waits for it, with a bound of 0.2 s
        caught_up = pipeline.caught_up(cid, timeout=0.2)
    # then it goes ahead after the bound, saying so
    assert caught_up is False
    assert 0.2 <= time.monotonic() - started < 2


def test_the_commits_of_one_moment_share_one_turn(
    turns: Turns, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a server's pipeline that gathers a woken cluster's commits for a second
    import ledger.pipeline

    monkeypatch.setattr(ledger.pipeline, "GATHER_SECONDS", 1.0)
    cluster_create(cluster_id="a")
    with override_settings(PIPELINE_MODE="thread", PIPELINE_SWEEP_SECONDS=60):
        try:
            # when three messages are published one after the other, each waking the cluster
            for _ in range(3):
                publish("a")
            wait_until(lambda: cursor("a") == 3)
        finally:
            pipeline.stop()
    # then one turn offered all three: one read and one cursor move, not one per commit
    assert turns.batches == [("a", 3)]


@pytest.fixture
def timed_turns(monkeypatch: pytest.MonkeyPatch) -> Iterator[Turns]:
    """A recording stage, in a server's pipeline whose stream spacing is a long 1.5 s."""
    import ledger.pipeline

    monkeypatch.setattr(ledger.pipeline, "STREAM_GATHER_SECONDS", 1.5)
    stage = Turns()
    pipeline.register(stage, order=50)
    with override_settings(PIPELINE_MODE="thread", PIPELINE_SWEEP_SECONDS=60):
        try:
            yield stage
        finally:
            pipeline.stop()
            pipeline.unregister(stage)


def test_a_stream_of_commits_gets_one_turn_per_moment(timed_turns: Turns) -> None:
    # given a cluster whose first message has had its turn
    cluster_create(cluster_id="a")
    publish("a")
    wait_until(lambda: cursor("a") == 1)
    # when three more come 20 ms apart, each far past a woken cluster's gathering of 2 ms
    for _ in range(3):
        time.sleep(0.02)
        publish("a")
    wait_until(lambda: cursor("a") == 4)
    # then they shared one turn, which started the stream's spacing after the first one's
    # (each seen at its plan, a read or two after its start)
    assert timed_turns.batches == [("a", 1), ("a", 3)]
    first, second = timed_turns.planned_at
    assert second - first >= 1.4
    # and a cluster woken after a quiet moment longer than the spacing is not held back
    time.sleep(0.2)
    timed_turns.planned_at.clear()
    cluster_create(cluster_id="b")
    published = time.monotonic()
    publish("b")
    wait_until(lambda: cursor("b") == 1)
    assert timed_turns.planned_at[0] - published < 1.0


def test_a_backlog_is_not_spaced_like_a_stream(timed_turns: Turns) -> None:
    # given 30 messages that no run has seen
    with override_settings(PIPELINE_MODE="off"):
        cluster_create(cluster_id="a")
        for _ in range(30):
            publish("a")
    # when the pipeline runs them in turns of 10
    started = time.monotonic()
    with override_settings(PIPELINE_TURN_MESSAGES=10):
        pipeline.wake("a")
        wait_until(lambda: cursor("a") == 30)
    # then each turn with more to do followed the last at once, not 1.5 s later
    assert [size for _, size in timed_turns.batches] == [10, 10, 10]
    assert time.monotonic() - started < 1.5


def test_a_reader_is_not_held_back_by_a_streams_spacing(timed_turns: Turns) -> None:
    # given a cluster that has just had a turn, and a message published since
    cluster_create(cluster_id="a")
    publish("a")
    wait_until(lambda: cursor("a") == 1)
    publish("a")
    # when a read waits for the pipeline
    started = time.monotonic()
    assert pipeline.caught_up("a") is True
    # then the turn came after a woken cluster's gathering, not the stream's spacing
    assert time.monotonic() - started < 1.0
    assert cursor("a") == 2


def test_a_reader_is_not_held_back_when_the_cluster_is_on_a_worker(
    timed_turns: Turns,
) -> None:
    # given a cluster whose turn is under way, and a message published during it
    cluster_create(cluster_id="a")
    timed_turns.gate.clear()
    publish("a")
    assert timed_turns.entered.wait(timeout=10)
    publish("a")
    # when a read waits for the pipeline while that turn is still running
    read: list[bool] = []
    reader = threading.Thread(target=lambda: read.append(pipeline.caught_up("a")))
    reader.start()
    time.sleep(0.1)
    started = time.monotonic()
    timed_turns.gate.set()
    reader.join(timeout=10)
    # then the next turn came at once after it, not the stream's spacing after its start
    assert read == [True]
    assert time.monotonic() - started < 1.0
    assert [size for _, size in timed_turns.batches] == [1, 1]


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_a_servers_scheduler_brings_the_search_index_up_to_the_commits() -> None:
    """SQLite's index follows the commits in the background (docs/decisions/0313): the words
    of published messages reach it with no search asking, the commits of a moment together."""
    from ledger.search import FTS_TABLE

    def index_rows() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH 'kestrel'")
            return int(cursor.fetchone()[0])

    cid = cluster_create(cluster_id="c").id
    with override_settings(PIPELINE_MODE="thread", PIPELINE_SWEEP_SECONDS=60):
        try:
            for n in range(20):
                message_publish(
                    cluster_id=cid,
                    draft=MessageDraft(topic="T", sender="s", content={"text": f"kestrel {n}"}),
                )
            wait_until(lambda: index_rows() == 20)
        finally:
            pipeline.stop()
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_a_servers_scheduler_checkpoints_the_wal_off_the_committing_thread() -> None:
    """A commit checkpoints itself only past 10,000 pages; a server's upkeep copies the WAL
    into the database file shortly after commits (docs/decisions/0314)."""
    import sqlite3

    from django.conf import settings

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        assert cursor.fetchone()[0] == 10_000
    path = settings.DATABASES["default"]["TEST"]["NAME"]

    def in_the_file() -> int:
        # The database file alone, without its WAL: what checkpoints have copied there.
        reader = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            (count,) = reader.execute(
                "SELECT count(*) FROM ledger_message WHERE cluster_id = 'c'"
            ).fetchone()
            return int(count)
        finally:
            reader.close()

    cid = cluster_create(cluster_id="c").id
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the tables, into the file
    with override_settings(PIPELINE_MODE="off"):
        for _ in range(5):
            publish(cid)
    assert in_the_file() == 0  # committed to the WAL only
    with override_settings(PIPELINE_MODE="thread", PIPELINE_SWEEP_SECONDS=60):
        try:
            publish(cid)
            wait_until(lambda: in_the_file() == 6)
        finally:
            pipeline.stop()


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_publishes_and_the_index_catch_up_take_turns_to_write_in_one_process() -> None:
    """On SQLite this process's publishes and the index's catch-up wait for each other on one
    lock, not on the database's (where a waiter sleeps a millisecond or more)."""
    from django.db import close_old_connections

    from ledger.search import search_index_catch_up
    from ledger.write_turn import sqlite_write_turn

    cid = cluster_create(cluster_id="c").id
    done: list[str] = []

    def publisher() -> None:
        try:
            publish(cid)
            done.append("published")
            done.append(f"indexed {search_index_catch_up()}")
        finally:
            close_old_connections()

    with override_settings(PIPELINE_MODE="off"):
        with sqlite_write_turn(connection):
            thread = threading.Thread(target=publisher)
            thread.start()
            thread.join(0.3)
            # The publish waits for the turn, before its transaction begins.
            assert done == []
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM ledger_message")
                assert cursor.fetchone()[0] == 0
        thread.join(10)
    assert done == ["published", "indexed 1"]


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_djangos_transactions_on_sqlite_take_the_turn_from_begin_to_their_end() -> None:
    from django.db import close_old_connections, transaction

    from ledger.write_turn import sqlite_write_turn

    assert connection.settings_dict["ENGINE"] == "ledger.sqlite_backend"
    cid = cluster_create(cluster_id="c").id
    steps: list[str] = []

    def writer(fail: bool) -> None:
        try:
            with transaction.atomic():
                steps.append("began")
                Cluster.objects.filter(pk=cid).update(labels={"k": "v"})
                if fail:
                    raise RuntimeError("rolled back")
        except RuntimeError:
            steps.append("rolled back")
        finally:
            close_old_connections()

    for fail in (False, True):
        steps.clear()
        with sqlite_write_turn(connection):
            thread = threading.Thread(target=writer, args=(fail,))
            thread.start()
            thread.join(0.3)
            assert steps == []  # waits for the turn before its BEGIN
        thread.join(10)
        assert steps == (["began", "rolled back"] if fail else ["began"])
        # and gave it back
        assert turn_is_free()


def turn_is_free() -> bool:
    """Whether another thread could take the write turn now."""
    from ledger import write_turn

    free: list[bool] = []

    def look() -> None:
        free.append(write_turn._turn.acquire(blocking=False))
        if free[0]:
            write_turn._turn.release()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(10)
    return free == [True]
