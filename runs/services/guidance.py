"""An operator's guidance to a running cluster (SPEC §7.8): one agent's mailbox, or every one's.

As zeroshot's ``sendGuidanceToAgent`` / ``sendGuidanceToCluster`` (``src/orchestrator.js``):
the guidance is a ledger message, ``USER_GUIDANCE_AGENT`` with ``receiver`` = the agent or
``USER_GUIDANCE_CLUSTER`` to all, sent by ``user``, with ``metadata.delivery``. It triggers
what any message triggers (zeroshot's agents see it on the bus like any other); the context
engine puts it into each addressed agent's next prompt (``context.guidance``).
"""

from __future__ import annotations

from ledger import interfaces as ledger
from ledger.interfaces import (
    JSON,
    ClusterState,
    Conflict,
    InvalidInput,
    MessageDraft,
    MessageRecord,
    Topic,
)

# Guidance is read by a model on each addressed agent's next prompt; up to 16 of them can go
# into one (context.guidance.GUIDANCE_PER_BUILD), so one is a note, not a document.
GUIDANCE_TEXT_MAX = 8000
GUIDANCE_SENDER = "user"


def guidance_send(
    *,
    cluster_id: str,
    text: str,
    agent: str | None = None,
    source: str = "api",
    by: str | None = None,
) -> MessageRecord:
    """Publish guidance to ``agent`` (one of the cluster's agents) or, without one, to all.

    ``InvalidInput`` for an empty or too long text or an agent the cluster does not have;
    ``Conflict`` when the cluster is not running (nobody would read it); ``NotFound`` for an
    unknown cluster.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the guidance needs a text", details={"field": "text"})
    if len(text) > GUIDANCE_TEXT_MAX:
        raise InvalidInput(
            f"the guidance is longer than {GUIDANCE_TEXT_MAX:,} characters",
            details={"field": "text", "limit": GUIDANCE_TEXT_MAX},
        )
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    if agent is not None:
        known = [str(a.get("id")) for a in cluster.agents]
        if agent not in known:
            raise InvalidInput(
                f"cluster {cluster_id!r} has no agent {agent!r} (agents: {', '.join(known)})",
                details={"field": "agent", "agents": known},
                code="unknown_agent",
            )
    # zeroshot's metadata.delivery: this server never injects into a running agent, so the
    # guidance waits for each addressed agent's next prompt.
    metadata: dict[str, JSON] = {
        "source": source,
        "delivery": {"status": "queued", "method": None, "timestamp": ledger.now_ms()},
    }
    if by:
        metadata["by"] = by
    draft = MessageDraft(
        topic=Topic.USER_GUIDANCE_AGENT if agent is not None else Topic.USER_GUIDANCE_CLUSTER,
        sender=GUIDANCE_SENDER,
        receiver=agent if agent is not None else "broadcast",
        content={"text": text},
        metadata=metadata,
    )
    ledger.drafts_check([draft], single=True)
    with ledger.cluster_transaction(cluster_id) as writer:
        if writer.state != ClusterState.RUNNING:
            raise Conflict(
                f"cluster {cluster_id!r} is not running (it is {writer.state}): "
                "guidance is read by its agents' next prompts",
                details={"state": writer.state},
            )
        (message,) = writer.append([draft], now=ledger.now_ms(), single=True)
    return message
