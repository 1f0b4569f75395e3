"""Small helpers of the runner's tests: claims, agent scripts, and watching processes."""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zeroshot_runner.providers.base import Job
from zeroshot_runner.records import Claim, claim_from_wire


def claim_for(
    *, prompt: str = "Fix the bug.", iteration: int = 1, agent_id: str = "worker", **agent: Any
) -> Claim:
    """A claim as the server would hand it over."""
    return claim_from_wire(
        {
            "task": {
                "id": "task_" + "a" * 32,
                "lease_id": "lease-1",
                "cluster": "c1",
                "agent_id": agent_id,
                "iteration": iteration,
            },
            "prompt": prompt,
            "metrics": {},
            "agent": {"id": agent_id, "role": "worker", "prompt": "You work.", **agent},
        }
    )


class Lines:
    """Collects what a provider emits."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


def job_for(claim: Claim, stop: threading.Event | None = None) -> tuple[Job, Lines]:
    lines = Lines()
    return Job(claim=claim, emit=lines, stop=stop or threading.Event()), lines


# Given to every agent script: the test reads the pids whole, or not at all.
RECORD_PIDS = """
def record_pids(path, *pids):
    import os
    with open(path + ".tmp", "w") as file:
        file.write(" ".join(map(str, pids)))
    os.replace(path + ".tmp", path)
"""


def agent_script(tmp_path: Path, source: str, name: str = "agent.py") -> str:
    """Write a Python agent to ``tmp_path`` and return the shell command that runs it."""
    path = tmp_path / name
    path.write_text(RECORD_PIDS + textwrap.dedent(source), encoding="utf-8")
    return shlex.join([sys.executable, str(path)])


def running(pid: int) -> bool:
    """Whether the process still runs; a zombie (dead, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # An orphan is handed to PID 1, which here may never reap it: it stays a zombie.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def pids_in(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()] if path.exists() else []


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
