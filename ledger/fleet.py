"""Ledger reads of the fleet and task pages: the active clusters with their newest message, and
the messages one task published. Each is one indexed query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import OuterRef, Q, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Substr

from ledger.models import Cluster, Message
from ledger.records import ClusterRecord, MessageRecord
from ledger.selectors import cluster_record, message_record, storable
from ledger.topics import Topic


@dataclass(frozen=True, slots=True)
class ClusterGlance:
    """A cluster with the topic and sender of its newest message (None before the first)."""

    cluster: ClusterRecord
    last_topic: str | None
    last_sender: str | None


def cluster_glance(*, states: Sequence[str], limit: int) -> tuple[list[ClusterGlance], int]:
    """The clusters in some states, newest first, at most ``limit`` (``cluster_state_created``),
    each with its newest message (one seek on ``msg_cluster_time`` per row, inside the same
    query); and how many clusters are in these states (one count)."""
    newest = Message.objects.filter(cluster_id=OuterRef("pk")).order_by("-timestamp", "-sequence")
    rows = (
        Cluster.objects.filter(state__in=list(states))
        .annotate(
            last_message_at=Subquery(newest.values("timestamp")[:1]),
            last_topic=Subquery(newest.values("topic")[:1]),
            last_sender=Subquery(newest.values("sender")[:1]),
        )
        .order_by("-created_at", "id")[:limit]
    )
    glance = [
        ClusterGlance(cluster=cluster_record(c), last_topic=c.last_topic, last_sender=c.last_sender)
        for c in rows
    ]
    total = len(glance)
    if total == limit:
        total = Cluster.objects.filter(state__in=list(states)).count()
    return glance, total


# Messages of a task shown at most, other than output; output batches at most.
TASK_MESSAGES_MAX = 200
TASK_OUTPUT_MAX = 200
# Characters of each output batch read: the page shows 64,000 per attempt at most.
TASK_OUTPUT_CHARS = 16_000
# Its completion's messages are written a moment after the task ends (the same transaction):
# the window of a finished task reaches this far past its end.
TASK_WINDOW_SLACK_MS = 60_000


@dataclass(frozen=True, slots=True)
class TaskMessages:
    """What one task published, oldest first: lifecycle, usage, errors and its hook's
    messages; and its raw output batches (``AGENT_OUTPUT``), the first ``TASK_OUTPUT_MAX``,
    each cut to its first ``TASK_OUTPUT_CHARS`` characters."""

    messages: tuple[MessageRecord, ...]
    output: tuple[MessageRecord, ...]
    more_output: bool


def task_messages(
    *,
    cluster_id: str,
    agent_id: str,
    task_id: str,
    since: int,
    until: int | None,
    message_ids: Sequence[str] = (),
) -> TaskMessages:
    """The messages of one task: sent by its agent between ``since`` and ``until`` (its life,
    ``msg_cluster_sender``) and naming it (``content.data.taskId``) or being one of
    ``message_ids`` (what its completion published). Two queries."""
    if not (storable(agent_id) and storable(task_id)):
        return TaskMessages(messages=(), output=(), more_output=False)
    window = Message.objects.filter(cluster_id=cluster_id, sender=agent_id, timestamp__gte=since)
    if until is not None:
        window = window.filter(timestamp__lte=until + TASK_WINDOW_SLACK_MS)
    ids = [i for i in message_ids if storable(i)]
    own = Q(content__data__taskId=task_id) | Q(message_id__in=ids)
    messages = (window.exclude(topic=Topic.AGENT_OUTPUT).filter(own).order_by("sequence"))[
        :TASK_MESSAGES_MAX
    ]
    # Output is the agent's to size: each batch is read cut to its first characters.
    output = list(
        window.filter(topic=Topic.AGENT_OUTPUT, content__data__taskId=task_id)
        .annotate(
            head=Substr(KeyTextTransform("text", "content"), 1, TASK_OUTPUT_CHARS),
            lines=KeyTextTransform("lines", "content__data"),
        )
        .order_by("sequence")
        .values_list("message_id", "sequence", "timestamp", "head", "lines")[: TASK_OUTPUT_MAX + 1]
    )
    return TaskMessages(
        messages=tuple(message_record(m, cluster_id=cluster_id) for m in messages),
        output=tuple(
            MessageRecord(
                id=message_id,
                cluster_id=cluster_id,
                sequence=sequence,
                timestamp=timestamp,
                topic=Topic.AGENT_OUTPUT,
                sender=agent_id,
                content={
                    "text": head or "",
                    "data": {"taskId": task_id, "lines": _lines(lines)},
                },
            )
            for message_id, sequence, timestamp, head, lines in output[:TASK_OUTPUT_MAX]
        ),
        more_output=len(output) > TASK_OUTPUT_MAX,
    )


def _lines(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0
