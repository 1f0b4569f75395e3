"""Loading the demo clusters from their recording (``recorded.json``, see ``recording``).

Each cluster is created with the config, params and template its recorded run had, its messages
are imported in one batch with their ids, spread over the cluster's age so that the timeline and
the metrics page read as a run that took that long, and every build the run recorded is made
again as of the same message, so that the inspector, the builds list and the metrics have real
decisions to show. A cluster recorded while still running gets the message that queued its open
task published again, so the server queues that task as the run did (``make run``'s scripted
runner then takes it).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.test import override_settings

from context.models import ContextBuild
from context.services import context_build
from dashboard.demo.recording import demo_recorded
from ledger.interfaces import (
    ImportedMessage,
    MessageDraft,
    cluster_create,
    cluster_exists,
    cluster_state_set,
    message_import_batch,
    message_publish,
    now_ms,
)

DEMO_USERNAME = "operator"
DEMO_PASSWORD = "zeroshot-demo"  # for local use only; the README says so


def demo_operator_ensure() -> bool:
    """Create the demo operator (a superuser) unless it exists; True when created."""
    user_model = get_user_model()
    if user_model.objects.filter(username=DEMO_USERNAME).exists():
        return False
    user_model.objects.create_superuser(DEMO_USERNAME, password=DEMO_PASSWORD)
    return True


def demo_load() -> int:
    """Load every recorded demo cluster that is not there yet; returns how many were added."""
    added = 0
    for recorded in demo_recorded():
        if cluster_exists(cluster_id=recorded["id"]):
            continue
        _load(recorded)
        added += 1
    return added


def _load(recorded: dict[str, Any]) -> None:
    cluster_id = recorded["id"]
    messages = recorded["messages"]
    open_at = recorded.get("open_trigger_sequence")
    kept = messages if open_at is None else messages[: open_at - 1]
    start = now_ms() - recorded["minutes_ago"] * 60_000
    # The run took milliseconds; the demo spreads it over the cluster's age, in order.
    step = max(2, recorded["minutes_ago"] * 60_000 // (len(messages) + 2))
    cluster_create(
        cluster_id=cluster_id,
        config=recorded["config"],
        template=recorded["template"],
        params=recorded["params"],
        created_at=start,
        # The demo's runner pool: `make run`'s scripted runner serves it, and only it.
        labels={"pool": "demo"},
    )
    times = [start + (i + 1) * step for i in range(len(messages))]
    ids: dict[int, str] = {}
    imported = 0

    def import_through(sequence: int) -> None:
        nonlocal imported
        batch = kept[imported:sequence]
        if not batch:
            return
        stored = message_import_batch(
            cluster_id=cluster_id,
            messages=[
                ImportedMessage(
                    id=m["id"],
                    timestamp=times[imported + i],
                    topic=m["topic"],
                    sender=m["sender"],
                    receiver=m["receiver"],
                    content=m["content"],
                    metadata=m["metadata"],
                )
                for i, m in enumerate(batch)
            ],
            assume_absent=True,
        )
        ids.update((record.sequence, record.id) for record in stored)
        imported += len(batch)

    for n, build in enumerate(recorded["builds"]):
        trigger, as_of = build["trigger_sequence"], build["as_of_sequence"]
        if trigger is None or as_of is None or as_of > len(kept) or as_of < imported:
            continue  # a build of the open task: the server makes it when the task is claimed
        # A build is recorded only of the ledger as it stands: import up to what it saw.
        import_through(as_of)
        made = context_build(
            cluster_id=cluster_id,
            agent_id=build["agent_id"],
            iteration=build["iteration"],
            triggering_message_id=ids[trigger],
        )
        if made.build_id is not None:
            # Recorded when its task was claimed, not at load time: the metrics page draws
            # builds along their time.
            ContextBuild.objects.filter(pk=made.build_id).update(
                started_at=times[as_of - 1] + 1 + n % 2,
                reported_usage=build["reported_usage"],
            )
    import_through(len(kept))
    cluster_state_set(cluster_id=cluster_id, state=recorded["state"])
    if open_at is not None:
        trigger = messages[open_at - 1]
        with override_settings(PIPELINE_MODE="inline"):
            message_publish(
                cluster_id=cluster_id,
                draft=MessageDraft(
                    topic=trigger["topic"],
                    sender=trigger["sender"],
                    receiver=trigger["receiver"],
                    content=trigger["content"],
                    metadata=trigger["metadata"],
                ),
            )
