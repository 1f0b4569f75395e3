"""What every provider implements, and what it is given for one task."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zeroshot_runner.records import Claim, Outcome


@dataclass(frozen=True, slots=True)
class Job:
    """One task to run: the claim, a sink for output lines, and the signal to stop early.

    ``stop`` is set when the runner shuts down or loses the task's lease; a provider then ends
    its agent as fast as it safely can and returns any outcome (the runner decides what to send).
    ``workdir`` is the cluster's workspace (``--workspace worktree``): every agent of the
    cluster runs there; ``None`` runs it in the runner's own directory.
    """

    claim: Claim
    emit: Callable[[str], None]
    stop: threading.Event
    workdir: Path | None = None


class Provider(Protocol):
    """Runs agents; ``run`` is called from several threads at once."""

    def run(self, job: Job) -> Outcome:
        """Run the job's agent to its outcome; never raises for an agent's own failure."""
        ...

    def close(self) -> None:
        """Release what the provider holds (connections)."""
        ...
