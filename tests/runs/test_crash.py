"""A server that dies right after a commit loses nothing: the next run catches up, once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.interfaces import cluster_create
from ledger.pipeline import clusters_lagging, pipeline
from runs.models import Task
from tests.conftest import subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]

# Publishes a trigger, then dies by SIGKILL before any pipeline of its own could run.
SCRIPT = """
import os, signal, django
django.setup()
from ledger.interfaces import MessageDraft, message_publish
message_publish(cluster_id="crash", draft=MessageDraft(topic="GO", sender="system"))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_trigger_committed_by_a_process_killed_right_after_queues_its_task_once(
    tmp_path: Path,
) -> None:
    # given a running cluster whose worker triggers on GO
    worker = {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
    }
    cluster_create(cluster_id="crash", config={"agents": [worker]}, state="running")
    # when another process commits a trigger and is killed before reacting to it
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.test_settings",
        "ZEROSHOT_DATA_DIR": str(tmp_path),
        "ZEROSHOT_PIPELINE": "off",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=REPO, capture_output=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    # then the commit is there but no task yet, and the next run (a restart's sweep) queues it
    assert Task.objects.count() == 0
    assert clusters_lagging() == ["crash"]
    pipeline.run("crash")
    pipeline.run("crash")
    assert Task.objects.count() == 1
    assert clusters_lagging() == []
