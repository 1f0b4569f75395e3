from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection

from ledger.bus import bus
from ledger.models import Message
from ledger.services import MessageDraft, message_publish

pytestmark = pytest.mark.django_db(transaction=True)

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
