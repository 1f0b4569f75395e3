"""Writes of runs: tasks queued, claimed and finished; clusters started and stopped.

Layout: ``queue`` (tasks the pipeline queues, and their cancellation), ``tasks`` (claims under
leases, heartbeats, output, completion, failure), ``clusters`` (start, stop, launch) and
``guidance`` (an operator's guidance to a running cluster's agents).
"""

from __future__ import annotations

from runs.services.clusters import cluster_launch, cluster_start, cluster_stop, issue_draft
from runs.services.guidance import GUIDANCE_TEXT_MAX, guidance_send
from runs.services.tasks import (
    Claim,
    Completion,
    task_claim,
    task_complete,
    task_fail,
    task_heartbeat,
    task_output,
)

__all__ = [
    "GUIDANCE_TEXT_MAX",
    "Claim",
    "Completion",
    "cluster_launch",
    "cluster_start",
    "cluster_stop",
    "guidance_send",
    "issue_draft",
    "task_claim",
    "task_complete",
    "task_fail",
    "task_heartbeat",
    "task_output",
]
