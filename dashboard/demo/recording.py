"""Recording the demo: each scenario run from its template through the real task path.

``demo_record`` creates each cluster from its template (``cluster_create_from_template``), starts
it with its issue, and answers its tasks in process with ``task_claim`` / ``task_output`` /
``task_complete``, as a runner would: triggers, hooks, snapshots, the failure policy and the
completion rule are the server's own. What comes out (the cluster's config, params and state,
its messages, and which builds its agents were given) is written once to ``recorded.json``;
``loading.demo_load`` reads that file, so ``make run`` stays fast. Re-record with
``python manage.py demo --record`` on an empty database (``make demo-record``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

from django.test import override_settings

from context.models import ContextBuild
from context.services.templates import cluster_create_from_template
from dashboard.demo.scenarios import SCENARIOS, Scenario
from ledger.interfaces import cluster_get, message_query
from runs.models import OPEN_STATES, Task
from runs.services import cluster_start
from runs.services.tasks import task_claim, task_complete, task_output

RECORDED: Final = Path(__file__).resolve().parent / "recorded.json"
RECORDER: Final = "demo-recorder"
# A scenario that would loop forever is a mistake in it, not a demo.
MOST_TASKS: Final = 60


def _run(scenario: Scenario) -> None:
    cluster_create_from_template(
        template_name=scenario.template,
        params=scenario.params,
        cluster_id=scenario.id,
        labels={"pool": "demo"},
    )
    cluster_start(cluster_id=scenario.id, issue={"title": scenario.title, "text": scenario.text})
    answered: dict[str, int] = defaultdict(int)
    for done in range(MOST_TASKS):
        if scenario.tasks is not None and done >= scenario.tasks:
            return
        claim = task_claim(cluster_id=scenario.id, worker=RECORDER)
        if claim is None:
            return
        task = claim.task
        answers = scenario.answers[task.agent_id]
        answer = answers[min(answered[task.agent_id], len(answers) - 1)]
        answered[task.agent_id] += 1
        if answer.output:
            task_output(task_id=task.id, lease_id=task.lease_id, lines=list(answer.output))
        task_complete(
            task_id=task.id, lease_id=task.lease_id, result=answer.result, usage=answer.usage
        )
    raise RuntimeError(f"demo scenario {scenario.id!r} did not end within {MOST_TASKS} tasks")


def _recorded(scenario: Scenario) -> dict[str, Any]:
    cluster = cluster_get(cluster_id=scenario.id)
    messages = message_query(cluster_id=scenario.id, limit=None)
    start = cluster.created_at
    sequence_at = {m.id: m.sequence for m in messages}
    builds = []
    for build in ContextBuild.objects.filter(cluster_id=scenario.id).order_by("started_at", "pk"):
        # What the build could see: every message stored up to the moment it was made.
        seen = [m.sequence for m in messages if m.timestamp <= build.started_at]
        builds.append(
            {
                "agent_id": build.agent_id,
                "iteration": build.iteration,
                "trigger_sequence": sequence_at.get(build.trigger_message_id),
                "as_of_sequence": max(seen) if seen else None,
                "reported_usage": build.reported_usage,
            }
        )
    open_tasks = Task.objects.filter(cluster_id=scenario.id, state__in=OPEN_STATES)
    return {
        "id": cluster.id,
        "template": cluster.template,
        "params": cluster.params,
        "config": cluster.config,
        "state": cluster.state,
        "minutes_ago": scenario.minutes_ago,
        # A cluster left running: the message that queued its open task is published again
        # when the demo loads, so the server queues that task as the run did.
        "open_trigger_sequence": min((t.trigger_sequence for t in open_tasks), default=None),
        "messages": [
            {
                "id": m.id,
                "offset_ms": m.timestamp - start,
                "topic": m.topic,
                "sender": m.sender,
                "receiver": m.receiver,
                "content": m.content,
                "metadata": m.metadata,
            }
            for m in messages
        ],
        "builds": builds,
    }


def demo_record(path: Path = RECORDED) -> list[str]:
    """Run every scenario from its template and write what happened to ``path``.

    Needs a database without the demo's clusters (a fresh one: ``make demo-record``).
    """
    with override_settings(PIPELINE_MODE="inline"):
        for scenario in SCENARIOS:
            _run(scenario)
    clusters = [_recorded(scenario) for scenario in SCENARIOS]
    text = json.dumps({"version": 1, "clusters": clusters}, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return [c["id"] for c in clusters]


def demo_recorded(path: Path = RECORDED) -> list[dict[str, Any]]:
    """The recorded demo clusters."""
    clusters: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["clusters"]
    return clusters
