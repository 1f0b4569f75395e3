"""Fifty concurrent completes whose transforms each hold ~180 MB keep the sandbox pool at its
bound and the server and its sandbox processes under the bound the threat model documents
(issue 17, item 6; docs/threat-model.md)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from ledger.interfaces import MessageDraft, message_publish
from ledger.models import Message
from runs.logic.engine import MEMORY_LIMIT_BYTES, POOL_SIZE_DEFAULT
from runs.models import Task
from runs.services import task_claim, task_complete
from tests.runs.test_tasks import agent, running

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timed]

COMPLETES = 50
# 180 MiB written, so resident, held by the transform until it returns.
HEAVY = """
const held = new Uint8Array(180 * 1024 * 1024).fill(1);
return { topic: 'HEAVY_DONE', content: { data: { n: held.length } } };
"""
# What a sandbox process may hold beyond its QuickJS heap: the interpreter and its modules.
SANDBOX_OVERHEAD_BYTES = 64 << 20


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def sandboxes() -> list[int]:
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                if "sandbox_worker" in Path(f"/proc/{pid}/cmdline").read_text():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def test_fifty_heavy_transforms_keep_the_pool_and_the_memory_bounded() -> None:
    # given 50 agents, each with a claimed task whose onComplete transform holds ~180 MB
    hook = {"onComplete": {"action": "publish_message", "transform": {"script": HEAVY}}}
    cid = running(*(agent(f"worker{n}", hooks=hook, maxRetries=0) for n in range(COMPLETES)))
    message_publish(
        cluster_id=cid, draft=MessageDraft(topic="GO", sender="system", content={"text": "go"})
    )
    claimed = [task_claim(worker="w", lease_seconds=600) for _ in range(COMPLETES)]
    assert all(c is not None for c in claimed)
    baseline = rss(os.getpid())
    errors: list[BaseException] = []
    most_sandboxes = 0
    most_rss = 0

    def complete(task_id: str, lease_id: str) -> None:
        try:
            task_complete(task_id=task_id, lease_id=lease_id, result={"ok": True})
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    # when all 50 complete at once
    threads = [
        threading.Thread(target=complete, args=(c.task.id, c.task.lease_id))
        for c in claimed
        if c is not None
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        pids = sandboxes()
        most_sandboxes = max(most_sandboxes, len(pids))
        most_rss = max(most_rss, rss(os.getpid()) + sum(rss(pid) for pid in pids))
        time.sleep(0.02)
    seconds = time.monotonic() - started

    # then every transform ran, never more sandbox processes than the pool allows, and the
    # server with its sandboxes stayed under its baseline plus the pool times one sandbox's cap
    assert errors == []
    assert set(Task.objects.values_list("state", flat=True)) == {"completed"}
    # On a loaded machine a transform may pass its wall-clock limit: then its hook's error is
    # published instead. None is lost, and enough ran whole for the peak to be a real one.
    done = Message.objects.filter(cluster_id=cid, topic="HEAVY_DONE").count()
    failed = Message.objects.filter(cluster_id=cid, topic="AGENT_ERROR").count()
    assert done + failed == COMPLETES
    assert done >= POOL_SIZE_DEFAULT
    bound = baseline + POOL_SIZE_DEFAULT * (MEMORY_LIMIT_BYTES + SANDBOX_OVERHEAD_BYTES)
    print(
        f"\n{COMPLETES} heavy completes ({done} transforms whole) in {seconds:.1f} s: at most "
        f"{most_sandboxes} sandbox "
        f"processes, peak RSS {most_rss / 2**20:.0f} MiB (baseline {baseline / 2**20:.0f} MiB, "
        f"bound {bound / 2**20:.0f} MiB)"
    )
    assert 1 <= most_sandboxes <= POOL_SIZE_DEFAULT
    assert most_rss <= bound
