"""Loading the demo clusters: history as it would have happened, builds and snapshots included.

Messages are imported one by one with their past timestamps. After each one, the state snapshot a
live run would have published is imported right behind it (1 ms later), and every agent the
message triggers gets a recorded context build, so that the dashboard's inspector, builds list
and metrics have real decisions to show.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model

from context.agents import agents_parse
from context.models import ContextBuild
from context.services import context_build
from dashboard.demo.data import CLUSTERS
from ledger.interfaces import (
    JSON,
    ImportedMessage,
    MessageRecord,
    cluster_create,
    cluster_exists,
    cluster_state_set,
    message_import_batch,
    now_ms,
)
from snapshots.state import (
    SNAPSHOT_SENDER,
    SNAPSHOT_TOPIC,
    SNAPSHOT_TRIGGER_TOPICS,
    snapshot_apply,
    snapshot_content,
    snapshot_equal,
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


def _triggered_agents(agents: list[dict[str, Any]], topic: str) -> list[str]:
    return [agent.id for agent in agents_parse(agents) if agent.triggered_by(topic)]


def _import_one(cluster_id: str, message: ImportedMessage) -> None:
    message_import_batch(cluster_id=cluster_id, messages=[message])


def demo_load() -> int:
    """Load every demo cluster that is not there yet; returns how many were added."""
    added = 0
    for spec in CLUSTERS:
        if cluster_exists(cluster_id=spec["id"]):
            continue
        start = now_ms() - spec["minutes_ago"] * 60_000
        cluster_create(
            cluster_id=spec["id"],
            config={"agents": spec["agents"]},
            template=spec["template"],
            created_at=start,
            # The demo's runner pool: `make run`'s scripted runner serves it, and only it.
            labels={"pool": "demo"},
        )
        step = max(2, spec["minutes_ago"] * 60_000 // (len(spec["messages"]) + 2))
        state: dict[str, JSON] | None = None
        for i, raw in enumerate(spec["messages"]):
            message = ImportedMessage(
                id=f"msg_{secrets.token_hex(16)}",
                timestamp=start + (i + 1) * step,
                topic=raw["topic"],
                sender=raw["sender"],
                receiver=raw.get("receiver", "broadcast"),
                content=raw.get("content", {}),
                metadata=raw.get("metadata"),
            )
            _import_one(spec["id"], message)
            if message.topic in SNAPSHOT_TRIGGER_TOPICS:
                state = _snapshot_after(spec["id"], message, state)
            for n, agent_id in enumerate(_triggered_agents(spec["agents"], message.topic)):
                build = context_build(
                    cluster_id=spec["id"], agent_id=agent_id, triggering_message_id=message.id
                )
                # Recorded when the message came in, as a live run would have, not at load
                # time: the metrics page draws builds along their time.
                if build.build_id is not None:
                    ContextBuild.objects.filter(pk=build.build_id).update(
                        started_at=message.timestamp + 1 + n
                    )
        cluster_state_set(cluster_id=spec["id"], state=spec["state"])
        added += 1
    return added


def _snapshot_after(
    cluster_id: str, message: ImportedMessage, state: dict[str, JSON] | None
) -> dict[str, JSON] | None:
    """Import the snapshot a live run would publish after ``message``, if the state changed."""
    record = MessageRecord(
        id=message.id,
        cluster_id=cluster_id,
        sequence=0,
        timestamp=message.timestamp,
        topic=message.topic,
        sender=message.sender,
        receiver=message.receiver,
        content=message.content,
        metadata=message.metadata,
    )
    new_state = snapshot_apply(state, record, cluster_id=cluster_id)
    if state is not None and snapshot_equal(new_state, state):
        return state
    _import_one(
        cluster_id,
        ImportedMessage(
            id=f"msg_{secrets.token_hex(16)}",
            timestamp=message.timestamp + 1,
            topic=SNAPSHOT_TOPIC,
            sender=SNAPSHOT_SENDER,
            receiver="broadcast",
            content=snapshot_content(new_state),
            metadata=None,
        ),
    )
    return new_state
