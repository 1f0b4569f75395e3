from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection

from ledger.bus import bus
from ledger.models import Message
from ledger.services import MessageDraft, message_publish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timed]

THREADS = 8
PER_THREAD = 500


def test_concurrent_publishers_get_gapless_unique_sequences(cluster: str) -> None:
    delivered: list[int] = []
    lock = threading.Lock()

    def record(message) -> None:  # type: ignore[no-untyped-def]
        with lock:
            delivered.append(message.sequence)

    bus.subscribe(record)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def publisher(n: int) -> None:
        try:
            start.wait()
            for i in range(PER_THREAD):
                message_publish(
                    cluster_id=cluster,
                    draft=MessageDraft(
                        topic="WORKER_PROGRESS", sender=f"w{n}", content={"text": str(i)}
                    ),
                )
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    rows = list(
        Message.objects.filter(cluster_id=cluster)
        .order_by("sequence")
        .values_list("sequence", "timestamp")
    )
    assert len(rows) == THREADS * PER_THREAD
    assert [s for s, _ in rows] == list(range(1, THREADS * PER_THREAD + 1))
    timestamps = [t for _, t in rows]
    assert all(b > a for a, b in itertools.pairwise(timestamps))
    # Each thread's own messages keep their order, and delivery followed commit order.
    for n in range(THREADS):
        texts = list(
            Message.objects.filter(cluster_id=cluster, sender=f"w{n}")
            .order_by("sequence")
            .values_list("content", flat=True)
        )
        assert [c["text"] for c in texts] == [str(i) for i in range(PER_THREAD)]
    assert delivered == list(range(1, THREADS * PER_THREAD + 1))


def test_builds_publishing_their_metrics_keep_deliveries_in_commit_order(db: None) -> None:
    # given a cluster whose agent builds record a CONTEXT_METRICS message in the ledger
    from django.test import override_settings

    from context.services import context_build
    from ledger.services import cluster_create

    agent = {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
        "contextStrategy": {"sources": [{"topic": "GO", "amount": 2}]},
    }
    cluster = cluster_create(cluster_id="metrics-order", config={"agents": [agent]}).id
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="GO", sender="system"))
    delivered: list[int] = []
    lock = threading.Lock()

    def record(message) -> None:  # type: ignore[no-untyped-def]
        if message.cluster_id == cluster:
            with lock:
                delivered.append(message.sequence)

    bus.subscribe(record)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def publisher() -> None:
        try:
            start.wait()
            for i in range(60):
                message_publish(
                    cluster_id=cluster,
                    draft=MessageDraft(topic="GO", sender="system", content={"text": str(i)}),
                )
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def builder() -> None:
        try:
            start.wait()
            for _ in range(30):
                context_build(cluster_id=cluster, agent_id="worker")
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    # when publishers and recorded builds (which publish inside their own write) run together
    with override_settings(CONTEXT_METRICS_LEDGER=True):
        threads = [threading.Thread(target=t) for t in (publisher, publisher, builder, builder)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # then the bus saw every message once, in commit (sequence) order
    assert errors == []
    total = Message.objects.filter(cluster_id=cluster).count()
    assert total == 1 + 2 * 60 + 2 * 30
    assert delivered == list(range(2, total + 1))
